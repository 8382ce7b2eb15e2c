//! The loop of nestbed-spawn: one thread, one `poll` over the request socket, each running
//! program's pidfd and each of its output pipes still open. A request is answered at once
//! (the program has begun, or why not); output is copied to its file as it comes; an ended
//! process is reaped and noted; output that ended is noted once both of a program's streams
//! have. Answers and notes go out on one stream, in the order they happened. The loop ends
//! when the controller closes the request socket.

use std::ffi::CString;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};

use crate::capped::Capped;
use crate::os;
use crate::protocol::{self, Start};

/// One output stream of a program: its pipe, its file, and how much it keeps.
struct Stream {
    pipe: File,
    file: File,
    capped: Capped,
    path: String,
    broken: bool, // its file refused a write: the rest is read and let go
}

impl Stream {
    /// Copies what the pipe has to the file; false once the pipe has ended.
    fn pump(&mut self, buf: &mut [u8]) -> bool {
        let n = match self.pipe.read(buf) {
            Ok(0) => return false,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return true,
            Err(e) => {
                eprintln!("nestbed-spawn: reading the output for {}: {e}", self.path);
                return false;
            }
        };
        let keep = self.capped.take(n);
        if keep > 0 && !self.broken {
            if let Err(e) = self.file.write_all(&buf[..keep]) {
                eprintln!("nestbed-spawn: writing {}: {e}", self.path);
                self.broken = true;
            }
        }
        true
    }

    /// Ends the file with the line that says what was dropped, if anything was.
    fn finish(mut self) {
        if let (Some(note), false) = (self.capped.note(), self.broken) {
            if let Err(e) = self.file.write_all(note.as_bytes()) {
                eprintln!("nestbed-spawn: writing {}: {e}", self.path);
            }
        }
    }
}

/// A program started: its `exec` until it is known to have happened, its process until
/// reaped, its streams until they end.
struct Child {
    id: u64,
    pid: i32,
    argv0: String,
    began_ns: u64,      // just after its fork
    exec: Option<File>, // ends at its exec; the error number if that failed
    pidfd: Option<OwnedFd>,
    streams: Vec<Stream>,
}

/// What became of a program's `exec`, once known.
enum Exec {
    Done,
    Failed(i32),
}

/// Serves the controller: requests on `requests`, answers and notes on `notes`, until the
/// controller closes `requests`. An error here is one of talking to the controller.
///
/// One request is taken per turn of the loop, and the loop only looks (does not wait) while
/// more are waiting: a program's `exec` that ended meanwhile is answered before the next
/// program is forked, so its time is not the time of the forks after it.
pub fn serve(mut requests: File, mut notes: File) -> io::Result<()> {
    let mut children: Vec<Child> = Vec::new();
    let mut pending: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; 65536];
    loop {
        let mut fds = vec![os::readable(&requests)];
        for child in &children {
            fds.extend(child.exec.iter().map(os::readable));
            fds.extend(child.pidfd.iter().map(os::readable));
            fds.extend(child.streams.iter().map(|s| os::readable(&s.pipe)));
        }
        os::poll(&mut fds, !pending.contains(&b'\n'))?;
        let mut at = 1; // the children's entries follow in the order they were pushed
        for child in &mut children {
            // (what this child had in `fds`, before anything below changes it)
            let polled = (
                child.exec.is_some(),
                child.pidfd.is_some(),
                child.streams.len(),
            );
            let (exec_at, pidfd_at) = (at, at + usize::from(polled.0));
            let streams_at = pidfd_at + usize::from(polled.1);
            at = streams_at + polled.2;
            if polled.0 && fds[exec_at].revents != 0 {
                notes.write_all(settle(child).as_bytes())?;
            }
            if child.pidfd.is_some() && child.exec.is_none() && fds[pidfd_at].revents != 0 {
                if let Some(code) = os::reap(child.pid)? {
                    let ended = protocol::exited(child.id, code, os::monotonic_ns());
                    notes.write_all(ended.as_bytes())?;
                    child.pidfd = None;
                }
            }
            if child.streams.len() != polled.2 {
                continue; // its exec failed: nothing more of it
            }
            let mut ended = Vec::new();
            for (i, stream) in child.streams.iter_mut().enumerate() {
                if fds[streams_at + i].revents != 0 && !stream.pump(&mut buf) {
                    ended.push(i);
                }
            }
            for i in ended.iter().rev() {
                child.streams.remove(*i).finish();
            }
            if !ended.is_empty() && child.streams.is_empty() {
                notes.write_all(protocol::closed(child.id).as_bytes())?;
            }
        }
        children.retain(|c| c.exec.is_some() || c.pidfd.is_some() || !c.streams.is_empty());
        if fds[0].revents != 0 {
            let n = requests.read(&mut buf)?;
            if n == 0 {
                return Ok(()); // the controller is done with us (or gone)
            }
            pending.extend_from_slice(&buf[..n]);
        }
        if let Some(end) = pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            match protocol::parse(&line) {
                Err(sentence) => {
                    notes.write_all(protocol::failed(None, 0, &sentence, None).as_bytes())?
                }
                Ok(start) => match begin(&start) {
                    Ok(child) => children.push(child),
                    Err((e, file)) => {
                        let errno = e.raw_os_error().unwrap_or(0);
                        let answer = protocol::failed(Some(start.id), errno, &e.to_string(), file);
                        notes.write_all(answer.as_bytes())?;
                    }
                },
            }
        }
    }
}

