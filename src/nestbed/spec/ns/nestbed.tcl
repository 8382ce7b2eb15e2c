# nestbed.tcl -- nestbed's ns-2 / Emulab front end.
#
# Usage: tclsh nestbed.tcl USERFILE ?-p NAME VALUE ...?
#
# Runs the user's experiment script in this interpreter with nestbed's own definitions of the
# ns-2 and Emulab commands (Simulator, node, duplex-link, make-lan, agents, Program, $ns at,
# tb-* and nb-*), then prints ONE JSON object on stdout:
#
#   {"document": {...}, "locations": {"nodes.0": ["f.ns", 3], ...},
#    "warnings": [{"message": ..., "file": ..., "line": ...}], "errors": [...]}
#
# The document (nestbed.spec.document.ExperimentDoc) records what the script said, with the
# user's raw strings for values ("10Mb", "20ms"): units, addresses and event verbs are checked
# by the Python resolver, not here. Objects are TclOO objects whose state lives in the arrays
# of namespace ::nb, keyed by the object's handle (its command name, ::nb::objN).
#
# Names follow Emulab's rule: the first variable an object is assigned to names it (the
# builtin `set` is renamed to ::nb::set and wrapped); objects never assigned get kind0,
# kind1, ... at the end. Values that refer to objects are kept as handles and turned into
# final names only when the JSON is printed.
#
# Library code lives in namespace ::nb, where `set` still means the builtin. It calls the
# implementations of Tcl's ensembles directly (`::tcl::dict::get`, not `dict get`): a safe
# interpreter compiles no ensemble to bytecode, and parsing was twice as slow with them.
#
# tclsh starts this file in its own (master) interpreter, which only hands over to
# sandbox.tcl: that creates a Tcl safe interpreter, loads this file into it and runs the
# user's file there, so the user's code never runs with exec, open for writing, socket and
# the like at hand (see sandbox.tcl for what the safe interpreter is given back).

if {![interp issafe]} {
    source [file join [file dirname [file normalize [info script]]] sandbox.tcl]
    return
}

namespace eval ::nb {
    variable seq 0            ;# handle counter
    variable last ""          ;# the object created last (renamed when a `set` names it)
    variable renamed          ;# array: old handle -> name, for messages made before a rename
    array set renamed {}
    variable order {}         ;# every handle, in creation order
    variable ns ""            ;# the Simulator handle
    variable warnings {}      ;# {message {file line}} pairs; messages may hold \x01handle\x01
    variable errors {}
    variable events {}        ;# event dicts of `$ns at`
    variable inert {}         ;# {command args loc}
    variable routing ""
    variable routingLoc {}
    variable hardLimit ""     ;# `Scheduler/RealTime set maxslop_ SECONDS`
    variable hardLimitLoc {}
    variable overrides {}     ;# NAME -> VALUE given by the caller
    variable usedOverrides {}
    variable parameters {}    ;# define-template-parameter NAME -> VALUE
    variable paramLocs {}
    variable envLocs {}
    variable simulated 0      ;# depth of make-simulated
    variable procdefs {}      ;# fully qualified proc name -> {file line}
    variable libfiles {}
    variable mainfile ""
    variable maindir ""
    variable ran 0
    variable simplex          ;# array: {from to} -> link made by simplex-link
    variable oneway           ;# array: link -> where its first simplex-link was, or 0 when paired
    ::tcl::array::set simplex {}
    ::tcl::array::set oneway {}
    variable procEvents {}    ;# {time name loc}: `$ns at T "proc"`, checked once procs exist
    variable memoryLimitMB 1024 ;# the tclsh process's address space limit, for messages
    variable used             ;# array: name -> handle
    variable kind; variable name; variable F; variable L; variable created
    variable members; variable ifaces; variable link; variable src
    variable steps; variable gmembers; variable tlevents; variable sysctl; variable routes
    ::tcl::array::set used {}
    ::tcl::array::set kind {}
    ::tcl::array::set name {}
    ::tcl::array::set F {}
    ::tcl::array::set L {}
    ::tcl::array::set created {}
    ::tcl::array::set members {}
    ::tcl::array::set ifaces {}
    ::tcl::array::set link {}
    ::tcl::array::set src {}
    ::tcl::array::set steps {}
    ::tcl::array::set gmembers {}
    ::tcl::array::set tlevents {}
    ::tcl::array::set sysctl {}
    ::tcl::array::set routes {}
}

# ----------------------------------------------------------------------------------------------
# Locations, warnings and errors

# The file:line of the innermost user command being run (frames of this library are skipped).
proc ::nb::where {} {
    variable libfiles
    for {set i [expr {[::tcl::info::frame] - 1}]} {$i > 0} {incr i -1} {
        set f [::tcl::info::frame $i]
        if {[::tcl::dict::get $f type] eq "source" && [::tcl::dict::exists $f file]} {
            set file [::tcl::dict::get $f file]
            if {$file ni $libfiles} {
                return [list [tail $file] [::tcl::dict::get $f line]]
            }
        }
    }
    return [list [tail $::nb::mainfile] 1]
}

# A path's last component. `file` is an alias into the sandbox's master, too slow to call for
# every located field, so the answers are kept.
proc ::nb::tail {path} {
    variable tails
    if {![::tcl::info::exists tails($path)]} { set tails($path) [file tail $path] }
    return $tails($path)
}

proc ::nb::warn {message {loc {}}} {
    variable warnings
    if {$loc eq {}} { set loc [where] }
    lappend warnings [list $message $loc]
    return ""
}

proc ::nb::error {message {loc {}}} {
    variable errors
    if {$loc eq {}} { set loc [where] }
    lappend errors [list $message $loc]
    return ""
}

# A reference to an object inside a message, replaced by the object's final name on output.
proc ::nb::ref {h} {
    return "\x01$h\x01"
}

# "node n0", "LAN lan0", "cbr cbr0", "$ns", "the queue of link link0 from n0" (as a reference).
proc ::nb::label {h} {
    variable kind
    variable F
    switch -- $kind($h) {
        ns { return {$ns} }
        lan { return "LAN [ref $h]" }
        agent { return "agent [ref $h]" }
        app { return "[lindex [::tcl::dict::get $F($h) type] 1] [ref $h]" }
        queue { return "the queue of [label $::nb::link($h)] from [ref $::nb::src($h)]" }
        dir { return "[label $::nb::link($h)] (direction from [ref $::nb::src($h)])" }
        default { return "$kind($h) [ref $h]" }
    }
}

# ----------------------------------------------------------------------------------------------
# Objects

oo::class create ::nb::Object {
    method unknown {m args} { ::nb::unknown_method [::nb::me [self]] $m }
}

# Makes a new object of CLASS and KIND; its creation line is recorded.
proc ::nb::create {class kind} {
    variable seq
    variable order
    incr seq
    set h ::nb::obj$seq
    $class create $h
    set ::nb::kind($h) $kind
    set ::nb::F($h) {}
    set ::nb::L($h) {}
    set ::nb::created($h) [where]
    lappend order $h
    set ::nb::last $h
    return $h
}

# An object's handle from inside its methods: [self] is fully qualified, and a renamed object
# lives in the global namespace (`::far` is handle `far`).
proc ::nb::me {self} {
    if {[::tcl::info::exists ::nb::kind($self)]} { return $self }
    return [::tcl::string::range $self 2 end]
}

proc ::nb::is_object {value} {
    return [::tcl::info::exists ::nb::kind($value)]
}

proc ::nb::kind_of {value} {
    if {[::tcl::info::exists ::nb::kind($value)]} { return $::nb::kind($value) }
    return ""
}

# Records field PATH (dotted) of object H as the tagged JSON value TAGGED, at the current line.
proc ::nb::put {h path tagged {loc {}}} {
    if {$loc eq {}} { set loc [where] }
    ::tcl::dict::set ::nb::F($h) $path $tagged
    ::tcl::dict::set ::nb::L($h) $path $loc
}

proc ::nb::puts_str {h path value} {
    put $h $path [list s $value]
}

# Whether VALUE is an object of one of KINDS; otherwise an error saying WHAT was expected.
proc ::nb::need {value kinds what} {
    set k [kind_of $value]
    if {$k in $kinds} { return 1 }
    if {$k eq "dummy"} { return 0 }
    set shown [expr {$k eq "" ? "'$value'" : [label $value]}]
    error "$what: $shown is not a [join $kinds { or }]"
    return 0
}

# Checks the argument count of a command; records a usage error when it is wrong.
proc ::nb::arity {arglist min max usage} {
    set n [llength $arglist]
    if {$n < $min || ($max >= 0 && $n > $max)} {
        error "wrong arguments: use `$usage`"
        return 0
    }
    return 1
}

proc ::nb::unknown_method {h m} {
    variable kind
    set what [expr {$kind($h) eq "ns" ? {$ns} : "[label $h]"}]
    warn "unknown method '$m' of $what; ignored"
}

# ns-2 commands that only matter to the simulator's output (traces, nam, colours).
proc ::nb::no_effect {h m} {
    set what [expr {$::nb::kind($h) eq "ns" ? {$ns} : "[label $h]"}]
    warn "ns-2 command '$m' of $what has no effect here; ignored"
}

# An event verb used outside `$ns at`.
proc ::nb::event_outside {h m} {
    set what [expr {$::nb::kind($h) eq "ns" ? {$ns} : "[label $h]"}]
    warn "'$m' of $what is an event and has no effect outside `\$ns at`; schedule it with\
        `\$ns at TIME \"...\"`"
}

set ::nb::NO_EFFECT_NS {
    trace-all namtrace-all namtrace-all-wireless flush-trace color duplex-link-op
    simplex-link-op use-scheduler trace-queue namtrace-queue monitor-queue puts-nam-config
    set-animation-rate create-trace gen-map dump-namcolors rtmodel rtmodel-at namtrace-config
    tb-set-sync-server-noop at-now
}
set ::nb::NO_EFFECT_NODE {color shape label label-color label-at add-mark delete-mark}
set ::nb::NO_EFFECT_LINK {trace trace_snaplen trace_endnode trace_type orient color label}
set ::nb::NS_EVENTS {halt terminate swapout log message linktest}
# ns-2 classes a script may use as commands (`Agent/TCP set window_ 20`, `Queue/RED set ...`).
set ::nb::NS_CLASSES "^([join {
    Agent Application Queue Simulator Node Link SimpleLink LanLink DelayLink Classifier
    RandomVariable ErrorModel Trace Mac LL Phy Channel Antenna Propagation Connector TclObject
    Process TrafficGenerator Module RtModel Class PacketHeaderManager Scheduler
} |])(/.*)?$"
# Verbs of $ns in events that only matter to the simulator (traces, nam, wireless, agents).
set ::nb::SIM_ONLY_EVENTS {
    detach-agent nam-end-wireless flush-trace trace-annotate puts-nam-config namtrace-all
    trace-all set-animation-rate dump-namcolors at-now initial_node_pos
}

