//! The loop of nestbed-spawn: one thread, one `poll` over the request socket, each running
//! program's pidfd and each of its output pipes still open. A request is answered at once
//! (the program has begun, or why not); output is copied to its file as it comes; an ended
//! process is reaped and noted; output that ended is noted once both of a program's streams
//! have. The loop ends when the controller closes the request socket.

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

/// A program started: its process until reaped, its streams until they end.
struct Child {
    id: u64,
    pid: i32,
    pidfd: Option<OwnedFd>,
    streams: Vec<Stream>,
}

/// Serves the controller: requests and answers on `requests`, notes on `notes`, until the
/// controller closes `requests`. An error here is one of talking to the controller.
pub fn serve(mut requests: File, mut notes: File) -> io::Result<()> {
    let mut children: Vec<Child> = Vec::new();
    let mut pending: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; 65536];
    loop {
        let mut fds = vec![os::readable(&requests)];
        for child in &children {
            fds.extend(child.pidfd.iter().map(os::readable));
            fds.extend(child.streams.iter().map(|s| os::readable(&s.pipe)));
        }
        os::poll(&mut fds)?;
        let mut at = 1; // the children's entries follow in the order they were pushed
        for child in &mut children {
            if child.pidfd.is_some() {
                at += 1;
                if fds[at - 1].revents != 0 {
                    if let Some(code) = os::reap(child.pid)? {
                        notes.write_all(
                            protocol::exited(child.id, code, os::monotonic_ns()).as_bytes(),
                        )?;
                        child.pidfd = None;
                    }
                }
            }
            let open = child.streams.len();
            let mut ended = Vec::new();
            for (i, stream) in child.streams.iter_mut().enumerate() {
                if fds[at + i].revents != 0 && !stream.pump(&mut buf) {
                    ended.push(i);
                }
            }
            at += open;
            for i in ended.iter().rev() {
                child.streams.remove(*i).finish();
            }
            if !ended.is_empty() && child.streams.is_empty() {
                notes.write_all(protocol::closed(child.id).as_bytes())?;
            }
        }
        children.retain(|c| c.pidfd.is_some() || !c.streams.is_empty());
        if fds[0].revents != 0 {
            let n = requests.read(&mut buf)?;
            if n == 0 {
                return Ok(()); // the controller is done with us (or gone)
            }
            pending.extend_from_slice(&buf[..n]);
            while let Some(end) = pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = pending.drain(..=end).collect();
                let answer = match protocol::parse(&line) {
                    Err(sentence) => protocol::failed(None, 0, &sentence, None),
                    Ok(start) => match begin(&start) {
                        Ok((child, started_ns)) => {
                            let answer = protocol::started(start.id, child.pid, started_ns);
                            children.push(child);
                            answer
                        }
                        Err((e, file)) => {
                            let errno = e.raw_os_error().unwrap_or(0);
                            protocol::failed(Some(start.id), errno, &e.to_string(), file)
                        }
                    },
                };
                requests.write_all(answer.as_bytes())?;
            }
        }
    }
}

/// Starts one program: its output files made, its process begun; the child and the time
/// just after it began (its command exec'd). On failure, the error and the file it concerns.
fn begin(start: &Start) -> Result<(Child, u64), (io::Error, Option<&str>)> {
    let (stdout, stderr) = (create(&start.stdout)?, create(&start.stderr)?);
    let (out_pipe, out_end) = os::pipe().map_err(|e| (e, None))?;
    let (err_pipe, err_end) = os::pipe().map_err(|e| (e, None))?;
    let words = |list: &[String]| -> Vec<CString> {
        list.iter()
            .map(|w| CString::new(w.as_str()).expect("parse refuses NUL bytes"))
            .collect()
    };
    let (argv, env) = (words(&start.argv), words(&start.env));
    let pid = os::spawn(&argv, &env, out_end.as_raw_fd(), err_end.as_raw_fd())
        .map_err(|e| (e, Some(start.argv[0].as_str())))?;
    let started_ns = os::monotonic_ns();
    drop((out_end, err_end)); // the program's alone now: its end of output ends the pipes
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
    Ok((
        Child {
            id: start.id,
            pid,
            pidfd: Some(pidfd),
            streams,
        },
        started_ns,
    ))
}

/// An output file, made or emptied; on failure, the error and its path.
fn create(path: &str) -> Result<File, (io::Error, Option<&str>)> {
    File::create(path).map_err(|e| (e, Some(path)))
}
