# tb_compat.tcl -- nestbed's stub of the Emulab and nestbed commands for plain ns-2.
#
# Put this file beside an experiment file and run `ns FILE`: the same file that nestbed
# emulates then runs in the ns-2 simulator, as with Emulab's nstb_compat.tcl. (nestbed itself
# never loads this file: its front end defines these commands with their full meaning.)
#
# What it does in ns-2:
#   - tb-* and nb-* commands do nothing (they describe the testbed, not the simulation);
#   - `$ns duplex-link` returns a link object with up, down, bandwidth, delay, plr and reset,
#     so events such as "$link0 down" work; GRED queues become RED with gentle_ set;
#   - `$ns make-lan` returns ns-2's LAN object, given the same event methods (LAN events
#     other than `$lan down`/`up` are accepted and do nothing);
#   - Program, `$node program-agent`, event timelines, sequences and groups exist (programs
#     cannot run in a simulator, so their events do nothing);
#   - `$ns rtproto ospf` becomes Session; `$node add-route NODE NEXTHOP` is ignored (ns-2
#     computes routes itself); times like 1h20m3s are accepted by `$ns at`;
#   - `$ns make-simulated`, `define-template-parameter`, halt-like event verbs (terminate,
#     swapout) and log/message/linktest work.

# --- Emulab and nestbed commands that mean nothing to the simulator ---------------------------

foreach nb_cmd {
    tb-set-ip tb-set-ip-interface tb-set-ip-link tb-set-ip-lan tb-set-netmask tb-set-ip-routing
    tb-set-node-os tb-set-hardware tb-set-link-loss tb-set-lan-loss tb-set-link-simplex-params
    tb-set-lan-simplex-params tb-set-node-lan-delay tb-set-node-lan-bandwidth
    tb-set-node-lan-loss tb-set-node-lan-params tb-set-node-startcmd tb-set-node-startup
    tb-set-node-tarfiles tb-set-tarfiles tb-set-node-rpms tb-set-node-cmdline
    tb-set-node-failure-action tb-set-link-failure-action tb-fix-node tb-set-noshaping
    tb-set-endnodeshaping tb-use-endnodeshaping tb-force-endnodeshaping tb-set-sync-server
    tb-make-soft-vtype tb-make-hard-vtype tb-make-weighted-vtype tb-set-colocate-factor
    tb-set-cpu-usage tb-set-mem-usage tb-set-link-est-bandwidth tb-set-lan-est-bandwidth
    tb-set-multiplexed tb-set-useveth tb-set-link-encap tb-set-allowcolocate
    tb-set-security-level tb-use-ipassign tb-add-node-attribute tb-elab-in-elab
    tb-set-node-memsize tb-set-link-backfill tb-set-lan-backfill tb-set-link-simplex-backfill
    tb-set-node-lan-est-bandwidth tb-set-node-lan-backfill tb-set-uselatestwadata
    tb-set-usewatunnels tb-set-wasolver-weights tb-set-node-usesharednode
    tb-set-node-sharingmode tb-set-node-service tb-add-node-service-hook tb-bind-parent
    tb-fix-current-resources tb-set-encapsulate tb-set-jail-os tb-set-delay-os
    tb-set-delay-capacity tb-set-ipassign-args tb-set-dpdb tb-set-elabinelab-cvstag
    tb-elabinelab-singlenet tb-set-elabinelab-attribute tb-unset-elabinelab-attribute
    tb-set-node-plab-role tb-set-node-plab-plcnet tb-use-physnaming tb-set-modelnet-cores
    tb-set-modelnet-edges tb-set-node-deltas tb-set-lan-protocol tb-set-link-protocol
    tb-set-lan-accesspoint tb-set-lan-setting tb-set-node-lan-setting tb-feedback-vnode
    tb-feedback-vlan tb-set-vlink-emulation tb-set-node-id tb-set-node-inner-elab-role
    nb-set-node-cpu nb-set-node-cpu-pin nb-set-node-memory nb-set-node-sysctl
    nb-set-link-jitter nb-set-link-reorder nb-set-link-gilbert nb-set-link-gilbert-elliott
    nb-set-link-drop-packets nb-set-link-duplicate nb-set-link-corrupt
} {
    proc $nb_cmd {args} {}
}
unset nb_cmd

# --- Helpers ----------------------------------------------------------------------------------

