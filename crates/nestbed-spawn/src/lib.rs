//! nestbed-spawn: starts an experiment's programs for nestbed's controller, outside the
//! controller's process.
//!
//! The controller is a threaded Python process: a program started there forks it, waits for
//! the child's `exec`, and starts threads to copy the program's output, all under its global
//! interpreter lock, so programs due at the same instant start one after another and delay
//! each other. This small process, started once per run, does that work instead: the
//! controller hands it a program's argv, environment, output files and the time it is due
//! (ahead of that time) over a socket. It forks the program's process at once; the process
//! waits for its time itself, wakes ahead of the machine's other work (a real-time priority
//! until it has read the clock), and execs. The controller gets back, on a stream of answers
//! and notes, its pid and when it began (the process's clock just before its `exec`), and
//! later its exit status and the end of its output.
//!
//! What a start promises (as the controller's own `Popen` did): a session and process group
//! of its own (`setsid`), standard input from `/dev/null`, standard output and error each into
//! its file, at most `limit` bytes each (the rest counted and said at the file's end), default
//! dispositions of SIGPIPE and SIGXFSZ, the nice value and timer slack nestbed-spawn was
//! started with (it runs ahead of its programs), no real-time policy, and no descriptor of
//! this process. Entering the node
//! (its cgroup, namespace and identity) is the argv's own business (`backend/entry.py`).
//!
//! Modules, from pure to platform:
//! - [`protocol`]: requests parsed (unknown fields refused), replies and notes written.
//! - [`capped`]: how much of a stream's output is kept.
//! - [`spawner`]: the loop: requests, starts, output, exits.
//! - [`os`]: `fork` and `execvpe`, pipes, pidfds, `waitpid`, `poll` and the clock through `libc`;
//!   the only module allowed `unsafe`.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod capped;
pub mod os;
pub mod protocol;
pub mod spawner;