/// The answer to a program whose `exec` has just ended: started, with when it began and when
/// its exec was seen to succeed (a moment after it did, never before); or failed, the child then reaped and
/// forgotten, no note to follow.
fn settle(child: &mut Child) -> String {
    let mut errno = [0u8; 4];
    let exec = match child.exec.take().map(|mut pipe| pipe.read(&mut errno)) {
        Some(Ok(4)) => Exec::Failed(i32::from_ne_bytes(errno)),
        _ => Exec::Done, // closed by the exec (a short read cannot happen: 4 bytes, one write)
    };
    match exec {
        Exec::Done => protocol::started(child.id, child.pid, child.began_ns, os::monotonic_ns()),
        Exec::Failed(errno) => {
            os::reap_ending(child.pid);
            child.pidfd = None;
            child.streams.clear();
            let error = io::Error::from_raw_os_error(errno).to_string();
            protocol::failed(Some(child.id), errno, &error, Some(&child.argv0))
        }
    }
}

/// Starts one program: its output files made, its process forked (its `exec` under way).
/// On failure, the error and the file it concerns.
fn begin(start: &Start) -> Result<Child, (io::Error, Option<&str>)> {
    let (stdout, stderr) = (create(&start.stdout)?, create(&start.stderr)?);
    let (out_pipe, out_end) = os::pipe().map_err(|e| (e, None))?;
    let (err_pipe, err_end) = os::pipe().map_err(|e| (e, None))?;
    let (exec, exec_end) = os::pipe().map_err(|e| (e, None))?;
    let words = |list: &[String]| -> Vec<CString> {
        list.iter()
            .map(|w| CString::new(w.as_str()).expect("parse refuses NUL bytes"))
            .collect()
    };
    let (argv, env) = (words(&start.argv), words(&start.env));
    let ends = (
        out_end.as_raw_fd(),
        err_end.as_raw_fd(),
        exec_end.as_raw_fd(),
    );
    let pid = os::spawn(&argv, &env, ends.0, ends.1, ends.2).map_err(|e| (e, None))?;
    let began_ns = os::monotonic_ns();
    drop((out_end, err_end, exec_end)); // the child's alone now: its ends end the pipes
    let pidfd = match os::pidfd_open(pid) {
        Ok(fd) => fd,
        Err(e) => {
            os::kill_and_reap(pid); // never a program nobody watches
            return Err((e, None));
        }
    };
    let stream = |pipe, file, path: &str| Stream {
        pipe,
        file,
        capped: Capped::new(start.limit),
        path: path.to_owned(),
        broken: false,
    };
    let streams = vec![
        stream(out_pipe, stdout, &start.stdout),
        stream(err_pipe, stderr, &start.stderr),
    ];
    Ok(Child {
        id: start.id,
        pid,
        argv0: start.argv[0].clone(),
        began_ns,
        exec: Some(exec),
        pidfd: Some(pidfd),
        streams,
    })
}

/// An output file, made or emptied; on failure, the error and its path.
fn create(path: &str) -> Result<File, (io::Error, Option<&str>)> {
    File::create(path).map_err(|e| (e, Some(path)))
}
