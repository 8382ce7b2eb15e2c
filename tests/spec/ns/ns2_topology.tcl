# ns2_topology.tcl -- prints the topology real ns-2 built from an experiment file, then exits.
#
# Sourced by tests/spec/ns/test_ns_corpus.py after the stub tb_compat.tcl and before the
# experiment file: `$ns run` no longer simulates but prints one line
#
#   NB-TOPOLOGY {"nodes": [[names...], ...], "links": [[i, j], ...], "lans": [...]}
#
# Nodes are listed in creation order (by ns-2 id), as positions from 0, each with the global variables holding it
# (arrays as NAME-INDEX, as Emulab names them); links are the node pairs ns-2 joined by a
# simplex or duplex link; LANs are {"names": [...], "members": [ids]}.

proc nb_names_of {objects} {
    array set names {}
    foreach var [info globals] {
        upvar #0 $var value
        if {[array exists value]} {
            foreach key [array names value] {
                if {[lsearch -exact $objects $value($key)] >= 0} {
                    lappend names($value($key)) "$var-$key"
                }
            }
        } elseif {[info exists value] && [lsearch -exact $objects $value] >= 0} {
            lappend names($value) $var
        }
    }
    return [array get names]
}

proc nb_json_names {names object} {
    array set n $names
    if {![info exists n($object)]} { return {[]} }
    set out {}
    foreach x [lsort $n($object)] { lappend out "\"$x\"" }
    return "\[[join $out ,]\]"
}

Simulator instproc run {args} {
    $self instvar link_
    set nodes [Node info instances]
    set lans [LanNode info instances]
    set names [nb_names_of [concat $nodes $lans]]
    set byid {}
    foreach n $nodes { lappend byid [list [$n id] $n] }
    # Nodes by creation order; a LAN takes an id too, so ids are mapped to positions.
    set nodeout {}
    array set pos {}
    foreach pair [lsort -integer -index 0 $byid] {
        lassign $pair id n
        set pos($id) [llength $nodeout]
        lappend nodeout [nb_json_names $names $n]
    }
    set pairs {}
    foreach key [array names link_] {
        lassign [split $key :] a b
        if {[info exists pos($a)] && [info exists pos($b)]} {
            set a $pos($a)
            set b $pos($b)
            lappend pairs [expr {$a < $b ? "\[$a,$b\]" : "\[$b,$a\]"}]
        }
    }
    set lanout {}
    set lanids {}
    foreach lan $lans { lappend lanids [list [$lan id] $lan] }
    foreach pair [lsort -integer -index 0 $lanids] {
        set lan [lindex $pair 1]
        set members {}
        foreach m [$lan set nodelist_] { lappend members $pos([$m id]) }
        lappend lanout "{\"id\":[$lan id],\"names\":[nb_json_names $names $lan],\"members\":\[[join $members ,]\]}"
    }
    puts "NB-TOPOLOGY {\"nodes\":\[[join $nodeout ,]\],\"links\":\[[join [lsort -unique $pairs] ,]\],\"lans\":\[[join $lanout ,]\]}"
    exit 0
}