# Seconds from an event time: a number, or Emulab's 1h20m3s form.
proc nb_time {spec} {
    if {[string is double -strict $spec]} { return $spec }
    if {![regexp {^(?:([0-9.]+)h)?(?:([0-9.]+)m)?(?:([0-9.]+)s)?$} $spec -> h m s]} {
        error "event time '$spec' is neither seconds nor like 1h20m3s"
    }
    set total 0.0
    foreach value [list $h $m $s] factor {3600 60 1} {
        if {$value ne ""} { set total [expr {$total + $value * $factor}] }
    }
    return $total
}

# Keeps ns-2's own instproc NAME of CLASS as NEWNAME (once), so it can be wrapped.
proc nb_keep_instproc {class name newname} {
    if {[$class info instprocs $newname] ne ""} { return }
    set spec {}
    foreach a [$class info instargs $name] {
        if {[$class info instdefault $name $a default]} {
            lappend spec [list $a $default]
        } else {
            lappend spec $a
        }
    }
    $class instproc $newname $spec [$class info instbody $name]
}

# An object that accepts every method and does nothing.
Class NBNothing
NBNothing instproc unknown {args} {}

# --- Links ------------------------------------------------------------------------------------

Class NBLink

NBLink instproc init {ns a b} {
    $self instvar ns_ a_ b_
    set ns_ $ns
    set a_ $a
    set b_ $b
}

# The two ns-2 SimpleLinks of this duplex link.
NBLink instproc simplex-links {} {
    $self instvar ns_ a_ b_
    return [list [$ns_ link $a_ $b_] [$ns_ link $b_ $a_]]
}

NBLink instproc down {} {
    foreach l [$self simplex-links] { $l down }
}

NBLink instproc up {} {
    foreach l [$self simplex-links] { $l up }
}

NBLink instproc bandwidth {bw} {
    foreach l [$self simplex-links] { [$l link] set bandwidth_ [bw_parse $bw] }
}

NBLink instproc delay {d} {
    foreach l [$self simplex-links] { [$l link] set delay_ [time_parse $d] }
}

# Packet loss probability: an ErrorModel per direction, made on first use.
NBLink instproc plr {p} {
    $self instvar ns_ a_ b_ errmodels_
    if {![info exists errmodels_]} {
        set errmodels_ {}
        foreach {from to} [list $a_ $b_ $b_ $a_] {
            set em [new ErrorModel]
            $em unit pkt
            $em ranvar [new RandomVariable/Uniform]
            $em drop-target [new Agent/Null]
            $ns_ lossmodel $em $from $to
            lappend errmodels_ $em
        }
    }
    foreach em $errmodels_ { $em set rate_ $p }
}

NBLink instproc reset {} {}
NBLink instproc unknown {args} {}

nb_keep_instproc Simulator duplex-link nb-ns-duplex-link

# nestbed writes bandwidth 0 for "unlimited"; ns-2 has no such rate (0 divides by zero), so
# it becomes a rate far above anything simulated.
proc nb_unlimited {bw} {
    if {[string is double -strict $bw] && $bw == 0} { return 1000Gb }
    return $bw
}

# A queue type ns-2 does not know becomes DropTail, as Emulab's parser does.
proc nb_queue_type {type} {
    if {[catch {Queue/$type info class}]} {
        puts stderr "warning: queue type '$type' is not supported; using DropTail, as Emulab does"
        return DropTail
    }
    return $type
}

Simulator instproc duplex-link {n1 n2 bw delay type args} {
    set bw [nb_unlimited $bw]
    set type [nb_queue_type $type]
    set gentle [expr {$type eq "GRED"}]
    if {$gentle} { set type RED }
    eval [list $self nb-ns-duplex-link $n1 $n2 $bw $delay $type] $args
    foreach {a b} [list $n1 $n2 $n2 $n1] {
        [$self link $a $b] dynamic
        if {$gentle} { [[$self link $a $b] queue] set gentle_ true }
    }
    return [new NBLink $self $n1 $n2]
}

# --- LANs -------------------------------------------------------------------------------------

nb_keep_instproc Simulator make-lan nb-ns-make-lan

Simulator instproc make-lan {args} {
    lset args 1 [nb_unlimited [lindex $args 1]]
    set i [lsearch -exact $args Queue/GRED]
    if {$i >= 0} { set args [lreplace $args $i $i Queue/RED] }
    return [eval [list $self nb-ns-make-lan] $args]
}

# LanNode's own delay and reset (configuration methods) are kept.
foreach nb_verb {up down bandwidth delay plr reset} {
    if {[LanNode info instprocs $nb_verb] eq ""} {
        LanNode instproc $nb_verb {args} {}
    }
}
unset nb_verb

