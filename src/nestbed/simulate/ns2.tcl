# ns2.tcl -- what `nestbed simulate` adds to tb_compat.tcl inside ns-2.
#
# Loaded after the stub (src/nestbed/spec/ns/tb_compat.tcl) by the main script that
# nestbed.simulate.ns2 writes; that script sets nb_sim(...) first:
#   nb_sim(trace)      where the trace goes (a FIFO that nestbed reads while ns runs)
#   nb_sim(file)       the experiment file, run unchanged
#   nb_sim(overrides)  parameter overrides, NAME VALUE ... (opt(NAME), template parameters)
#   nb_sim(shaping)    each duplex link's shaping as nestbed resolved it: key "I J K" (node
#                      creation indexes I < J, K-th link between them) -> FROM-INDEX -> settings
#   nb_sim(duration)   seconds after which the simulation stops, or ""
#
# What it adds to the stub:
#   - every link is traced (ns-2's trace-all), made dynamic first so that up/down drops are
#     traced too; the file's own trace-all and namtrace-all are ignored (one trace, ours);
#   - the file's links get the shaping nestbed resolved (tb-set-link-loss,
#     tb-set-link-simplex-params, auto queue limits, RED parameters, drop by ordinal), which
#     the stub alone leaves out; `reset` and `queue-set` events act;
#   - drop-by-ordinal drops are traced as event "o", so they are told apart from random loss;
#   - the trace starts with "#nb" lines naming ns-2's objects in creation order (nodes, links,
#     LANs, agents) and ends with "#nb end TIME HOW", so the reader maps ids to nestbed names;
#   - the simulation ends at $ns halt, after the duration, or after the file's last event.

set nb_sim(fd) [open $nb_sim(trace) w]
fconfigure $nb_sim(fd) -buffering full -buffersize 262144 -translation lf
set nb_sim(nodes) {}
set nb_sim(links) {}
set nb_sim(agents) {}
set nb_sim(lans) {}
set nb_sim(pairs) {}
set nb_sim(last_at) 0.0
set nb_sim(halted) 0
set nb_sim(ended) 0
set nb_sim(traced) 0

proc nb_sim_put {args} {
    global nb_sim
    puts $nb_sim(fd) "#nb [join $args]"
}

# Writes the last line and closes the trace (once), however the simulation ends.
proc nb_sim_end {how} {
    global nb_sim
    if {$nb_sim(ended)} { return }
    set nb_sim(ended) 1
    set now 0
    catch { set now [[Simulator instance] now] }
    nb_sim_put end $now $how
    close $nb_sim(fd)
}

# --- Parameters -------------------------------------------------------------------------------

# opt(NAME) takes the override whenever the file sets it (a write trace, as cheap as it gets:
# ns-2's own library uses `set` far too often to wrap it).
proc nb_sim_opt {name1 name2 op} {
    global nb_sim
    if {$name2 ne "" && [dict exists $nb_sim(overrides) $name2]} {
        upvar 1 $name1 var
        set var($name2) [dict get $nb_sim(overrides) $name2]
    }
}
trace add variable ::opt write nb_sim_opt

Simulator instproc define-template-parameter {name default args} {
    global nb_sim
    if {[dict exists $nb_sim(overrides) $name]} { set default [dict get $nb_sim(overrides) $name] }
    uplevel #0 [list set $name $default]
}

# --- Files ------------------------------------------------------------------------------------

# The stub is loaded already; other files are found beside the experiment file.
rename source nb_sim_source
proc source {args} {
    global nb_sim
    set path [lindex $args end]
    if {[file tail $path] eq "tb_compat.tcl"} { return "" }
    if {[file pathtype $path] eq "relative" && ![file exists $path]} {
        lset args end [file join [file dirname $nb_sim(file)] $path]
    }
    return [uplevel 1 [list nb_sim_source {*}$args]]
}

rename exit nb_sim_exit
proc exit {{code 0}} {
    nb_sim_end exit
    nb_sim_exit $code
}

# --- Tracing ----------------------------------------------------------------------------------

nb_keep_instproc Simulator trace-all nb-ns-trace-all
nb_keep_instproc Simulator trace-queue nb-ns-trace-queue
nb_keep_instproc Simulator node nb-ns-node

Simulator instproc trace-all {args} {
    nb_sim_put note the file's own trace-all was ignored: nestbed traces every link itself
}

Simulator instproc namtrace-all {args} {
    nb_sim_put note the file's namtrace-all was ignored
}

# The trace reader reads ns-2's classic format only.
Simulator instproc use-newtrace {args} {
    nb_sim_put note the file's use-newtrace was ignored: nestbed reads the classic trace format
}

# A link is made dynamic before it is traced, so the trace shows up/down and its drops.
Simulator instproc trace-queue {n1 n2 {file ""}} {
    catch { [$self link $n1 $n2] dynamic }
    $self nb-ns-trace-queue $n1 $n2 $file
}

