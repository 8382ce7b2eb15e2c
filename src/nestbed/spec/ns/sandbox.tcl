# sandbox.tcl -- runs an experiment file in a Tcl safe interpreter, so that parsing runs nothing.
#
# tclsh's entry point (`tclsh sandbox.tcl FILE ?-p NAME VALUE ...?`; nestbed.tcl started by
# tclsh hands over to it too).
# This master interpreter never evaluates the user's code: it creates a safe interpreter
# (`interp create -safe`: no exec, socket, cd, glob, load, open, source or file), loads
# nestbed.tcl's commands into it, and gives it only these aliases back:
#
#   ::nb::realsource PATH        source a file in the experiment file's folder (or below)
#   ::nb::realopen PATH ?MODE?   open such a file for reading; the channel is moved to the slave
#   ::file SUBCOMMAND ...        path arithmetic; exists/isfile/... only inside that folder
#   ::fconfigure CHANNEL ...     on the slave's own channels
#
# A refused request is recorded as one error at the user's file:line and raises a Tcl error with
# -errorcode {NESTBED REFUSED}, which stops the script (and is not reported a second time). The JSON document the slave
# builds is printed here, on stdout; the script's own output goes to stderr.

namespace eval ::sb {
    variable library [file join [file dirname [file normalize [info script]]] nestbed.tcl]
    variable root ""      ;# the experiment file's folder: everything readable lives below it
    variable slave ""
}

# Whether PATH (absolute, normalized) lies in the experiment file's folder or below it.
proc ::sb::inside {path} {
    variable root
    return [expr {$path eq $root || [string first $root/ $path] == 0}]
}

# PATH made absolute (relative to the experiment file's folder) and normalized.
proc ::sb::absolute {path} {
    variable root
    if {[::file pathtype $path] ne "absolute"} { set path [::file join $root $path] }
    return [::file normalize $path]
}

# The file PATH (absolute) really is, every symbolic link followed: `file normalize` leaves a
# link in the last component, which could point out of the folder.
proc ::sb::real {path} {
    for {set hops 0} {$hops < 40 && [::file exists $path]} {incr hops} {
        if {[::file type $path] ne "link"} { return $path }
        set target [::file readlink $path]
        if {[::file pathtype $target] ne "absolute"} {
            set target [::file join [::file dirname $path] $target]
        }
        set path [::file normalize $target]
    }
    return $path
}

# Records MESSAGE as an error at the user's file:line (the slave's frames are still on its
# stack during an alias call) and stops the script.
proc ::sb::refuse {message} {
    variable slave
    $slave eval [list ::nb::error $message]
    return -code error -errorcode {NESTBED REFUSED} $message
}

proc ::sb::outside {what path} {
    variable root
    refuse "$what '$path' is refused: an experiment file may read only files in its own folder\
        ($root); copy the file there"
}

proc ::sb::source {args} {
    variable slave
    set path [real [absolute [lindex $args end]]]
    if {![inside $path]} { outside source [lindex $args end] }
    return [interp invokehidden $slave source {*}[lrange $args 0 end-1] $path]
}

proc ::sb::open {path args} {
    variable slave
    set mode [expr {[llength $args] ? [lindex $args 0] : "r"}]
    if {[string match |* $path]} {
        refuse "open of a command pipe ('$path') is refused: parsing an experiment file runs\
            nothing; run commands on a node with a program agent (`\$node program-agent\
            -command ...`) or tb-set-node-startup"
    }
    if {$mode ni {r rb RDONLY {RDONLY BINARY}}} {
        refuse "open for writing ('$path' with mode $mode) is refused: parsing an experiment\
            file changes no files; write files on a node with a program agent or\
            tb-set-node-startup"
    }
    set full [real [absolute $path]]
    if {![inside $full]} { outside open $path }
    set channel [::open $full {*}$args]
    interp transfer {} $channel $slave
    return $channel
}

# `file`: path arithmetic is pure; questions about files only inside the folder; no changes.
proc ::sb::file {args} {
    set sub [lindex $args 0]
    switch -- $sub {
        tail - dirname - join - pathtype - extension - rootname - split - nativename - separator {
            return [::file {*}$args]
        }
        normalize {
            if {[llength $args] != 2} { return [::file {*}$args] }
            return [absolute [lindex $args 1]]
        }
        exists - isfile - isdirectory - readable - size - type - mtime - atime {
            if {[llength $args] != 2} { refuse "wrong arguments: use `file $sub PATH`" }
            set path [real [absolute [lindex $args 1]]]
            if {![inside $path]} { outside "file $sub of" [lindex $args 1] }
            return [::file $sub $path]
        }
    }
    refuse "file $sub is refused: parsing an experiment file changes no files and reads only\
        its own folder; do file work on a node with a program agent or tb-set-node-startup"
}

proc ::sb::fconfigure {args} {
    variable slave
    if {[lindex $args 0] in {stdin stdout stderr}} { return "" }
    return [interp invokehidden $slave fconfigure {*}$args]
}

proc ::sb::main {argv} {
    variable slave
    variable library
    variable root
    # nestbed.spec.ns sets this process's memory limit and then says go: no user code runs
    # before the limit holds.
    if {[info exists ::env(NESTBED_PARSE_WAIT)]} { gets stdin }
    set rest [lassign $argv file]
    set overrides {}
    foreach {flag pname value} $rest {
        if {$flag ne "-p"} {
            puts stderr "usage: tclsh nestbed.tcl FILE ?-p NAME VALUE ...?"
            exit 2
        }
        dict set overrides $pname $value
    }
    set mainfile [::file normalize $file]
    set root [::file dirname $mainfile]
    set slave [interp create -safe]
    interp share {} stderr $slave
    $slave alias ::nb::realsource ::sb::source
    $slave alias ::nb::realopen ::sb::open
    $slave alias ::file ::sb::file
    $slave alias ::fconfigure ::sb::fconfigure
    interp invokehidden $slave -global source $library
    # The limit itself is set by the caller (nestbed.spec.ns: RLIMIT_AS); it is only named.
    set limit 1024
    if {[info exists ::env(NESTBED_PARSE_MEMORY_MB)]} { set limit $::env(NESTBED_PARSE_MEMORY_MB) }
    set json [$slave eval [list ::nb::main $mainfile $library $overrides $limit]]
    ::fconfigure stdout -encoding ascii -translation lf
    puts stdout $json
}

if {[llength $argv] < 1} {
    puts stderr "usage: tclsh nestbed.tcl FILE ?-p NAME VALUE ...?"
    exit 2
}
::sb::main $argv