# One direction of a LAN: its queue (and anything else) accepts every method.
Class NBLanLink -superclass NBNothing
NBLanLink instproc queue {} { return [new NBNothing] }

Simulator instproc lanlink {lan node} {
    return [new NBLanLink]
}

# --- Routing ----------------------------------------------------------------------------------

nb_keep_instproc Simulator rtproto nb-ns-rtproto

Simulator instproc rtproto {proto args} {
    if {[string tolower $proto] eq "ospf"} { set proto Session }
    eval [list $self nb-ns-rtproto $proto] $args
}

nb_keep_instproc Node add-route nb-ns-add-route

# Emulab's `$node add-route DST NEXTHOP` names objects; ns-2's own add-route takes addresses.
Node instproc add-route {dst target} {
    if {[info commands $dst] ne "" && ![catch {$dst info class} cls]} {
        foreach c [concat $cls [$cls info heritage]] {
            if {$c in {Node NBLink LanNode}} { return }
        }
    }
    $self nb-ns-add-route $dst $target
}

# --- Events -----------------------------------------------------------------------------------

nb_keep_instproc Simulator at nb-ns-at

Simulator instproc at {time args} {
    eval [list $self nb-ns-at [nb_time $time]] $args
}

foreach nb_verb {terminate swapout} {
    if {[Simulator info instprocs $nb_verb] eq ""} {
        Simulator instproc $nb_verb {} { $self halt }
    }
}
foreach nb_verb {log message} {
    if {[Simulator info instprocs $nb_verb] eq ""} {
        Simulator instproc $nb_verb {args} { puts "[$self now]: [join $args]" }
    }
}
unset nb_verb
if {[Simulator info instprocs linktest] eq ""} {
    Simulator instproc linktest {args} {}
}

Class NBTimeline
NBTimeline instproc init {ns} {
    $self instvar ns_ events_
    set ns_ $ns
    set events_ {}
}
NBTimeline instproc at {time script} {
    $self instvar events_
    lappend events_ [list [nb_time $time] $script]
}
NBTimeline instproc start {} {
    $self instvar ns_ events_
    foreach e $events_ {
        $ns_ at [expr {[$ns_ now] + [lindex $e 0]}] [lindex $e 1]
    }
}
NBTimeline instproc run {} { $self start }
NBTimeline instproc unknown {args} {}

# A sequence runs its steps one after the other; in the simulator they take no time.
Class NBSequence
NBSequence instproc init {ns {script ""}} {
    $self instvar steps_
    set steps_ $script
}
NBSequence instproc append {script} {
    $self instvar steps_
    append steps_ "\n" $script
}
NBSequence instproc start {} {
    $self instvar steps_
    uplevel #0 $steps_
}
NBSequence instproc run {} { $self start }
NBSequence instproc unknown {args} {}

# A group passes every event to each of its members.
Class NBGroup
NBGroup instproc init {ns {members ""}} {
    $self instvar members_
    set members_ $members
}
NBGroup instproc add {args} {
    $self instvar members_
    foreach a $args { eval lappend members_ $a }
}
NBGroup instproc unknown {verb args} {
    $self instvar members_
    foreach m $members_ { eval [list $m $verb] $args }
}

Simulator instproc event-timeline {} { return [new NBTimeline $self] }
Simulator instproc event-sequence {{script ""}} { return [new NBSequence $self $script] }
Simulator instproc event-group {{members ""}} { return [new NBGroup $self $members] }
# Emulab's `new EventGroup $ns`.
Class EventGroup -superclass NBGroup

# Emulab's block stores mean nothing to the simulator.
Simulator instproc blockstore {args} { return [new NBNothing] }

# --- Programs ---------------------------------------------------------------------------------

# A program cannot run in a simulator: its events are accepted and do nothing.
Class Program
Program instproc init {args} {}
foreach nb_verb {start run stop kill reset} {
    Program instproc $nb_verb {args} {}
}
unset nb_verb

Node instproc program-agent {args} {
    set prog [new Program [Simulator instance]]
    $prog set node $self
    foreach {option value} $args {
        $prog set [string range $option 1 end] $value
    }
    return $prog
}

# --- Templates and simulated parts ------------------------------------------------------------

Simulator instproc define-template-parameter {name default args} {
    uplevel #0 [list set $name $default]
}

Simulator instproc make-simulated {body} {
    uplevel 1 $body
}
