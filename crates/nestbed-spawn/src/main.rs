//! `nestbed-spawn`: serves the controller that started it, requests on its standard input
//! (a socket), answers and notes on its standard output, until the controller closes the
//! socket.
//! `--version` prints its version (what a run's manifest records). Exit codes: 0 done, 1 the
//! controller could not be spoken to, 2 a usage error.
#![deny(unsafe_code)]

use std::process::ExitCode;

use nestbed_spawn::{os, spawner};

/// Nice steps this process runs ahead of the programs it starts (where it may: as root), so
/// a start due now is forked before the machine's other work of the same priority runs.
const AHEAD: i32 = 10;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [] => {}
        [flag] if flag == "--version" => {
            println!("nestbed-spawn {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        _ => {
            eprintln!("usage: nestbed-spawn [--version] (started by nestbed's controller)");
            return ExitCode::from(2);
        }
    }
    os::ignore_sigpipe();
    if let Err(e) = os::cloexec_above_stderr() {
        eprintln!("nestbed-spawn: marking inherited descriptors close-on-exec: {e}");
        return ExitCode::FAILURE;
    }
    // Its programs start at the nice value it was started with; it goes ahead of them.
    let nice = os::nice();
    os::go_ahead(nice, AHEAD);
    match spawner::serve(os::inherited(0), os::inherited(1), nice) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nestbed-spawn: {e}");
            ExitCode::FAILURE
        }
    }
}
