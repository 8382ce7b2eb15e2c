//! The crate's one error type: a mistake the user can fix (exit code 2) or a failure of the
//! system underneath (exit code 1). Both print as one sentence.

use std::fmt;
use std::io;

/// An error that ends an analysis.
#[derive(Debug)]
pub enum AnalyzeError {
    /// A file that is not a capture, or bad parameters; the message says how to fix it.
    Usage(String),
    /// An operating-system call failed; `what` names what was being done.
    Io {
        /// What was being done, e.g. "reading /tmp/x.pcap".
        what: String,
        /// The underlying error.
        source: io::Error,
    },
}

impl AnalyzeError {
    /// Process exit code for this error: 2 for usage errors, 1 otherwise.
    pub fn exit_code(&self) -> i32 {
        match self {
            AnalyzeError::Usage(_) => 2,
            AnalyzeError::Io { .. } => 1,
        }
    }

    /// Wraps an I/O error with what was being done.
    pub fn io(what: impl Into<String>, source: io::Error) -> AnalyzeError {
        AnalyzeError::Io {
            what: what.into(),
            source,
        }
    }
}

impl fmt::Display for AnalyzeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AnalyzeError::Usage(msg) => f.write_str(msg),
            AnalyzeError::Io { what, source } => write!(f, "{what} failed: {source}."),
        }
    }
}

impl std::error::Error for AnalyzeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            AnalyzeError::Usage(_) => None,
            AnalyzeError::Io { source, .. } => Some(source),
        }
    }
}