# The first node turns tracing on, so every link made after it is traced.
Simulator instproc node {args} {
    global nb_sim
    if {!$nb_sim(traced)} {
        set nb_sim(traced) 1
        $self nb-ns-trace-all $nb_sim(fd)
    }
    set node [eval [list $self nb-ns-node] $args]
    set nb_sim(index,$node) [llength $nb_sim(nodes)]
    lappend nb_sim(nodes) $node
    return $node
}

# Drops by ordinal get their own event letter, "o".
Class Trace/NbOrdinal -superclass Trace
Trace/NbOrdinal instproc init {} { $self next "o" }

# --- Links: the shaping nestbed resolved ------------------------------------------------------

nb_keep_instproc Simulator duplex-link nb-stub-duplex-link

Simulator instproc duplex-link {n1 n2 args} {
    global nb_sim
    set link [eval [list $self nb-stub-duplex-link $n1 $n2] $args]
    set i $nb_sim(index,$n1)
    set j $nb_sim(index,$n2)
    set pair [lsort -integer [list $i $j]]
    set k 0
    if {[dict exists $nb_sim(pairs) $pair]} { set k [dict get $nb_sim(pairs) $pair] }
    dict set nb_sim(pairs) $pair [expr {$k + 1}]
    lappend nb_sim(links) [list $link $n1 $n2 [concat $pair $k]]
    return $link
}

nb_keep_instproc Simulator make-lan nb-stub-make-lan

Simulator instproc make-lan {args} {
    global nb_sim
    set lan [eval [list $self nb-stub-make-lan] $args]
    set members {}
    foreach n [lindex $args 0] { lappend members $nb_sim(index,$n) }
    lappend nb_sim(lans) [list $lan $members]
    return $lan
}

# Shapes the direction FROM -> TO of a link as SETTINGS (a dict from nestbed's IR).
proc nb_sim_shape {ns from to s} {
    set l [$ns link $from $to]
    set bw [dict get $s bw]
    if {$bw == 0} { set bw 1e12 }
    [$l link] set bandwidth_ $bw
    [$l link] set delay_ [dict get $s delay]
    set q [$l queue]
    # Set both ways: ns-2.35's RED queues count bytes by default, nestbed's count packets.
    if {[dict get $s bytes]} {
        $q set queue_in_bytes_ true
        $q set mean_pktsize_ [dict get $s mean]
        $q set limit_ [expr {int(ceil([dict get $s limit] / double([dict get $s mean])))}]
    } else {
        $q set queue_in_bytes_ false
        $q set limit_ [dict get $s limit]
    }
    if {[string match Queue/RED* [$q info class]]} {
        # As nestbed-pipe's RED: drop probability per packet (not byte mode), ns-2's wait_.
        $q set bytes_ false
        $q set wait_ true
        $q set thresh_ [dict get $s thresh]
        $q set maxthresh_ [dict get $s maxthresh]
        $q set q_weight_ [dict get $s q_weight]
        $q set linterm_ [dict get $s linterm]
        $q set mean_pktsize_ [dict get $s mean]
        $q set gentle_ [dict get $s gentle]
    }
}

# Uniform loss per direction, in the stub's error models (so `plr` events change them).
proc nb_sim_loss {link a b sab sba} {
    if {[dict get $sab loss] == 0 && [dict get $sba loss] == 0
            && [dict get $sab drops] eq "" && [dict get $sba drops] eq ""} {
        return
    }
    if {[catch {$link set errmodels_}]} { $link plr 0 }
    set models [$link set errmodels_]
    [lindex $models 0] set rate_ [dict get $sab loss]
    [lindex $models 1] set rate_ [dict get $sba loss]
}

# Drop by ordinal (1-based, as nestbed-linkd counts) with ns-2's ErrorModel/List (0-based);
# added after the loss model, so it sits ahead of it and counts every packet, as linkd does.
proc nb_sim_ordinals {ns from to ordinals} {
    global nb_sim
    if {$ordinals eq ""} { return }
    set list {}
    foreach o [lsort -integer $ordinals] { lappend list [expr {$o - 1}] }
    set em [new ErrorModel/List]
    $em unit pkt
    $em droplist $list
    $ns lossmodel $em $from $to
    set t [$ns create-trace NbOrdinal $nb_sim(fd) $from $to]
    $t target [$ns set nullAgent_]
    $em drop-target $t
}

proc nb_sim_apply {ns entry {ordinals 1}} {
    global nb_sim
    lassign $entry link n1 n2 key
    if {![dict exists $nb_sim(shaping) $key]} {
        nb_sim_put note no shaping from nestbed for the link between nodes $key
        return
    }
    set by_from [dict get $nb_sim(shaping) $key]
    set s12 [dict get $by_from $nb_sim(index,$n1)]
    set s21 [dict get $by_from $nb_sim(index,$n2)]
    nb_sim_shape $ns $n1 $n2 $s12
    nb_sim_shape $ns $n2 $n1 $s21
    nb_sim_loss $link $n1 $n2 $s12 $s21
    if {$ordinals} {
        nb_sim_ordinals $ns $n1 $n2 [dict get $s12 drops]
        nb_sim_ordinals $ns $n2 $n1 [dict get $s21 drops]
    }
    $link set nb_entry_ $entry
}

