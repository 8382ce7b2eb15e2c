//! What the controller and nestbed-spawn say to each other: JSON, one object a line.
//!
//! On the request socket (the spawner's standard input) the controller sends [`Start`]s, as
//! many as it likes without waiting. On the answer stream (the spawner's standard output)
//! come, in the order they happened: for each start its answer once its `exec` is known to
//! have happened, [`started`] (the pid, when its process began and when its `exec` was seen
//! to succeed) or [`failed`]; later, for each program started, [`exited`] once its process has ended and
//! [`closed`] once its output has (a child started in the background can keep it open after
//! the program's own end). One stream for both keeps a program's answer before its notes.

use serde::Deserialize;
use serde_json::json;

/// A program to start.
#[derive(Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Start {
    /// The controller's number for it, repeated in every answer and note about it.
    pub id: u64,
    /// The command, looked up on the PATH of `env` if its first word has no slash.
    pub argv: Vec<String>,
    /// Its whole environment, `NAME=VALUE` each.
    pub env: Vec<String>,
    /// The file its standard output goes to (made, or emptied).
    pub stdout: String,
    /// The file its standard error goes to.
    pub stderr: String,
    /// How many bytes of each stream are kept (see [`crate::capped`]).
    pub limit: u64,
    /// When it is due (`CLOCK_MONOTONIC`, ns): handed over ahead of its time, it is forked
    /// at once and waits, and begins then, however late the controller's threads run.
    /// Absent or past: at once.
    #[serde(default)]
    pub at_ns: Option<u64>,
}

/// A request line parsed; one sentence when it is not a [`Start`] nestbed-spawn can run.
pub fn parse(line: &[u8]) -> Result<Start, String> {
    let start: Start = serde_json::from_slice(line)
        .map_err(|e| format!("a request nestbed-spawn cannot read: {e}"))?;
    if start.argv.is_empty() {
        return Err(format!("request {} has an empty argv", start.id));
    }
    let words = start.argv.iter().chain(&start.env);
    if words
        .chain([&start.stdout, &start.stderr])
        .any(|w| w.contains('\0'))
    {
        return Err(format!("request {} has a NUL byte in a word", start.id));
    }
    Ok(start)
}

/// The answer to a start that began: its pid, when it began its command (`began_ns`: the
/// process's own clock just before its `exec`; at `at_ns` if it was given, not before) and
/// when its `exec` was seen to have succeeded (`exec_ns`), `CLOCK_MONOTONIC`, ns.
pub fn started(id: u64, pid: i32, began_ns: u64, exec_ns: u64) -> String {
    json!({"id": id, "pid": pid, "began_ns": began_ns, "exec_ns": exec_ns}).to_string() + "\n"
}

/// The answer to a start that did not: the system's error number (0 for a request that
/// could not be read), its message, and the file it concerns.
pub fn failed(id: Option<u64>, errno: i32, error: &str, filename: Option<&str>) -> String {
    json!({"id": id, "errno": errno, "error": error, "filename": filename}).to_string() + "\n"
}

/// The note that a program's process has ended, with its status as Python's `returncode`
/// says it: the exit code, or minus the signal that ended it.
pub fn exited(id: u64, code: i32, ended_ns: u64) -> String {
    json!({"id": id, "exit": code, "ended_ns": ended_ns}).to_string() + "\n"
}

/// The note that a program's output streams have both ended, and their files are complete.
pub fn closed(id: u64) -> String {
    json!({"id": id, "closed": true}).to_string() + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"{"id": 3, "argv": ["sh", "-c", "true"], "env": ["A=b"],
        "stdout": "/r/p.stdout", "stderr": "/r/p.stderr", "limit": 64}"#;

    #[test]
    fn a_start_is_parsed_into_its_fields() {
        let start = parse(GOOD.as_bytes()).unwrap();
        assert_eq!(start.id, 3);
        assert_eq!(start.argv, ["sh", "-c", "true"]);
        assert_eq!(start.env, ["A=b"]);
        assert_eq!((start.stdout.as_str(), start.limit), ("/r/p.stdout", 64));
        assert_eq!(start.at_ns, None);
        let timed = GOOD.replace("\"limit\"", "\"at_ns\": 5, \"limit\"");
        assert_eq!(parse(timed.as_bytes()).unwrap().at_ns, Some(5));
    }

    #[test]
    fn unknown_fields_missing_fields_an_empty_argv_and_nul_bytes_are_refused() {
        let unknown = GOOD.replace("\"limit\"", "\"cwd\": \"/\", \"limit\"");
        assert!(parse(unknown.as_bytes())
            .unwrap_err()
            .contains("unknown field"));
        let missing = GOOD.replace(", \"limit\": 64", "");
        assert!(parse(missing.as_bytes()).unwrap_err().contains("limit"));
        let empty = GOOD.replace(r#"["sh", "-c", "true"]"#, "[]");
        assert_eq!(
            parse(empty.as_bytes()).unwrap_err(),
            "request 3 has an empty argv"
        );
        let nul = GOOD.replace("A=b", "A=\\u0000");
        assert!(parse(nul.as_bytes()).unwrap_err().contains("NUL"));
    }

    #[test]
    fn answers_and_notes_are_one_json_line_each() {
        let lines = [
            started(1, 42, 7, 9),
            failed(Some(1), 2, "No such file", Some("sh")),
            exited(1, -9, 8),
            closed(1),
        ];
        for line in &lines {
            assert!(line.ends_with('\n') && line.matches('\n').count() == 1);
            serde_json::from_str::<serde_json::Value>(line).unwrap();
        }
        let exit: serde_json::Value = serde_json::from_str(&lines[2]).unwrap();
        assert_eq!(exit, json!({"id": 1, "exit": -9, "ended_ns": 8}));
    }
}