# ----------------------------------------------------------------------------------------------
# The simulator

oo::class create ::nb::Simulator {
    superclass ::nb::Object
    method node {args} { ::nb::new_node }
    method duplex-link {args} { ::nb::duplex_link {*}$args }
    method simplex-link {args} { ::nb::simplex_link {*}$args }
    method bridge {args} {
        ::nb::error "\$ns bridge is not supported: nestbed has no bridge nodes; join the nodes\
            with one LAN (`\$ns make-lan`) instead"
        return [::nb::dummy]
    }
    method blockstore {args} { ::nb::new_blockstore }
    method make-lan {args} { ::nb::make_lan {*}$args }
    method link {args} { ::nb::ns_link {*}$args }
    method lanlink {args} { ::nb::ns_lanlink {*}$args }
    method queue-limit {args} { ::nb::queue_limit {*}$args }
    method rtproto {args} { ::nb::rtproto {*}$args }
    method cost {args} { ::nb::cost {*}$args }
    method attach-agent {args} { ::nb::attach_agent {*}$args }
    method connect {args} { ::nb::connect {*}$args }
    method create-connection {args} { ::nb::create_connection {*}$args }
    method at {args} { ::nb::at [expr {[::tcl::info::level] - 1}] {*}$args }
    method event-timeline {args} { ::nb::new_timeline }
    method event-sequence {args} { ::nb::new_sequence [expr {[::tcl::info::level] - 1}] {*}$args }
    method event-group {args} { ::nb::new_group {*}$args }
    method define-template-parameter {args} { ::nb::template_parameter {*}$args }
    method make-simulated {args} { ::nb::make_simulated {*}$args }
    method run {args} { set ::nb::ran 1; return "" }
    method now {args} { return 0 }
    method unknown {m args} {
        if {$m in $::nb::NO_EFFECT_NS} { return [::nb::no_effect [::nb::me [self]] $m] }
        if {$m in $::nb::NS_EVENTS} { return [::nb::event_outside [::nb::me [self]] $m] }
        ::nb::unknown_method [::nb::me [self]] $m
    }
}

# A blockstore (Emulab's storage objects): accepted, and every setting ignored with a warning.
oo::class create ::nb::Blockstore {
    superclass ::nb::Object
    method unknown {m args} {
        ::nb::warn "blockstore method '$m' has no effect here (nestbed has no block stores);\
            ignored"
    }
}

proc ::nb::new_blockstore {} {
    warn "\$ns blockstore: nestbed has no block stores (nodes use the host's file system); the\
        blockstore and its settings are ignored"
    return [create ::nb::Blockstore blockstore]
}

# ns-1 style: the command `ns` is the simulator itself (`ns duplex-link ...`, `ns at ...`).
proc ::ns {args} {
    if {![llength $args]} { return [::nb::new_simulator] }
    return [uplevel 1 [list [::nb::new_simulator] {*}$args]]
}

proc ::nb::new_simulator {} {
    variable ns
    if {$ns eq ""} {
        set ns [create ::nb::Simulator ns]
        set ::nb::name($ns) ns
    }
    return $ns
}

# ----------------------------------------------------------------------------------------------
# Nodes

oo::class create ::nb::Node {
    superclass ::nb::Object
    method add-route {args} { ::nb::add_route [::nb::me [self]] {*}$args }
    method program-agent {args} { ::nb::program_agent [::nb::me [self]] {*}$args }
    method unknown {m args} {
        if {$m in $::nb::NO_EFFECT_NODE} { return [::nb::no_effect [::nb::me [self]] $m] }
        ::nb::unknown_method [::nb::me [self]] $m
    }
}

proc ::nb::new_node {} {
    set h [create ::nb::Node node]
    set ::nb::ifaces($h) {}
    set ::nb::routes($h) {}
    if {$::nb::simulated > 0} { puts_str $h simulated 1 }
    return $h
}

proc ::nb::add_route {node args} {
    if {![arity $args 2 2 {$node add-route DESTINATION NEXTHOP}]} { return "" }
    lassign $args dst via
    set loc [where]
    set out {}
    foreach {field value} [list dst $dst via $via] {
        if {[is_object $value]} {
            set kinds [expr {$field eq "dst" ? {node link lan} : {node}}]
            if {![need $value $kinds "add-route of [label $node]: the $field"]} { return "" }
            lappend out $field [list r $value]
        } else {
            lappend out $field [list s $value]
        }
    }
    lappend ::nb::routes($node) [list $out $loc]
    return ""
}

# ----------------------------------------------------------------------------------------------
# Links and LANs

oo::class create ::nb::Link {
    superclass ::nb::Object
    method unknown {m args} { ::nb::link_method [::nb::me [self]] $m }
}

proc ::nb::link_method {h m} {
    if {$m in $::nb::NO_EFFECT_LINK} { return [no_effect $h $m] }
    if {$m in {up down bandwidth delay plr reset}} { return [event_outside $h $m] }
    unknown_method $h $m
}

# Maps an ns-2 queue class name to the document's queue type. Like Emulab, a type it does not
# support (a misspelling, or FQ, SFQ, CBQ...) becomes DropTail, with a warning naming WHAT.
proc ::nb::queue_type {name what} {
    regsub {^Queue/} $name {} bare
    switch -- $bare {
        DropTail { return droptail }
        RED { return red }
        GRED { return gred }
    }
    warn "$what: queue type '$name' is not supported; using DropTail, as Emulab does (the\
        supported types are DropTail, RED and GRED)"
    return droptail
}

proc ::nb::new_link {kind nodes bw delay} {
    set class [expr {$kind eq "link" ? "::nb::Link" : "::nb::Link"}]
    set h [create $class $kind]
    set ::nb::members($h) $nodes
    foreach n $nodes { lappend ::nb::ifaces($n) $h }
    puts_str $h bandwidth $bw
    puts_str $h delay $delay
    if {$::nb::simulated > 0} { puts_str $h simulated 1 }
    return $h
}

# Checks the arguments of CMD (duplex-link or simplex-link): A B BANDWIDTH DELAY QUEUE, two
# different nodes; records an error and returns 0 when they are wrong.
proc ::nb::link_args {cmd arglist} {
    set usage "\$ns $cmd NODE1 NODE2 BANDWIDTH DELAY DropTail|RED|GRED"
    if {![arity $arglist 5 5 $usage]} { return 0 }
    lassign $arglist a b
    if {![need $a node $cmd] || ![need $b node $cmd]} { return 0 }
    if {$a eq $b} {
        error "$cmd joins [label $a] to itself; a link joins two different nodes"
        return 0
    }
    return 1
}

proc ::nb::duplex_link {args} {
    if {![link_args duplex-link $args]} { return [dummy] }
    lassign $args a b bw delay qtype
    set type [queue_type $qtype duplex-link]
    set h [new_link link [list $a $b] $bw $delay]
    puts_str $h queue.type $type
    return $h
}

# ns-2's one-way link. The first simplex link between two nodes becomes a link shaped in that
# direction only (the other direction unshaped, with a warning: nestbed links carry packets
# both ways); a second one in the other direction shapes that direction of the same link.
proc ::nb::simplex_link {args} {
    if {![link_args simplex-link $args]} { return [dummy] }
    lassign $args a b bw delay qtype
    set type [queue_type $qtype simplex-link]
    if {[::tcl::info::exists ::nb::simplex([list $b $a])]
            && ![::tcl::info::exists ::nb::simplex([list $a $b])]} {
        set h $::nb::simplex([list $b $a])
        set ::nb::simplex([list $a $b]) $h
        set i 1
        set ::nb::oneway($h) 0
    } else {
        set h [new_link link [list $a $b] 0 0]
        ::tcl::dict::unset ::nb::F($h) bandwidth
        ::tcl::dict::unset ::nb::F($h) delay
        set ::nb::simplex([list $a $b]) $h
        set ::nb::oneway($h) [where]
        set i 0
    }
    puts_str $h members.$i.egress.bandwidth $bw
    puts_str $h members.$i.egress.delay $delay
    puts_str $h members.$i.egress.queue.type $type
    return $h
}

# Warns about simplex links never paired with one in the other direction.
proc ::nb::warn_oneway {} {
    foreach h [::tcl::array::names ::nb::oneway] {
        if {$::nb::oneway($h) ne "0"} {
            lassign $::nb::members($h) a b
            warn "simplex-link from [ref $a] to [ref $b] has no simplex-link back; nestbed links\
                carry packets both ways, so link [ref $h] is shaped from [ref $a] to [ref $b]\
                only" $::nb::oneway($h)
        }
    }
}

