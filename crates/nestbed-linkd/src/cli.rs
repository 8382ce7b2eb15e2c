//! Command-line options of `nestbed-linkd` (pure parsing, no I/O).

use std::path::PathBuf;

use crate::os::Io;

/// Usage text.
pub const USAGE: &str =
    "usage: nestbed-linkd --socket PATH [--threads N] [--spin-us N] [--io rings|copy] [--pidfile PATH]

  --socket PATH   control socket (Unix stream, JSON lines, created 0600)
  --threads N     worker threads; links are spread over them (default 1, at most 64)
  --spin-us N     busy-wait the last N microseconds before a frame is due
                  instead of sleeping (default 0, at most 10000)
  --io MODE       how frames are read and written: `rings` (default: memory-mapped
                  PACKET_MMAP rings while offloads are off) or `copy` (recvmmsg and
                  sendmmsg always); the environment variable NESTBED_LINKD_IO sets
                  the default
  --pidfile PATH  write the process id here
";

/// Parsed options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// Control socket path.
    pub socket: PathBuf,
    /// Worker threads.
    pub threads: usize,
    /// Busy-wait window in microseconds.
    pub spin_us: u64,
    /// How packet sockets read and write frames.
    pub io: Io,
    /// Pid file.
    pub pidfile: Option<PathBuf>,
}

/// What the command line asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Run the daemon.
    Run(Options),
    /// Print usage.
    Help,
    /// Print the version.
    Version,
}

fn number(flag: &str, value: Option<String>, max: u64) -> Result<u64, String> {
    let v = value.ok_or_else(|| format!("{flag}: needs a value"))?;
    let n: u64 = v
        .parse()
        .map_err(|_| format!("{flag}: expected a whole number, got {v:?}"))?;
    if n > max {
        return Err(format!("{flag}: at most {max}, got {n}"));
    }
    Ok(n)
}

/// Parses the arguments after the program name.
pub fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Command, String> {
    let mut args = args.into_iter();
    let mut socket = None;
    let mut threads = 1;
    let mut spin_us = 0;
    let mut pidfile = None;
    let mut io = Io::Rings;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--socket" => {
                socket = Some(PathBuf::from(args.next().ok_or("--socket: needs a path")?))
            }
            "--threads" => {
                threads = number("--threads", args.next(), 64)? as usize;
                if threads == 0 {
                    return Err("--threads: at least 1".into());
                }
            }
            "--spin-us" => spin_us = number("--spin-us", args.next(), 10_000)?,
            "--io" => {
                io = match args.next().as_deref() {
                    Some("rings") => Io::Rings,
                    Some("copy") => Io::Copy,
                    other => {
                        return Err(format!("--io: expected `rings` or `copy`, got {other:?}"))
                    }
                }
            }
            "--pidfile" => {
                pidfile = Some(PathBuf::from(args.next().ok_or("--pidfile: needs a path")?))
            }
            "-h" | "--help" => return Ok(Command::Help),
            "-V" | "--version" => return Ok(Command::Version),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(Command::Run(Options {
        socket: socket.ok_or("--socket: required")?,
        threads,
        spin_us,
        io,
        pidfile,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Command, String> {
        parse_args(s.split_whitespace().map(String::from))
    }

    #[test]
    fn options() {
        assert_eq!(
            parse("--socket /run/l.sock --threads 2 --spin-us 50 --pidfile /run/l.pid").unwrap(),
            Command::Run(Options {
                socket: "/run/l.sock".into(),
                threads: 2,
                spin_us: 50,
                io: Io::Rings,
                pidfile: Some("/run/l.pid".into()),
            })
        );
        assert!(matches!(
            parse("--socket s").unwrap(),
            Command::Run(Options {
                threads: 1,
                spin_us: 0,
                ..
            })
        ));
        assert_eq!(parse("--help").unwrap(), Command::Help);
        assert!(parse("").unwrap_err().contains("--socket"));
        assert!(parse("--socket s --threads 0")
            .unwrap_err()
            .contains("--threads"));
        assert!(parse("--socket s --threads x")
            .unwrap_err()
            .contains("--threads"));
        assert!(parse("--socket s --spin-us 99999")
            .unwrap_err()
            .contains("--spin-us"));
        assert!(parse("--socket s --bogus").unwrap_err().contains("--bogus"));
        assert!(matches!(
            parse("--socket s --io rings --io copy").unwrap(),
            Command::Run(Options { io: Io::Copy, .. })
        ));
        assert!(parse("--socket s --io mmap").unwrap_err().contains("--io"));
    }
}
