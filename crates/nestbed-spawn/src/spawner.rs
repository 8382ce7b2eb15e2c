//! The loop of nestbed-spawn: one thread, one `poll` over the request socket and, for each
//! program, the pipe it speaks on before its `exec`, its pidfd and its output pipes still
//! open. A request is forked at once (a program due later waits in its own process); its
//! answer goes out once its `exec` is known to have happened (the program has begun, or why
//! not); output is copied to its file as it comes; an ended process is reaped and noted;
//! output that ended is noted once both of a program's streams have. Answers and notes go
//! out on one stream, a program's answer before its notes. The loop ends when the
//! controller closes the request socket.

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
    exec: Option<File>, // what the child says before its exec; closes at it
    said: Vec<u8>,      // what it said: when it began, then an error number if exec failed
    pidfd: Option<OwnedFd>,
    streams: Vec<Stream>,
}

/// Serves the controller: requests on `requests`, answers and notes on `notes`, until the
/// controller closes `requests`. An error here is one of talking to the controller.
///
/// One request is taken per turn of the loop, and the loop only looks (does not wait) while
/// more are waiting, so a program's `exec` that ended meanwhile is answered before the next
/// is forked. A program handed over ahead of its time is forked at once and waits for its
/// time itself. Programs get nice value `nice` (this process may run ahead of it).
pub fn serve(mut requests: File, mut notes: File, nice: i32) -> io::Result<()> {
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
        let until = pending.contains(&b'\n').then_some(0); // (0: a request waits)
        os::poll(&mut fds, until)?;
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
                if let Some(answer) = settle(child) {
                    notes.write_all(answer.as_bytes())?;
                }
            }
            if child.exec.is_some() {
                continue; // its answer first: its exit and output wait for the next turn
            }
            if child.pidfd.is_some() && fds[pidfd_at].revents != 0 {
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
            match protocol::parse(&line).map(|start| (start.id, prepare(&start))) {
                Err(sentence) => {
                    notes.write_all(protocol::failed(None, 0, &sentence, None).as_bytes())?
                }
                Ok((id, Ok(ready))) => match ready.fork(nice) {
                    Ok(child) => children.push(child),
                    Err(e) => {
                        let errno = e.raw_os_error().unwrap_or(0);
                        let answer = protocol::failed(Some(id), errno, &e.to_string(), None);
                        notes.write_all(answer.as_bytes())?;
                    }
                },
                Ok((id, Err((e, file)))) => {
                    let errno = e.raw_os_error().unwrap_or(0);
                    let answer = protocol::failed(Some(id), errno, &e.to_string(), file.as_deref());
                    notes.write_all(answer.as_bytes())?;
                }
            }
        }
    }
}

/// Reads what a child says before its `exec`; once its pipe has closed, the answer: started,
/// with when it began (its own clock, just before its exec) and when its exec was seen to
/// succeed; or failed, the child then reaped and forgotten, no note to follow.
fn settle(child: &mut Child) -> Option<String> {
    let mut chunk = [0u8; 16];
    if let Some(Ok(n @ 1..)) = child.exec.as_mut().map(|pipe| pipe.read(&mut chunk)) {
        child.said.extend_from_slice(&chunk[..n]);
        return None; // more to come, or the end
    }
    child.exec = None;
    let said = &child.said;
    let began = said
        .get(..8)
        .map(|b| u64::from_ne_bytes(b.try_into().expect("8 bytes")));
    let errno = said
        .get(8..12)
        .map(|b| i32::from_ne_bytes(b.try_into().expect("4 bytes")));
    if let (Some(began), None) = (began, errno) {
        return Some(protocol::started(
            child.id,
            child.pid,
            began,
            os::monotonic_ns(),
        ));
    }
    os::reap_ending(child.pid);
    child.pidfd = None;
    child.streams.clear();
    Some(match errno {
        Some(errno) => {
            let error = io::Error::from_raw_os_error(errno).to_string();
            protocol::failed(Some(child.id), errno, &error, Some(&child.argv0))
        }
        None => protocol::failed(Some(child.id), 0, "its process ended before its time", None),
    })
}

/// A program ready to be forked: its output files made, its pipes open, its words as C
/// strings.
struct Ready {
    id: u64,
    at_ns: u64, // 0: at once
    argv0: String,
    argv: Vec<CString>,
    env: Vec<CString>,
    limit: u64,
    outputs: [(File, String); 2], // stdout and stderr, with their paths
    pipes: [(File, OwnedFd); 2],  // their pipes: read end here, write end the child's
    exec: (File, OwnedFd),        // closes at the child's exec (the errno if it failed)
}

/// A program's start made ready; on failure, the error and the file it concerns.
fn prepare(start: &Start) -> Result<Ready, (io::Error, Option<String>)> {
    let create = |path: &String| {
        let file = File::create(path).map_err(|e| (e, Some(path.clone())))?;
        Ok::<_, (io::Error, Option<String>)>((file, path.clone()))
    };
    let pipe = || os::pipe().map_err(|e| (e, None));
    let words = |list: &[String]| -> Vec<CString> {
        list.iter()
            .map(|w| CString::new(w.as_str()).expect("parse refuses NUL bytes"))
            .collect()
    };
    Ok(Ready {
        id: start.id,
        at_ns: start.at_ns.unwrap_or(0),
        argv0: start.argv[0].clone(),
        argv: words(&start.argv),
        env: words(&start.env),
        limit: start.limit,
        outputs: [create(&start.stdout)?, create(&start.stderr)?],
        pipes: [pipe()?, pipe()?],
        exec: pipe()?,
    })
}

impl Ready {
    /// Forks it (to wait for its time, then exec): the child.
    fn fork(self, nice: i32) -> io::Result<Child> {
        let [(out_pipe, out_end), (err_pipe, err_end)] = self.pipes;
        let (exec, exec_end) = self.exec;
        let outputs = (out_end.as_raw_fd(), err_end.as_raw_fd());
        let (exec_fd, at) = (exec_end.as_raw_fd(), self.at_ns);
        let pid = os::spawn(&self.argv, &self.env, outputs, exec_fd, nice, at)?;
        drop((out_end, err_end, exec_end)); // the child's alone now: its ends end the pipes
        let pidfd = match os::pidfd_open(pid) {
            Ok(fd) => fd,
            Err(e) => {
                os::kill_and_reap(pid); // never a program nobody watches
                return Err(e);
            }
        };
        let [(stdout, out_path), (stderr, err_path)] = self.outputs;
        let stream = |pipe, file, path| Stream {
            pipe,
            file,
            capped: Capped::new(self.limit),
            path,
            broken: false,
        };
        Ok(Child {
            id: self.id,
            pid,
            argv0: self.argv0,
            exec: Some(exec),
            said: Vec::new(),
            pidfd: Some(pidfd),
            streams: vec![
                stream(out_pipe, stdout, out_path),
                stream(err_pipe, stderr, err_path),
            ],
        })
    }
}