# `reset` brings back the file's shaping, as on an emulated link (up or down stays).
NBLink instproc reset {} {
    $self instvar ns_ nb_entry_
    if {[info exists nb_entry_]} { nb_sim_apply $ns_ $nb_entry_ 0 }
}

# Bandwidth 0 is "unlimited" in events too (ns-2 would divide by it).
NBLink instproc bandwidth {bw} {
    foreach l [$self simplex-links] { [$l link] set bandwidth_ [bw_parse [nb_unlimited $bw]] }
}

# LAN events are listed as not simulated; the stub makes most of them do nothing, this one too.
if {[LanNode info instprocs queue-set] eq ""} {
    LanNode instproc queue-set {args} {}
}

# `queue-set NODE VAR VALUE`: the queue of NODE's outgoing direction.
NBLink instproc queue-set {node var value} {
    $self instvar ns_ a_ b_
    set other [expr {$node eq $a_ ? $b_ : $a_}]
    if {$var eq "queue-in-bytes_"} { set var queue_in_bytes_ }
    [[$ns_ link $node $other] queue] set $var $value
}

# --- Agents and events ------------------------------------------------------------------------

nb_keep_instproc Simulator attach-agent nb-ns-attach-agent

Simulator instproc attach-agent {node agent} {
    global nb_sim
    $self nb-ns-attach-agent $node $agent
    lappend nb_sim(agents) [list $agent $node]
}

nb_keep_instproc Simulator at nb-stub-at

# The latest time anything was scheduled for: the end when the file has no halt.
Simulator instproc at {time args} {
    global nb_sim
    set t [nb_time $time]
    if {$t > $nb_sim(last_at)} { set nb_sim(last_at) $t }
    eval [list $self nb-stub-at $time] $args
}

nb_keep_instproc Simulator halt nb-ns-halt

Simulator instproc halt {} {
    global nb_sim
    set nb_sim(halted) 1
    $self nb-ns-halt
}

# The trace is written out every simulated second, so a crash loses at most that second.
proc nb_sim_flush {} {
    global nb_sim
    set ns [Simulator instance]
    flush $nb_sim(fd)
    $ns nb-ns-at [expr {[$ns now] + 1}] nb_sim_flush
}

proc nb_sim_auto_end {} {
    global nb_sim
    set ns [Simulator instance]
    if {$nb_sim(last_at) > [$ns now]} {
        $ns nb-ns-at $nb_sim(last_at) nb_sim_auto_end
        return
    }
    $ns nb-ns-halt
}

# --- The run ----------------------------------------------------------------------------------

proc nb_sim_objnum {entry} {
    return [string range [lindex $entry 0] 2 end]
}

nb_keep_instproc Simulator run nb-ns-run

Simulator instproc run {} {
    global nb_sim
    nb_sim_put version [ns-version]
    set i 0
    foreach node $nb_sim(nodes) {
        nb_sim_put node $i [$node id]
        incr i
    }
    foreach entry $nb_sim(links) {
        lassign $entry link n1 n2 key
        nb_sim_put link $nb_sim(index,$n1) $nb_sim(index,$n2)
        nb_sim_apply $self $entry
    }
    foreach entry $nb_sim(lans) {
        lassign $entry lan members
        nb_sim_put lan [$lan id] {*}$members
    }
    foreach entry [lsort -command {apply {{a b} {
            expr {[nb_sim_objnum $a] - [nb_sim_objnum $b]}}}} $nb_sim(agents)] {
        lassign $entry agent node
        set header 0
        catch { set header [$agent set tcpip_base_hdr_size_] }
        nb_sim_put agent $nb_sim(index,$node) [$agent info class] \
            [$agent set agent_addr_].[$agent set agent_port_] $header
    }
    if {$nb_sim(duration) ne ""} {
        $self nb-ns-at $nb_sim(duration) [list $self nb-ns-halt]
    } else {
        $self nb-ns-at $nb_sim(last_at) nb_sim_auto_end
    }
    nb_sim_put start
    $self nb-ns-at 1 nb_sim_flush
    $self nb-ns-run
    nb_sim_end [expr {$nb_sim(halted) ? "halted" : "ended"}]
}

# Runs the file; an error in it is printed as one line (nb_sim_error: MESSAGE) before Tcl's
# own trace of where it happened, which names the file's line.
proc nb_sim_main {} {
    global nb_sim errorInfo
    if {[catch {uplevel #0 [list source $nb_sim(file)]} message]} {
        set where $errorInfo
        puts stderr "nb_sim_error: [string map {"\n" " "} $message]"
        puts stderr $where
        nb_sim_end error
        nb_sim_exit 1
    }
    nb_sim_end [expr {$nb_sim(halted) ? "halted" : "ended"}]
}
