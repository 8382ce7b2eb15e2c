//! The crate's one error type: a mistake the user can fix (exit code 2) or a failure of the
//! system underneath (exit code 1). Both print as one sentence.

use std::fmt;
use std::io;

/// An error that ends a probe run.
#[derive(Debug)]
pub enum ProbeError {
    /// Bad parameters or an address that cannot be used; the message says how to fix it.
    Usage(String),
    /// An operating-system call failed; `what` names what was being done.
    Io {
        /// What was being done, e.g. "writing the log /tmp/x.csv".
        what: String,
        /// The underlying error.
        source: io::Error,
    },
}

impl ProbeError {
    /// Process exit code for this error: 2 for usage errors, 1 otherwise.
    pub fn exit_code(&self) -> i32 {
        match self {
            ProbeError::Usage(_) => 2,
            ProbeError::Io { .. } => 1,
        }
    }

    /// A failure of a packet ring (`--ring`): not permitted or no such interface is the
    /// user's to fix, anything else the system's.
    pub fn ring(what: &str, source: io::Error) -> ProbeError {
        match source.raw_os_error() {
            Some(libc::EPERM | libc::EACCES) => ProbeError::Usage(format!(
                "{what} is not permitted: --ring needs root (CAP_NET_RAW)."
            )),
            Some(libc::ENODEV) => {
                ProbeError::Usage(format!("{what}: no such interface in this namespace."))
            }
            _ => ProbeError::io(what, source),
        }
    }

    /// Wraps an I/O error with what was being done.
    pub fn io(what: impl Into<String>, source: io::Error) -> ProbeError {
        ProbeError::Io {
            what: what.into(),
            source,
        }
    }
}

impl fmt::Display for ProbeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProbeError::Usage(msg) => f.write_str(msg),
            ProbeError::Io { what, source } => write!(f, "{what} failed: {source}."),
        }
    }
}

impl std::error::Error for ProbeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ProbeError::Usage(_) => None,
            ProbeError::Io { source, .. } => Some(source),
        }
    }
}