proc ::nb::make_lan {args} {
    if {![arity $args 3 -1 {$ns make-lan "NODE1 NODE2 ..." BANDWIDTH DELAY}]} { return [dummy] }
    set extra [lassign $args nodes bw delay]
    if {[catch {llength $nodes}]} {
        error "make-lan: the node list is not a Tcl list"
        return [dummy]
    }
    foreach n $nodes {
        if {![need $n node "make-lan"]} { return [dummy] }
    }
    if {[llength [lsort -unique $nodes]] != [llength $nodes]} {
        error "make-lan lists a node twice; a node joins a LAN once"
        return [dummy]
    }
    set h [new_link lan $nodes $bw $delay]
    foreach arg $extra {
        if {[::tcl::string::match Queue/* $arg]} {
            puts_str $h queue.type [queue_type $arg make-lan]
        }
    }
    return $h
}

# The link (kind link) between nodes A and B, or "".
proc ::nb::link_between {a b} {
    foreach h $::nb::order {
        if {$::nb::kind($h) eq "link"} {
            set m $::nb::members($h)
            if {$m eq [list $a $b] || $m eq [list $b $a]} { return $h }
        }
    }
    return ""
}

proc ::nb::find_link {a b what} {
    if {![need $a node $what] || ![need $b node $what]} { return "" }
    set h [link_between $a $b]
    if {$h eq ""} {
        error "$what: there is no link between [label $a] and [label $b]; create one with\
            `\$ns duplex-link`"
    }
    return $h
}

# The index of NODE among the members of link or LAN H, or -1 with an error.
proc ::nb::member_index {h node what} {
    set i [lsearch -exact $::nb::members($h) $node]
    if {$i < 0} {
        error "$what: [label $node] is not a member of [label $h]"
    }
    return $i
}

oo::class create ::nb::Direction {
    superclass ::nb::Object
    method queue {args} { ::nb::direction_queue [::nb::me [self]] }
    method unknown {m args} { ::nb::link_method [::nb::me [self]] $m }
}

oo::class create ::nb::Queue {
    superclass ::nb::Object
    method set {args} { ::nb::queue_set [::nb::me [self]] {*}$args }
}

# The object of one direction of link or LAN H, from member NODE (created once).
proc ::nb::direction {h node} {
    set key "$h $node"
    if {![::tcl::info::exists ::nb::directions($key)]} {
        set d [create ::nb::Direction dir]
        set ::nb::link($d) $h
        set ::nb::src($d) $node
        set ::nb::directions($key) $d
    }
    return $::nb::directions($key)
}

proc ::nb::direction_queue {d} {
    if {![::tcl::info::exists ::nb::queueOf($d)]} {
        set q [create ::nb::Queue queue]
        set ::nb::link($q) $::nb::link($d)
        set ::nb::src($q) $::nb::src($d)
        set ::nb::queueOf($d) $q
    }
    return $::nb::queueOf($d)
}

proc ::nb::ns_link {args} {
    if {![arity $args 2 2 {$ns link NODE1 NODE2}]} { return [dummy] }
    lassign $args a b
    set h [find_link $a $b "\$ns link"]
    if {$h eq ""} { return [dummy] }
    return [direction $h $a]
}

proc ::nb::ns_lanlink {args} {
    if {![arity $args 2 2 {$ns lanlink LAN NODE}]} { return [dummy] }
    lassign $args lan node
    if {![need $lan {lan link} "lanlink"]} { return [dummy] }
    if {[member_index $lan $node "lanlink"] < 0} { return [dummy] }
    return [direction $lan $node]
}

# Sets queue variable VAR of the queue Q (one direction of a link or LAN).
proc ::nb::queue_set {q args} {
    if {[llength $args] == 1} { return "" }
    if {![arity $args 2 2 {$queue set VARIABLE VALUE}]} { return "" }
    lassign $args var value
    set h $::nb::link($q)
    set i [lsearch -exact $::nb::members($h) $::nb::src($q)]
    set base "members.$i.egress.queue"
    switch -- $var {
        limit_ { puts_str $h $base.limit $value }
        queue-in-bytes_ {
            set unit [expr {[::tcl::string::is true -strict $value] ? "bytes" : "packets"}]
            puts_str $h $base.limit_unit $unit
        }
        thresh_ { puts_str $h $base.thresh $value }
        maxthresh_ { puts_str $h $base.maxthresh $value }
        q_weight_ { puts_str $h $base.q_weight $value }
        linterm_ { puts_str $h $base.linterm $value }
        mean_pktsize_ { puts_str $h $base.mean_packet_size $value }
        gentle_ {
            if {[::tcl::string::is true -strict $value]} {
                puts_str $h $base.type gred
            } elseif {[::tcl::dict::exists $::nb::F($h) queue.type]
                      && [lindex [::tcl::dict::get $::nb::F($h) queue.type] 1] eq "gred"} {
                puts_str $h $base.type red
            }
        }
        default { warn "queue variable '$var' of [label $q] has no effect here; ignored" }
    }
    return ""
}

proc ::nb::queue_limit {args} {
    if {![arity $args 3 3 {$ns queue-limit NODE1 NODE2 LIMIT}]} { return "" }
    lassign $args a b limit
    set h [find_link $a $b "queue-limit"]
    if {$h eq ""} { return "" }
    set i [lsearch -exact $::nb::members($h) $a]
    puts_str $h members.$i.egress.queue.limit $limit
    return ""
}

proc ::nb::cost {args} {
    if {![arity $args 3 3 {$ns cost NODE1 NODE2 COST}]} { return "" }
    lassign $args a b c
    set h [find_link $a $b "cost"]
    if {$h eq ""} { return "" }
    set i [lsearch -exact $::nb::members($h) $a]
    puts_str $h members.$i.cost $c
    return ""
}

proc ::nb::rtproto {args} {
    if {![arity $args 1 -1 {$ns rtproto Static|Session|ospf|Manual}]} { return "" }
    set proto [lindex $args 0]
    switch -nocase -- $proto {
        Static { set mode static }
        Session { set mode session }
        ospf {
            set mode session
            warn "rtproto $proto: OSPF is computed as static shortest paths (like Session);\
                routes are not recomputed when links go down"
        }
        Manual { set mode manual }
        default {
            warn "rtproto '$proto' is not supported; ignored, as Emulab does (routing stays as\
                set; use Static, Session, ospf or Manual)"
            return ""
        }
    }
    set_routing $mode
    return ""
}

# ns-2's real-time scheduler warns while it lags real time by more than maxslop_; here it is
# the lag a run's simulated part may have before the run is marked (the simulation's hard
# limit). Without a value, what it is.
proc ::nb::maxslop {args} {
    if {![arity $args 0 1 {Scheduler/RealTime set maxslop_ SECONDS}]} { return "" }
    if {![llength $args]} {
        return [expr {$::nb::hardLimit eq "" ? 0.005 : $::nb::hardLimit}]
    }
    set ::nb::hardLimit [lindex $args 0]
    set ::nb::hardLimitLoc [where]
    return $::nb::hardLimit
}

proc ::nb::set_routing {mode} {
    set ::nb::routing $mode
    set ::nb::routingLoc [where]
}

# ----------------------------------------------------------------------------------------------
# Agents and applications

set ::nb::AGENTS {
    Agent/UDP {udp {}} Agent/TCP {tcp {}} Agent/TCP/Reno {tcp reno}
    Agent/TCP/Newreno {tcp newreno} Agent/TCP/Sack1 {tcp sack} Agent/TCP/Vegas {tcp vegas}
    Agent/TCP/Fack {tcp fack} Agent/TCP/FullTcp {tcp fulltcp}
    Agent/TCP/FullTcp/Sack {tcp fulltcp-sack} Agent/Null {null {}} Agent/TCPSink {tcpsink {}}
    Agent/TCPSink/DelAck {tcpsink delack} Agent/TCPSink/Sack1 {tcpsink sack}
    Agent/LossMonitor {null {}}
}
set ::nb::APPS {Application/Traffic/CBR cbr Application/FTP ftp}

oo::class create ::nb::Agent {
    superclass ::nb::Object
    method set {args} { ::nb::agent_set [::nb::me [self]] {*}$args }
    method attach-app {args} { ::nb::attach_app [::nb::me [self]] {*}$args }
}

oo::class create ::nb::Application {
    superclass ::nb::Object
    method set {args} { ::nb::app_set [::nb::me [self]] {*}$args }
    method attach-agent {args} { ::nb::app_attach [::nb::me [self]] {*}$args }
    method unknown {m args} {
        if {$m in {start stop reset produce send}} {
            return [::nb::event_outside [::nb::me [self]] $m]
        }
        ::nb::unknown_method [::nb::me [self]] $m
    }
}

proc ::nb::new_agent {class} {
    lassign [::tcl::dict::get $::nb::AGENTS $class] type variant
    set h [create ::nb::Agent agent]
    puts_str $h type $type
    if {$variant ne ""} { puts_str $h variant $variant }
    return $h
}

proc ::nb::agent_set {h args} {
    if {[llength $args] == 1} { return "" }
    if {![arity $args 2 2 {$agent set VARIABLE VALUE}]} { return "" }
    lassign $args var value
    puts_str $h params.$var $value
    return ""
}

proc ::nb::attach_agent {args} {
    if {![arity $args 2 2 {$ns attach-agent NODE AGENT}]} { return "" }
    lassign $args node agent
    if {![need $node node "attach-agent"] || ![need $agent agent "attach-agent"]} { return "" }
    put $agent node [list r $node]
    return ""
}

# ns-2's `$agent attach-app FTP`: a new application of class Application/CLASS on the agent.
proc ::nb::attach_app {agent args} {
    if {![arity $args 1 1 {$agent attach-app FTP|Traffic/CBR}]} { return [dummy] }
    set class Application/[lindex $args 0]
    if {![::tcl::dict::exists $::nb::APPS $class]} {
        warn "attach-app: class '$class' is not supported; its object does nothing here, as in\
            Emulab (supported: [join [::tcl::dict::keys $::nb::APPS] {, }])"
        return [dummy]
    }
    set h [new_app $class]
    put $h agent [list r $agent]
    return $h
}

# ns-2's `$ns create-connection SRCTYPE SRCNODE DSTTYPE DSTNODE FLOWID`: two agents, attached
# and connected; returns the source agent.
proc ::nb::create_connection {args} {
    set usage {$ns create-connection SRCTYPE SRCNODE DSTTYPE DSTNODE FLOWID}
    if {![arity $args 5 5 $usage]} { return [dummy] }
    lassign $args stype snode dtype dnode
    set agents {}
    foreach type [list $stype $dtype] node [list $snode $dnode] {
        set class Agent/$type
        if {![::tcl::dict::exists $::nb::AGENTS $class]} {
            error "create-connection: agent class '$class' is not supported; use one of\
                [join [::tcl::dict::keys $::nb::AGENTS] {, }]"
            return [dummy]
        }
        set a [new_agent $class]
        attach_agent $node $a
        lappend agents $a
    }
    connect {*}$agents
    return [lindex $agents 0]
}

proc ::nb::connect {args} {
    if {![arity $args 2 2 {$ns connect AGENT1 AGENT2}]} { return "" }
    lassign $args a b
    if {![need $a agent "connect"] || ![need $b agent "connect"]} { return "" }
    put $a peer [list r $b]
    put $b peer [list r $a]
    return ""
}

proc ::nb::new_app {class} {
    set h [create ::nb::Application app]
    puts_str $h type [::tcl::dict::get $::nb::APPS $class]
    return $h
}

proc ::nb::app_set {h args} {
    if {[llength $args] == 1} { return "" }
    if {![arity $args 2 2 {$app set VARIABLE VALUE}]} { return "" }
    lassign $args var value
    set fields {packetSize_ packet_size rate_ rate interval_ interval maxpkts_ max_packets
        random_ random}
    if {[::tcl::dict::exists $fields $var]} {
        puts_str $h [::tcl::dict::get $fields $var] $value
    } else {
        warn "variable '$var' of [label $h] has no effect here; ignored"
    }
    return ""
}

proc ::nb::app_attach {h args} {
    if {![arity $args 1 1 {$app attach-agent AGENT}]} { return "" }
    set agent [lindex $args 0]
    if {![need $agent agent "attach-agent of [label $h]"]} { return "" }
    put $h agent [list r $agent]
    return ""
}

# ----------------------------------------------------------------------------------------------
# Programs

oo::class create ::nb::Program {
    superclass ::nb::Object
    method set {args} { ::nb::program_set [::nb::me [self]] {*}$args }
    method unknown {m args} {
        if {$m in {start run stop kill}} { return [::nb::event_outside [::nb::me [self]] $m] }
        ::nb::unknown_method [::nb::me [self]] $m
    }
}

proc ::nb::new_program {} {
    return [create ::nb::Program program]
}

proc ::nb::program_set {h args} {
    if {[llength $args] == 1} { return "" }
    if {![arity $args 2 2 {$program set node|command|dir|timeout|expected-exit-code VALUE}]} {
        return ""
    }
    lassign $args var value
    switch -- $var {
        node {
            if {[need $value node "[label $h]: node"]} { put $h node [list r $value] }
        }
        command - dir - timeout { puts_str $h $var $value }
        expected-exit-code { puts_str $h expected_exit_code $value }
        default {
            warn "variable '$var' of [label $h] has no effect here; use node, command, dir,\
                timeout or expected-exit-code"
        }
    }
    return ""
}

proc ::nb::program_agent {node args} {
    set h [new_program]
    put $h node [list r $node]
    set usage {$node program-agent -command CMD ?-dir DIR? ?-timeout T? ?-expected-exit-code N?}
    if {[llength $args] % 2} {
        error "program-agent: options come in pairs; use `$usage`"
        return $h
    }
    foreach {opt value} $args {
        switch -- $opt {
            -command - -dir - -timeout { puts_str $h [::tcl::string::range $opt 1 end] $value }
            -expected-exit-code { puts_str $h expected_exit_code $value }
            default { warn "program-agent option '$opt' has no effect here; ignored" }
        }
    }
    return $h
}

# ----------------------------------------------------------------------------------------------
# Events, timelines, sequences and groups

oo::class create ::nb::Timeline {
    superclass ::nb::Object
    method at {args} {
        ::nb::timeline_at [::nb::me [self]] [expr {[::tcl::info::level] - 1}] {*}$args
    }
    method unknown {m args} {
        if {$m in {start stop reset run}} { return [::nb::event_outside [::nb::me [self]] $m] }
        ::nb::unknown_method [::nb::me [self]] $m
    }
}

oo::class create ::nb::Sequence {
    superclass ::nb::Object
    method append {args} {
        ::nb::sequence_append [::nb::me [self]] [expr {[::tcl::info::level] - 1}] {*}$args
    }
    method unknown {m args} {
        if {$m in {start stop reset run}} { return [::nb::event_outside [::nb::me [self]] $m] }
        ::nb::unknown_method [::nb::me [self]] $m
    }
}

oo::class create ::nb::Group {
    superclass ::nb::Object
    method add {args} { ::nb::group_add [::nb::me [self]] {*}$args }
}

# Splits SCRIPT into its commands with Tcl's own rules (quotes, braces, `;`, newlines).
proc ::nb::split_commands {script} {
    set commands {}
    set current ""
    foreach char [split $script ""] {
        if {($char eq ";" || $char eq "\n") && [::tcl::info::complete $current]} {
            lappend commands $current
            set current ""
        } else {
            append current $char
        }
    }
    lappend commands $current
    set out {}
    foreach c $commands {
        set c [::tcl::string::trim $c]
        if {$c ne "" && ![::tcl::string::match #* $c]} { lappend out $c }
    }
    return $out
}

# The actions of an event script: a list of {object verb args}; errors name WHAT.
# A first word written as $var (inside braces) is substituted in the caller's scope LEVEL.
proc ::nb::parse_actions {level script what {time ""}} {
    set out {}
    foreach command [split_commands $script] {
        if {[catch {lrange $command 0 end} words]} {
            error "$what: cannot read '$command' as a command"
            continue
        }
        set rest [lassign $words object verb]
        # `$ns at 5 "finish"`: a Tcl procedure of the script, checked once the script has run.
        if {$time ne "" && ![::tcl::string::match {$*} $object] && ![is_object $object]} {
            lappend ::nb::procEvents [list $time $object [where] $what]
            continue
        }
        if {[::tcl::string::match {$*} $object]} {
            if {[catch {uplevel #$level [list subst -nocommands -nobackslashes $object]} value]
                    && [catch {uplevel #0 [list subst -nocommands -nobackslashes $object]} value]} {
                set value $object
            }
            set object $value
        }
        if {![is_object $object] || [kind_of $object] eq "dummy"} {
            error "$what: '$object' is not an object of this experiment; events act on nodes,\
                links, LANs, queues, agents, applications, programs, timelines, sequences,\
                groups or \$ns"
            continue
        }
        if {[kind_of $object] eq "ns" && $verb in $::nb::SIM_ONLY_EVENTS} {
            warn "$what: '\$ns $verb' only matters to the simulator (`nestbed simulate`);\
                ignored in emulation"
            continue
        }
        # Emulab's event form `$link bandwidth 10Mb duplex`: duplex is both directions, as
        # without it.
        if {[kind_of $object] in {link lan dir} && $verb in {bandwidth delay plr}
                && [llength $rest] == 2 && [lindex $rest 1] eq "duplex"} {
            set rest [lrange $rest 0 0]
        }
        set args {}
        foreach a $rest {
            lappend args [expr {[is_object $a] ? [list r $a] : [list s $a]}]
        }
        switch -- [kind_of $object] {
            queue {
                set q $object
                set object $::nb::link($q)
                if {$verb eq "set"} {
                    set verb queue-set
                } else {
                    set verb queue-$verb
                }
                set args [linsert $args 0 [list r $::nb::src($q)]]
            }
            dir { set object $::nb::link($object) }
        }
        lappend out [list $object $verb $args]
    }
    return $out
}

proc ::nb::at {level args} {
    if {![arity $args 2 2 {$ns at TIME "EVENT; EVENT ..."}]} { return "" }
    lassign $args time script
    set loc [where]
    foreach action [parse_actions $level $script "event at $time" $time] {
        lappend ::nb::events [list $time {*}$action $loc]
    }
    return ""
}

proc ::nb::new_timeline {} {
    set h [create ::nb::Timeline timeline]
    set ::nb::tlevents($h) {}
    return $h
}

proc ::nb::timeline_at {h level args} {
    if {![arity $args 2 2 {$timeline at TIME "EVENT; EVENT ..."}]} { return "" }
    lassign $args time script
    set loc [where]
    foreach action [parse_actions $level $script "[label $h]: event at $time"] {
        lappend ::nb::tlevents($h) [list $time {*}$action $loc]
    }
    return ""
}

proc ::nb::new_sequence {level args} {
    set h [create ::nb::Sequence sequence]
    set ::nb::steps($h) {}
    if {[llength $args] > 0} { sequence_append $h $level {*}$args }
    return $h
}

proc ::nb::sequence_append {h level args} {
    if {![arity $args 1 1 {$sequence append "EVENT; EVENT ..."}]} { return "" }
    set loc [where]
    foreach action [parse_actions $level [lindex $args 0] "[label $h]: step"] {
        lappend ::nb::steps($h) [list {*}$action $loc]
    }
    return ""
}

proc ::nb::new_group {args} {
    set h [create ::nb::Group group]
    set ::nb::gmembers($h) {}
    if {[llength $args] > 0} { group_add $h {*}$args }
    return $h
}

# Adds objects to group H; each argument is an object or a list of objects.
proc ::nb::group_add {h args} {
    set loc [where]
    foreach arg $args {
        foreach x $arg {
            if {![is_object $x] || [kind_of $x] in {ns dummy}} {
                error "[label $h]: '$x' is not an object of this experiment; a group holds\
                    nodes, links, LANs, agents, applications or programs"
                continue
            }
            lappend ::nb::gmembers($h) [list $x $loc]
        }
    }
    return ""
}

# ----------------------------------------------------------------------------------------------
# Parameters, make-simulated, new

proc ::nb::template_parameter {args} {
    if {![arity $args 2 3 {$ns define-template-parameter NAME DEFAULT ?DESCRIPTION?}]} {
        return ""
    }
    lassign $args pname default
    set value $default
    if {[::tcl::dict::exists $::nb::overrides $pname]} {
        set value [::tcl::dict::get $::nb::overrides $pname]
        ::tcl::dict::set ::nb::usedOverrides $pname 1
    }
    ::tcl::dict::set ::nb::parameters $pname $value
    ::tcl::dict::set ::nb::paramLocs $pname [where]
    uplevel #0 [list ::nb::set $pname $value]
    return ""
}

proc ::nb::make_simulated {args} {
    if {![arity $args 1 1 {$ns make-simulated { ... }}]} { return "" }
    incr ::nb::simulated
    set code [catch {uplevel 2 [lindex $args 0]} result options]
    incr ::nb::simulated -1
    return -options $options $result
}

oo::class create ::nb::Dummy {
    method unknown {m args} { return "" }
}

# A stand-in returned after an error, so the script can go on without cascading errors.
proc ::nb::dummy {} {
    return [create ::nb::Dummy dummy]
}

proc ::nb::new {class args} {
    if {$class eq "Simulator"} { return [new_simulator] }
    if {[::tcl::dict::exists $::nb::AGENTS $class]} { return [new_agent $class] }
    if {[::tcl::dict::exists $::nb::APPS $class]} { return [new_app $class] }
    if {$class eq "Program"} { return [new_program] }
    if {$class eq "EventGroup"} { return [new_group] }
    set known [concat Simulator [::tcl::dict::keys $::nb::AGENTS] \
        [::tcl::dict::keys $::nb::APPS] Program \
        EventGroup]
    warn "class '$class' is not supported; its object does nothing here, as in Emulab\
        (supported classes are [join $known {, }])"
    return [dummy]
}

# ----------------------------------------------------------------------------------------------
# Emulab's tb-* commands

proc ::nb::node_field {cmd field min max usage arglist} {
    if {![arity $arglist $min $max $usage]} { return "" }
    set node [lindex $arglist 0]
    if {![need $node node $cmd]} { return "" }
    puts_str $node $field [lindex $arglist 1]
    return ""
}

proc ::tb-set-node-os {args} {
    ::nb::node_field tb-set-node-os os 2 -1 {tb-set-node-os NODE OS} $args
}
proc ::tb-set-hardware {args} {
    ::nb::node_field tb-set-hardware hardware 2 -1 {tb-set-hardware NODE TYPE} $args
}
proc ::tb-set-node-startcmd {args} {
    ::nb::node_field tb-set-node-startcmd startcmd 2 2 {tb-set-node-startcmd NODE COMMAND} $args
}
proc ::tb-set-node-startup {args} {
    ::nb::node_field tb-set-node-startup startcmd 2 2 {tb-set-node-startup NODE COMMAND} $args
}
proc ::tb-fix-node {args} {
    ::nb::node_field tb-fix-node fix 2 2 {tb-fix-node NODE PNODE} $args
}
proc ::nb-set-node-cpu {args} {
    ::nb::node_field nb-set-node-cpu cpu 2 2 {nb-set-node-cpu NODE CORES} $args
}
proc ::tb-set-node-memsize {args} {
    if {![::nb::arity $args 2 2 {tb-set-node-memsize NODE MEGABYTES}]} { return "" }
    lassign $args node size
    if {![::nb::need $node node tb-set-node-memsize]} { return "" }
    ::nb::puts_str $node memory ${size}MiB
    return ""
}
proc ::nb-set-node-memory {args} {
    ::nb::node_field nb-set-node-memory memory 2 2 {nb-set-node-memory NODE SIZE} $args
}

proc ::nb-set-node-cpu-pin {args} {
    if {![::nb::arity $args 2 2 {nb-set-node-cpu-pin NODE {CPU ...}}]} { return "" }
    lassign $args node cpus
    if {![::nb::need $node node nb-set-node-cpu-pin]} { return "" }
    set items {}
    foreach c $cpus { lappend items [list s $c] }
    ::nb::put $node cpu_pin [list a $items]
    return ""
}

proc ::nb-set-node-sysctl {args} {
    if {![::nb::arity $args 3 3 {nb-set-node-sysctl NODE KEY VALUE}]} { return "" }
    lassign $args node key value
    if {![::nb::need $node node nb-set-node-sysctl]} { return "" }
    ::tcl::dict::set ::nb::sysctl($node) $key [list $value [::nb::where]]
    return ""
}

proc ::tb-set-ip-routing {args} {
    if {![::nb::arity $args 1 1 {tb-set-ip-routing static|session|manual}]} { return "" }
    set mode [::tcl::string::tolower [lindex $args 0]]
    if {$mode eq "ospf"} {
        ::nb::warn "tb-set-ip-routing ospf: OSPF is computed as static shortest paths (like Session);\
            routes are not recomputed when links go down"
        set mode session
    }
    if {$mode ni {static session manual none}} {
        return [::nb::error "tb-set-ip-routing '[lindex $args 0]' is not supported; use static,\
            session or manual"]
    }
    ::nb::set_routing $mode
    return ""
}

# The link or LAN H, checked: an error naming CMD when it is not one.
proc ::nb::need_linklan {h cmd} {
    return [need $h {link lan} $cmd]
}

proc ::nb::linklan_field {cmd field usage arglist} {
    if {![arity $arglist 2 2 $usage]} { return "" }
    lassign $arglist h value
    if {![need_linklan $h $cmd]} { return "" }
    puts_str $h $field $value
    return ""
}

proc ::tb-set-link-loss {args} {
    if {![::nb::arity $args 2 3 {tb-set-link-loss LINK LOSS | tb-set-link-loss SRC DST LOSS}]} {
        return ""
    }
    if {[llength $args] == 2} {
        return [::nb::linklan_field tb-set-link-loss loss {tb-set-link-loss LINK LOSS} $args]
    }
    lassign $args a b loss
    ::nb::set h [::nb::find_link $a $b tb-set-link-loss]
    if {$h ne ""} { ::nb::puts_str $h loss $loss }
    return ""
}

proc ::tb-set-lan-loss {args} {
    if {![::nb::arity $args 2 2 {tb-set-lan-loss LAN LOSS}]} { return "" }
    lassign $args h loss
    if {![::nb::need $h lan tb-set-lan-loss]} { return "" }
    ::nb::puts_str $h loss $loss
    return ""
}

proc ::tb-set-netmask {args} {
    ::nb::linklan_field tb-set-netmask netmask {tb-set-netmask LINK|LAN NETMASK} $args
}

proc ::tb-set-noshaping {args} {
    ::nb::linklan_field tb-set-noshaping noshaping {tb-set-noshaping LINK|LAN 0|1} $args
}

proc ::tb-set-link-simplex-params {args} {
    if {![::nb::arity $args 5 5 {tb-set-link-simplex-params LINK SRC DELAY BANDWIDTH LOSS}]} {
        return ""
    }
    lassign $args h node delay bw loss
    if {![::nb::need $h link tb-set-link-simplex-params]} { return "" }
    set i [::nb::member_index $h $node tb-set-link-simplex-params]
    if {$i < 0} { return "" }
    foreach {field value} [list delay $delay bandwidth $bw loss $loss] {
        ::nb::puts_str $h members.$i.egress.$field $value
    }
    return ""
}

proc ::tb-set-lan-simplex-params {args} {
    set usage {tb-set-lan-simplex-params LAN NODE TODELAY TOBW TOLOSS FROMDELAY FROMBW FROMLOSS}
    if {![::nb::arity $args 8 8 $usage]} { return "" }
    lassign $args h node todelay tobw toloss fromdelay frombw fromloss
    if {![::nb::need $h lan tb-set-lan-simplex-params]} { return "" }
    set i [::nb::member_index $h $node tb-set-lan-simplex-params]
    if {$i < 0} { return "" }
    foreach {dir field value} [list egress delay $todelay egress bandwidth $tobw \
            egress loss $toloss ingress delay $fromdelay ingress bandwidth $frombw \
            ingress loss $fromloss] {
        ::nb::puts_str $h members.$i.$dir.$field $value
    }
    return ""
}

# Sets FIELD=VALUE pairs on both halves (node to switch and back) of NODE's port on LAN H.
proc ::nb::node_lan {cmd usage count arglist fields} {
    if {![arity $arglist [expr {$count + 2}] [expr {$count + 2}] $usage]} { return "" }
    set values [lassign $arglist node h]
    if {![need $node node $cmd] || ![need $h lan $cmd]} { return "" }
    set i [member_index $h $node $cmd]
    if {$i < 0} { return "" }
    foreach field $fields value $values {
        puts_str $h members.$i.egress.$field $value
        puts_str $h members.$i.ingress.$field $value
    }
    return ""
}

proc ::tb-set-node-lan-delay {args} {
    ::nb::node_lan tb-set-node-lan-delay {tb-set-node-lan-delay NODE LAN DELAY} 1 $args delay
}
proc ::tb-set-node-lan-bandwidth {args} {
    ::nb::node_lan tb-set-node-lan-bandwidth {tb-set-node-lan-bandwidth NODE LAN BANDWIDTH} 1 \
        $args bandwidth
}
proc ::tb-set-node-lan-loss {args} {
    ::nb::node_lan tb-set-node-lan-loss {tb-set-node-lan-loss NODE LAN LOSS} 1 $args loss
}
proc ::tb-set-node-lan-params {args} {
    ::nb::node_lan tb-set-node-lan-params {tb-set-node-lan-params NODE LAN DELAY BANDWIDTH LOSS} \
        3 $args {delay bandwidth loss}
}

# Sets the address of NODE's port on link or LAN H.
proc ::nb::set_ip {cmd h node ip} {
    set i [member_index $h $node $cmd]
    if {$i >= 0} { puts_str $h members.$i.ip $ip }
    return ""
}

proc ::tb-set-ip {args} {
    if {![::nb::arity $args 2 2 {tb-set-ip NODE IP}]} { return "" }
    lassign $args node ip
    if {![::nb::need $node node tb-set-ip]} { return "" }
    ::nb::set links $::nb::ifaces($node)
    if {[llength $links] != 1} {
        return [::nb::error "tb-set-ip: [::nb::label $node] has [llength $links] links or LANs so\
            far, not one; use tb-set-ip-link, tb-set-ip-lan or tb-set-ip-interface"]
    }
    ::nb::set_ip tb-set-ip [lindex $links 0] $node $ip
}

proc ::tb-set-ip-interface {args} {
    if {![::nb::arity $args 3 3 {tb-set-ip-interface NODE DST IP}]} { return "" }
    lassign $args node dst ip
    ::nb::set h [::nb::find_link $node $dst tb-set-ip-interface]
    if {$h ne ""} { ::nb::set_ip tb-set-ip-interface $h $node $ip }
    return ""
}

proc ::tb-set-ip-link {args} {
    if {![::nb::arity $args 3 3 {tb-set-ip-link NODE LINK IP}]} { return "" }
    lassign $args node h ip
    if {![::nb::need $node node tb-set-ip-link] || ![::nb::need $h link tb-set-ip-link]} {
        return ""
    }
    ::nb::set_ip tb-set-ip-link $h $node $ip
}

proc ::tb-set-ip-lan {args} {
    if {![::nb::arity $args 3 3 {tb-set-ip-lan NODE LAN IP}]} { return "" }
    lassign $args node h ip
    if {![::nb::need $node node tb-set-ip-lan] || ![::nb::need $h lan tb-set-ip-lan]} {
        return ""
    }
    ::nb::set_ip tb-set-ip-lan $h $node $ip
}

# Emulab commands that have no effect here: recorded as `inert` entries for the resolver.
proc ::nb::inert {command arglist} {
    set items {}
    foreach a $arglist {
        lappend items [expr {[is_object $a] ? [list r $a] : [list s $a]}]
    }
    lappend ::nb::inert [list $command $items [where]]
    return ""
}

foreach ::nb::cmd {
    tb-set-node-tarfiles tb-set-tarfiles tb-set-node-rpms tb-set-node-cmdline
    tb-set-node-failure-action tb-set-link-failure-action tb-set-endnodeshaping
    tb-use-endnodeshaping tb-force-endnodeshaping tb-set-sync-server tb-make-soft-vtype
    tb-make-hard-vtype tb-make-weighted-vtype tb-set-colocate-factor tb-set-cpu-usage
    tb-set-mem-usage tb-set-link-est-bandwidth tb-set-lan-est-bandwidth tb-set-multiplexed
    tb-set-useveth tb-set-link-encap tb-set-allowcolocate tb-set-security-level tb-use-ipassign
    tb-add-node-attribute tb-elab-in-elab tb-set-link-backfill tb-set-lan-backfill
    tb-set-link-simplex-backfill tb-set-node-lan-est-bandwidth tb-set-node-lan-backfill
    tb-set-uselatestwadata tb-set-usewatunnels tb-set-wasolver-weights tb-set-node-usesharednode
    tb-set-node-sharingmode tb-set-node-service tb-add-node-service-hook tb-bind-parent
    tb-fix-current-resources tb-set-encapsulate tb-set-jail-os tb-set-delay-os
    tb-set-delay-capacity tb-set-ipassign-args tb-set-dpdb tb-set-elabinelab-cvstag
    tb-elabinelab-singlenet tb-set-elabinelab-attribute tb-unset-elabinelab-attribute
    tb-set-node-plab-role tb-set-node-plab-plcnet tb-use-physnaming tb-set-modelnet-cores
    tb-set-modelnet-edges tb-set-node-deltas tb-set-lan-protocol tb-set-link-protocol
    tb-set-lan-accesspoint tb-set-lan-setting tb-set-node-lan-setting tb-feedback-vnode
    tb-feedback-vlan tb-set-vlink-emulation tb-set-node-id tb-set-node-inner-elab-role
} {
    proc ::$::nb::cmd {args} "::nb::inert $::nb::cmd \$args"
}
unset ::nb::cmd

# ----------------------------------------------------------------------------------------------
# nestbed's nb-* link extensions (links and LANs, both directions unless a source is named)

proc ::nb-set-link-jitter {args} {
    if {![::nb::arity $args 2 3 {nb-set-link-jitter LINK JITTER ?uniform|normal|pareto|paretonormal?}]} {
        return ""
    }
    lassign $args h jitter dist
    if {![::nb::need_linklan $h nb-set-link-jitter]} { return "" }
    ::nb::puts_str $h jitter $jitter
    if {$dist ne ""} { ::nb::puts_str $h jitter_distribution $dist }
    return ""
}

proc ::nb-set-link-reorder {args} {
    ::nb::linklan_field nb-set-link-reorder reorder {nb-set-link-reorder LINK 0|1} $args
}
proc ::nb-set-link-duplicate {args} {
    ::nb::linklan_field nb-set-link-duplicate duplicate {nb-set-link-duplicate LINK P} $args
}
proc ::nb-set-link-corrupt {args} {
    ::nb::linklan_field nb-set-link-corrupt corrupt {nb-set-link-corrupt LINK P} $args
}

proc ::nb-set-link-gilbert {args} {
    if {![::nb::arity $args 3 3 {nb-set-link-gilbert LINK LOSS_RATE BURST_LENGTH}]} { return "" }
    lassign $args h rate burst
    if {![::nb::need_linklan $h nb-set-link-gilbert]} { return "" }
    ::nb::puts_str $h gilbert_elliott.loss_rate $rate
    ::nb::puts_str $h gilbert_elliott.burst_length $burst
    return ""
}

proc ::nb-set-link-gilbert-elliott {args} {
    if {![::nb::arity $args 3 5 {nb-set-link-gilbert-elliott LINK P R ?LOSS_BAD? ?LOSS_GOOD?}]} {
        return ""
    }
    set values [lassign $args h]
    if {![::nb::need_linklan $h nb-set-link-gilbert-elliott]} { return "" }
    foreach field {p r loss_bad loss_good} value $values {
        if {$value ne ""} { ::nb::puts_str $h gilbert_elliott.$field $value }
    }
    return ""
}

proc ::nb-set-link-drop-packets {args} {
    if {![::nb::arity $args 3 3 {nb-set-link-drop-packets LINK SRC {ORDINAL ...}}]} { return "" }
    lassign $args h node ordinals
    if {![::nb::need_linklan $h nb-set-link-drop-packets]} { return "" }
    set i [::nb::member_index $h $node nb-set-link-drop-packets]
    if {$i < 0} { return "" }
    set items {}
    foreach n $ordinals { lappend items [list s $n] }
    ::nb::put $h members.$i.egress.drop_packets [list a $items]
    return ""
}

# ----------------------------------------------------------------------------------------------
# Wrapped Tcl commands: set (names), new, source, puts, exit, unknown, open

# Names object H after variable VAR (Emulab's rule: the first variable assigned names it) and
# returns the value the variable gets: the object's new handle when it was renamed.
proc ::nb::name_from_var {h var} {
    variable kind
    if {[::tcl::info::exists ::nb::name($h)] || $kind($h) in {ns queue dir dummy blockstore}} {
        return $h
    }
    set n [::tcl::string::map {( - ) ""} [regsub {^::} $var ""]]
    set what $kind($h)
    if {$what eq "app"} { set what [lindex [::tcl::dict::get $::nb::F($h) type] 1] }
    if {$what eq "lan"} { set what LAN }
    # Node, link and LAN names become host and interface names; the others may hold '_'.
    if {$kind($h) in {node link lan}} {
        set valid [regexp {^[-0-9A-Za-z]+$} $n]
        set allowed "letters, digits and '-'"
    } else {
        set valid [regexp {^[-0-9A-Za-z_]+$} $n]
        set allowed "letters, digits, '-' and '_'"
    }
    if {!$valid} {
        error "$what name '$n' (from variable $var) is not valid: names may contain only\
            $allowed; rename the variable"
        return $h
    }
    if {[::tcl::info::exists ::nb::used($n)]} {
        set other $::nb::used($n)
        error "$what name '$n' (from variable $var) is already used by the\
            [::tcl::string::map {app application} $kind($other)] created at line\
            [lindex $::nb::created($other) 1]; use a different variable for each object"
        return $h
    }
    set ::nb::name($h) $n
    set ::nb::used($n) $h
    if {$h eq $::nb::last} { return [rename_object $h $n] }
    return $h
}

# Emulab renames an object assigned right after its creation to its name, so the name itself
# is the object (`tb-set-ip ping 10.0.0.1`, `lan$router` with $router the string "router").
# Right after creation only the object's own entries and its nodes' interface lists refer to
# it. A name that is already a command (a proc, a Tcl command) keeps the internal handle.
proc ::nb::rename_object {h n} {
    if {[llength [::tcl::info::commands ::$n]] || [::tcl::info::exists ::nb::kind($n)]} { return $h }
    rename $h ::$n
    foreach array {kind name F L created members ifaces routes steps gmembers tlevents} {
        if {[::tcl::info::exists ::nb::${array}($h)]} {
            set ::nb::${array}($n) [set ::nb::${array}($h)]
            unset ::nb::${array}($h)
        }
    }
    set ::nb::used($n) $n
    set i [lsearch -exact $::nb::order $h]
    lset ::nb::order $i $n
    if {[::tcl::info::exists ::nb::members($n)]} {
        foreach node $::nb::members($n) {
            set j [lsearch -exact $::nb::ifaces($node) $h]
            if {$j >= 0} { lset ::nb::ifaces($node) $j $n }
        }
    }
    set ::nb::renamed($h) $n
    set ::nb::last ""
    return $n
}

proc ::nb::install_wrappers {} {
    rename ::set ::nb::set
    rename ::puts ::nb::realputs

    # `set` names objects and applies overridden opt(NAME) values.
    proc ::set {varName args} {
        if {[llength $args] == 1} {
            ::nb::set value [lindex $args 0]
            # Only the user's own `set` names (this library's tb-* procs, in the global
            # namespace too, use ::nb::set).
            if {[::tcl::info::exists ::nb::kind($value)]
                    && ![::tcl::string::match ::nb* [uplevel 1 {::tcl::namespace::current}]]
                    && ![::tcl::string::match ::oo* [uplevel 1 {::tcl::namespace::current}]]} {
                ::nb::set value [::nb::name_from_var $value $varName]
            }
            if {[regexp {^(?:::)?opt\((.*)\)$} $varName -> optname]} {
                if {[::tcl::dict::exists $::nb::overrides $optname]} {
                    ::nb::set value [::tcl::dict::get $::nb::overrides $optname]
                    ::tcl::dict::set ::nb::usedOverrides $optname 1
                }
                ::tcl::dict::set ::nb::envLocs $optname [::nb::where]
            }
            return [uplevel 1 [list ::nb::set $varName $value]]
        }
        return [uplevel 1 [list ::nb::set $varName {*}$args]]
    }

    # The script's own output goes to stderr: stdout carries the JSON.
    proc ::puts {args} {
        if {[llength $args] == 1 || ([llength $args] == 2 && [lindex $args 0] eq "-nonewline")} {
            return [::nb::realputs {*}[linsert $args end-1 stderr]]
        }
        set channel [lindex $args end-1]
        if {$channel eq "stdout"} { lset args end-1 stderr }
        return [::nb::realputs {*}$args]
    }

    proc ::exit {args} {
        return -code error -errorcode {NESTBED EXIT} "exit"
    }

    # tb_compat.tcl is already loaded; other files are found relative to the sourcing file
    # (the sandbox allows only files in the experiment file's folder).
    proc ::source {args} {
        set path [lindex $args end]
        if {[file tail $path] eq "tb_compat.tcl"} { return "" }
        if {[file pathtype $path] eq "relative"} {
            set here [file dirname [::nb::current_file]]
            lset args end [file join $here $path]
        }
        if {[llength $args] == 1} { set args [linsert $args 0 -encoding utf-8] }
        return [uplevel 1 [list ::nb::realsource {*}$args]]
    }

    # Files are opened for reading only, relative to the experiment file's folder. A file
    # opened for writing (ns-2's trace and nam files) gets a channel that discards its output.
    proc ::open {path args} {
        set mode [expr {[llength $args] ? [lindex $args 0] : "r"}]
        if {![::tcl::string::match |* $path] && $mode ni {r rb RDONLY {RDONLY BINARY}}} {
            ::nb::warn "open of '$path' for writing writes nothing while parsing (parsing changes\
                no files); `nestbed simulate` writes ns-2's traces, and programs on the nodes\
                write their own files"
            return [chan create write ::nb::nullchan]
        }
        return [::nb::realopen $path {*}$args]
    }

    # Unknown commands are errors; parsing goes on.
    proc ::unknown {args} {
        set cmd [lindex $args 0]
        if {$cmd eq "Scheduler/RealTime" && [lrange $args 1 2] eq {set maxslop_}} {
            return [::nb::maxslop {*}[lrange $args 3 end]]
        }
        if {[regexp $::nb::NS_CLASSES $cmd]} {
            ::nb::warn "'[join [lrange $args 0 1]]' acts on the ns-2 class $cmd itself (class\
                defaults and methods), which only the simulator uses; ignored here"
            return ""
        }
        ::nb::error "unknown command '$cmd'; it is not a Tcl, ns-2 or Emulab command that\
            nestbed knows (check its spelling)"
        return ""
    }

    proc ::new {args} {
        if {[llength $args] < 1} { return [::nb::error "wrong arguments: use `new CLASS`"] }
        return [::nb::new {*}$args]
    }

    trace add execution proc leave ::nb::proc_defined
}

# Refuses a command: one error at the user's line, and the script stops.
proc ::nb::refuse {message} {
    error $message
    return -code error -errorcode {NESTBED REFUSED} $message
}

# A write-only channel that discards what is written to it.
namespace eval ::nb::nullchan {
    namespace export *
    namespace ensemble create
    proc initialize {channel mode} { return {initialize finalize watch write} }
    proc finalize {channel} {}
    proc watch {channel events} {}
    proc write {channel data} { return [::tcl::string::length $data] }
}

# Commands a safe interpreter lacks, refused with what to use instead.
foreach {::nb::cmd ::nb::sentence} {
    exec {exec is refused: parsing an experiment file runs no programs; run commands on a node
        with a program agent (`$node program-agent -command ...`) or tb-set-node-startup}
    socket {socket is refused: parsing an experiment file makes no connections; connect from a
        node with a program agent or tb-set-node-startup}
    cd {cd is refused: an experiment file reads files relative to its own folder; name them
        relative to it}
    glob {glob is refused: an experiment file may read only the files it names in its own folder;
        list them explicitly}
    load {load is refused: an experiment file cannot load binary extensions; use plain Tcl}
    unload {unload is refused: an experiment file cannot load binary extensions; use plain Tcl}
    pwd {pwd is refused: parsing has no working folder; name files relative to the experiment
        file}
    encoding {encoding is refused while parsing; write the experiment file in UTF-8}
} {
    proc ::$::nb::cmd {args} [list ::nb::refuse [regsub -all {\s+} $::nb::sentence " "]]
}
unset ::nb::cmd ::nb::sentence

# The user file whose command is running (full path).
proc ::nb::current_file {} {
    for {set i [expr {[::tcl::info::frame] - 1}]} {$i > 0} {incr i -1} {
        set f [::tcl::info::frame $i]
        if {[::tcl::dict::get $f type] eq "source" && [::tcl::dict::exists $f file]
                && [::tcl::dict::get $f file] ni $::nb::libfiles} {
            return [::tcl::dict::get $f file]
        }
    }
    return $::nb::mainfile
}

# Remembers where each user proc is defined, to locate errors raised inside it.
proc ::nb::proc_defined {command code result op} {
    if {$code != 0} { return }
    set full [uplevel 1 [list ::tcl::namespace::which -command [lindex $command 1]]]
    if {$full ne ""} { ::tcl::dict::set ::nb::procdefs $full [where] }
}

# The file:line of a Tcl error, from its -errorinfo (innermost script line first).
proc ::nb::error_location {info} {
    set offset 0
    # The failing command, as errorinfo quotes it (its first line is searched for below).
    set command ""
    regexp {\n    while executing\n"([^\n]*)} $info -> command
    foreach line [split $info "\n"] {
        if {![regexp {^\s*\((.*) line (\d+)\)$} [::tcl::string::trim $line] -> what n]} { continue }
        if {[regexp {^file "(.*)"$} $what -> file]} {
            if {$file ni $::nb::libfiles} {
                return [list [tail $file] [find_command $file [expr {$n + $offset}] $command]]
            }
            set offset 0
        } elseif {[regexp {^procedure "(.*)"$} $what -> pname]} {
            if {![::tcl::string::match ::* $pname]} { set pname ::$pname }
            if {[::tcl::dict::exists $::nb::procdefs $pname]} {
                lassign [::tcl::dict::get $::nb::procdefs $pname] file first
                return [list $file [expr {$first + $n - 1 + $offset}]]
            }
            set offset 0
        } elseif {[::tcl::string::match {"*"*} $what]} {
            # A body of for, foreach, while, if, catch...: its lines count from the command's.
            incr offset [expr {$n - 1}]
        } else {
            set offset 0
        }
    }
    return [list [tail $::nb::mainfile] 1]
}

# The line of COMMAND in FILE at or after line FROM. Error lines are counted from the start of
# the innermost body Tcl names, which is not known for an else branch, a body run by uplevel
# (make-simulated) or namespace eval, or an if whose condition is not braced; the failing
# command itself is found in the file instead. FROM when it is not found.
proc ::nb::find_command {file from command} {
    # errorinfo quotes the command ("...") and cuts a long one short with "..."
    set command [::tcl::string::trim [::tcl::string::trimright $command {".}]]
    if {$command eq "" || [catch {::nb::realopen $file} channel]} { return $from }
    set lines [split [read $channel] "\n"]
    close $channel
    for {set i [expr {$from - 1}]} {$i < [llength $lines]} {incr i} {
        if {[::tcl::string::first $command [::tcl::string::trim [lindex $lines $i]]] == 0} {
            return [expr {$i + 1}]
        }
    }
    return $from
}

# ----------------------------------------------------------------------------------------------
# Output: final names, the document, JSON

# Gives every unnamed object kind0, kind1, ... in creation order, skipping used names.
proc ::nb::assign_default_names {} {
    variable order
    variable kind
    ::tcl::array::set counter {}
    foreach h $order {
        if {[::tcl::info::exists ::nb::name($h)] || $kind($h) in {queue dir dummy blockstore}} { continue }
        switch -- $kind($h) {
            agent - app { set prefix [lindex [::tcl::dict::get $::nb::F($h) type] 1] }
            default { set prefix $kind($h) }
        }
        if {![::tcl::info::exists counter($prefix)]} { set counter($prefix) 0 }
        while {[::tcl::info::exists ::nb::used($prefix$counter($prefix))]} { incr counter($prefix) }
        set n $prefix$counter($prefix)
        set ::nb::name($h) $n
        set ::nb::used($n) $h
    }
}

proc ::nb::objname {h} {
    switch -- [kind_of $h] {
        ns { return ns }
        queue - dir { return [objname $::nb::link($h)] }
    }
    if {[::tcl::info::exists ::nb::name($h)]} { return $::nb::name($h) }
    if {[::tcl::info::exists ::nb::renamed($h)]} { return $::nb::renamed($h) }
    return $h
}

proc ::nb::resolve_message {message} {
    set map {}
    foreach h [regexp -all -inline {\x01[^\x01]*\x01} $message] {
        lappend map $h [objname [::tcl::string::trim $h \x01]]
    }
    return [::tcl::string::map $map $message]
}

# Nests a flat dict of dotted paths into a tagged JSON object.
proc ::nb::nest {flat} {
    set heads {}
    set leaves [::tcl::dict::create]
    ::tcl::array::set sub {}
    ::tcl::dict::for {path value} $flat {
        set dot [::tcl::string::first . $path]
        if {$dot < 0} {
            set head $path
            ::tcl::dict::set leaves $head $value
        } else {
            set head [::tcl::string::range $path 0 [expr {$dot - 1}]]
            ::tcl::dict::set sub($head) [::tcl::string::range $path [expr {$dot + 1}] end] $value
        }
        if {$head ni $heads} { lappend heads $head }
    }
    set out {}
    foreach head $heads {
        if {[::tcl::dict::exists $leaves $head]} {
            lappend out $head [::tcl::dict::get $leaves $head]
        } else {
            lappend out $head [nest $sub($head)]
        }
    }
    return [list o $out]
}

# Fields of H whose path starts with PREFIX (the prefix removed), in recording order.
proc ::nb::fields_under {h prefix} {
    set out [::tcl::dict::create]
    set n [::tcl::string::length $prefix]
    ::tcl::dict::for {path value} $::nb::F($h) {
        if {[::tcl::string::equal -length $n $prefix $path]} {
            ::tcl::dict::set out [::tcl::string::range $path $n end] $value
        }
    }
    return $out
}

# Fields of H that are not under any of the PREFIXES.
proc ::nb::fields_except {h prefixes} {
    set out [::tcl::dict::create]
    ::tcl::dict::for {path value} $::nb::F($h) {
        set skip 0
        foreach p $prefixes {
            if {[::tcl::string::match $p* $path]} { set skip 1; break }
        }
        if {!$skip} { ::tcl::dict::set out $path $value }
    }
    return $out
}

# Records every field location of H under the document path BASE.
proc ::nb::locate_fields {h base} {
    variable locations
    ::tcl::dict::set locations $base $::nb::created($h)
    ::tcl::dict::for {path loc} $::nb::L($h) {
        ::tcl::dict::set locations $base.$path $loc
    }
}

proc ::nb::handles_of {kind} {
    set out {}
    foreach h $::nb::order {
        if {$::nb::kind($h) eq $kind} { lappend out $h }
    }
    return $out
}

proc ::nb::emit_node {h base} {
    variable locations
    set fields [lindex [nest $::nb::F($h)] 1]
    set obj [concat [list name [list r $h]] $fields]
    if {[::tcl::info::exists ::nb::sysctl($h)] && [::tcl::dict::size $::nb::sysctl($h)]} {
        set items {}
        ::tcl::dict::for {key entry} $::nb::sysctl($h) {
            lappend items $key [list s [lindex $entry 0]]
            ::tcl::dict::set locations $base.sysctls.$key [lindex $entry 1]
        }
        lappend obj sysctls [list o $items]
    }
    if {[llength $::nb::routes($h)]} {
        set items {}
        set j 0
        foreach entry $::nb::routes($h) {
            lassign $entry route loc
            lappend items [list o $route]
            ::tcl::dict::set locations $base.routes.$j $loc
            incr j
        }
        lappend obj routes [list a $items]
    }
    return [list o $obj]
}

proc ::nb::emit_link {h base} {
    variable locations
    set obj [list name [list r $h]]
    set members {}
    set i 0
    foreach node $::nb::members($h) {
        set extra [fields_under $h members.$i.]
        if {[::tcl::dict::size $extra]} {
            lappend members [list o [concat [list node [list r $node]] [lindex [nest $extra] 1]]]
        } else {
            lappend members [list r $node]
        }
        ::tcl::dict::set locations $base.members.$i $::nb::created($h)
        incr i
    }
    lappend obj members [list a $members]
    lappend obj {*}[lindex [nest [fields_except $h members.]] 1]
    return [list o $obj]
}

# An event or action as a tagged object; TIME is "" for sequence steps.
proc ::nb::emit_action {time object verb args} {
    set obj {}
    if {$time ne ""} { lappend obj at [list s $time] }
    lappend obj object [list r $object] verb [list s $verb]
    if {[llength $args]} { lappend obj args [list a $args] }
    return [list o $obj]
}

proc ::nb::emit_simple {h base required} {
    foreach field $required {
        if {![::tcl::dict::exists $::nb::F($h) $field]} {
            set hint [::tcl::dict::get {
                node {attach it with `$ns attach-agent NODE AGENT` or `$prog set node NODE`}
                agent {attach it with `$app attach-agent AGENT`}
                command {set it with `$prog set command "..."`}
            } $field]
            error "[label $h] has no $field; $hint" $::nb::created($h)
            return ""
        }
    }
    return [list o [concat [list name [list r $h]] [lindex [nest $::nb::F($h)] 1]]]
}

proc ::nb::document {} {
    variable locations
    set doc {}
    if {$::nb::routing ne ""} {
        lappend doc routing [list s $::nb::routing]
        ::tcl::dict::set locations routing $::nb::routingLoc
    }
    if {$::nb::hardLimit ne ""} {
        lappend doc simulation [list o [list hard_limit [list s $::nb::hardLimit]]]
        ::tcl::dict::set locations simulation.hard_limit $::nb::hardLimitLoc
    }
    set env {}
    if {[::tcl::array::exists ::opt]} {
        foreach key [lsort [::tcl::array::names ::opt]] {
            lappend env $key [list s $::opt($key)]
            if {[::tcl::dict::exists $::nb::envLocs $key]} {
                ::tcl::dict::set locations env.$key [::tcl::dict::get $::nb::envLocs $key]
            }
        }
        lappend doc env [list o $env]
    }
    if {[::tcl::dict::size $::nb::parameters]} {
        set items {}
        ::tcl::dict::for {key value} $::nb::parameters {
            lappend items $key [list s $value]
            ::tcl::dict::set locations parameters.$key [::tcl::dict::get $::nb::paramLocs $key]
        }
        lappend doc parameters [list o $items]
    }
    foreach {section kind emitter} {
        nodes node emit_node links link emit_link lans lan emit_link
    } {
        set items {}
        foreach h [handles_of $kind] {
            set base $section.[llength $items]
            locate_fields $h $base
            lappend items [$emitter $h $base]
        }
        lappend doc $section [list a $items]
    }
    foreach {section kind required} {
        agents agent {node} applications app {agent} programs program {node command}
    } {
        set items {}
        foreach h [handles_of $kind] {
            set item [emit_simple $h "" $required]
            if {$item eq ""} { continue }
            locate_fields $h $section.[llength $items]
            lappend items $item
        }
        lappend doc $section [list a $items]
    }
    set items {}
    foreach e $::nb::events {
        lassign $e time object verb args loc
        ::tcl::dict::set locations events.[llength $items] $loc
        lappend items [emit_action $time $object $verb {*}$args]
    }
    lappend doc events [list a $items]
    set items {}
    foreach h [handles_of timeline] {
        set base timelines.[llength $items]
        ::tcl::dict::set locations $base $::nb::created($h)
        set evs {}
        foreach e $::nb::tlevents($h) {
            lassign $e time object verb args loc
            ::tcl::dict::set locations $base.events.[llength $evs] $loc
            lappend evs [emit_action $time $object $verb {*}$args]
        }
        lappend items [list o [list name [list r $h] events [list a $evs]]]
    }
    lappend doc timelines [list a $items]
    set items {}
    foreach h [handles_of sequence] {
        set base sequences.[llength $items]
        ::tcl::dict::set locations $base $::nb::created($h)
        set steps {}
        foreach s $::nb::steps($h) {
            lassign $s object verb args loc
            ::tcl::dict::set locations $base.steps.[llength $steps] $loc
            lappend steps [emit_action "" $object $verb {*}$args]
        }
        lappend items [list o [list name [list r $h] steps [list a $steps]]]
    }
    lappend doc sequences [list a $items]
    set items {}
    foreach h [handles_of group] {
        set base groups.[llength $items]
        ::tcl::dict::set locations $base $::nb::created($h)
        set ms {}
        foreach m $::nb::gmembers($h) {
            lassign $m x loc
            ::tcl::dict::set locations $base.members.[llength $ms] $loc
            lappend ms [list r $x]
        }
        lappend items [list o [list name [list r $h] members [list a $ms]]]
    }
    lappend doc groups [list a $items]
    set items {}
    foreach x $::nb::inert {
        lassign $x command args loc
        ::tcl::dict::set locations inert.[llength $items] $loc
        lappend items [list o [list command [list s $command] args [list a $args]]]
    }
    lappend doc inert [list a $items]
    return [list o $doc]
}

# A JSON string literal: quotes, backslashes, control and non-ASCII characters escaped.
proc ::nb::json_string {text} {
    set text [::tcl::string::map {\\ \\\\ \" \\\" \n \\n \r \\r \t \\t} $text]
    if {[regexp {[^\x20-\x7e]} $text]} {
        set out ""
        foreach char [split $text ""] {
            scan $char %c code
            if {$code >= 0x20 && $code <= 0x7e} {
                append out $char
            } elseif {$code > 0xffff} {
                set v [expr {$code - 0x10000}]
                append out [format {\u%04x\u%04x} [expr {0xd800 | ($v >> 10)}] \
                    [expr {0xdc00 | ($v & 0x3ff)}]]
            } else {
                append out [format {\u%04x} $code]
            }
        }
        set text $out
    }
    return "\"$text\""
}

# Encodes a tagged value: {s TEXT} {r HANDLE} {n NUMBER} {a ITEMS} {o {KEY VALUE ...}}.
proc ::nb::json {value} {
    lassign $value tag body
    switch -- $tag {
        s { return [json_string $body] }
        r { return [json_string [objname $body]] }
        n { return $body }
        a {
            set parts {}
            foreach item $body { lappend parts [json $item] }
            return "\[[join $parts ,]\]"
        }
        o {
            set parts {}
            foreach {key item} $body { lappend parts "[json_string $key]:[json $item]" }
            return "{[join $parts ,]}"
        }
    }
    return -code error "nestbed.tcl: bad tagged value $value"
}

proc ::nb::problems {list} {
    set items {}
    foreach p $list {
        lassign $p message loc
        lassign $loc file line
        lappend items [list o [list message [list s [resolve_message $message]] \
            file [list s $file] line [list n $line]]]
    }
    return [list a $items]
}

# `$ns at T "NAME"` where NAME is the script's own procedure: it runs in the simulator; in
# emulation it is a warning, and a procedure that calls exit ends the run there (like halt).
proc ::nb::check_proc_events {} {
    foreach entry $::nb::procEvents {
        lassign $entry time pname loc what
        if {![llength [::tcl::info::procs ::$pname]]} {
            error "$what: '$pname' is not an object of this experiment nor a procedure of the\
                script; events act on nodes, links, LANs, queues, agents, applications,\
                programs, timelines, sequences, groups or \$ns" $loc
            continue
        }
        if {[regexp {(^|[\s;\[{])exit($|[\s;\]}])} [::tcl::info::body ::$pname]]} {
            warn "$what: procedure '$pname' runs only in the simulator; in emulation it is\
                ignored, and as it calls exit the run ends there (like `\$ns halt`)" $loc
            lappend ::nb::events [list $time $::nb::ns halt {} $loc]
        } else {
            warn "$what: procedure '$pname' runs only in the simulator (`nestbed simulate`);\
                ignored in emulation" $loc
        }
    }
}

proc ::nb::output {} {
    variable locations [::tcl::dict::create]
    check_proc_events
    warn_oneway
    assign_default_names
    if {!$::nb::ran && ![llength $::nb::errors]} {
        warn "the file never calls `\$ns run`; add it at the end (ns-2 needs it)" \
            [list [file tail $::nb::mainfile] 1]
    }
    ::tcl::dict::for {pname value} $::nb::overrides {
        if {![::tcl::dict::exists $::nb::usedOverrides $pname]} {
            warn "parameter '$pname' is given but the file neither sets opt($pname) nor defines\
                it with define-template-parameter; it is ignored" \
                [list [file tail $::nb::mainfile] 1]
        }
    }
    set doc [document]
    set locs {}
    ::tcl::dict::for {path loc} $locations {
        lassign $loc file line
        lappend locs $path [list a [list [list s $file] [list n $line]]]
    }
    # Links and LANs in the order the script created them (the document lists them apart):
    # subnets are assigned in this order, as Emulab does.
    set created {}
    set counts [::tcl::dict::create link 0 lan 0]
    foreach h $::nb::order {
        set kind $::nb::kind($h)
        if {$kind in {link lan}} {
            lappend created [list s ${kind}s.[::tcl::dict::get $counts $kind]]
            ::tcl::dict::incr counts $kind
        }
    }
    set top [list o [list document $doc locations [list o $locs] \
        link_order [list a $created] \
        warnings [problems $::nb::warnings] errors [problems $::nb::errors]]]
    return [json $top]
}

# ----------------------------------------------------------------------------------------------
# Main

# Runs the user's file MAINFILE (full path; this library is LIBFILE) with the caller's
# parameter OVERRIDES and returns the JSON document; MEMORYLIMITMB is named in messages.
proc ::nb::main {mainfile libfile overrides memoryLimitMB} {
    set ::nb::memoryLimitMB $memoryLimitMB
    set ::nb::libfiles [list $libfile]
    set ::nb::overrides $overrides
    set ::nb::mainfile $mainfile
    set ::nb::maindir [file dirname $mainfile]
    # As tclsh or ns-2 would run the script with no arguments (scripts read $argc and $argv).
    set ::argv0 $mainfile
    set ::argv {}
    set ::argc 0
    install_wrappers
    set code [catch {uplevel #0 [list ::nb::realsource -encoding utf-8 $::nb::mainfile]} \
        message options]
    if {$code == 1 && [::tcl::dict::get $options -errorcode] ni {{NESTBED EXIT} {NESTBED REFUSED}}} {
        set loc [error_location [::tcl::dict::get $options -errorinfo]]
        if {[lrange [::tcl::dict::get $options -errorcode] 0 2] eq {TCL LIMIT STACK}} {
            set message "the script nests calls too deeply (an endless recursion?); make the\
                recursion end"
        } elseif {[regexp {unable to (re)?alloc} $message]} {
            set message "the script needs more than $::nb::memoryLimitMB MB of\
                memory (a huge list or string?); make the experiment's lists and strings smaller"
        }
        error $message $loc
    }
    return [output]
}
