//! `nestbed-linkd`: see the library docs and `--help`.

#![deny(unsafe_code)]

use std::process::ExitCode;

use nestbed_linkd::cli::{parse_args, Command, USAGE};

fn main() -> ExitCode {
    match parse_args(std::env::args().skip(1)) {
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
