//! `nestbed-linkd`: see the library docs and `--help`.

#![deny(unsafe_code)]

use std::process::ExitCode;

use nestbed_linkd::cli::{parse_args, Command, USAGE};

fn main() -> ExitCode {
    // The environment's choice goes first, so that an explicit --io wins.
    let io_default = std::env::var("NESTBED_LINKD_IO")
        .ok()
        .map(|mode| ["--io".to_string(), mode]);
    let args = io_default
        .into_iter()
        .flatten()
        .chain(std::env::args().skip(1));
    match parse_args(args) {
        Ok(Command::Help) => {
            print!("{USAGE}");
            ExitCode::SUCCESS
        }
        Ok(Command::Version) => {
            println!("nestbed-linkd {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        Ok(Command::Run(opts)) => match nestbed_linkd::daemon::serve(&opts) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("nestbed-linkd: {e}");
                ExitCode::FAILURE
            }
        },
        Err(e) => {
            eprintln!("nestbed-linkd: {e}\n{USAGE}");
            ExitCode::from(2)
        }
    }
}
