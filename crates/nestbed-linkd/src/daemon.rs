//! The daemon: the control socket, the registry and the workers.
//!
//! The control thread accepts connections on the Unix socket (created with
//! mode 0600); each connection gets a thread that reads JSON lines and
//! writes one reply line per request. Requests are parsed
//! ([`crate::protocol`]) and planned ([`crate::dispatch`]) under one lock,
//! then carried out here: opening packet sockets, setting interfaces up or
//! down, opening trace files, and messaging the worker that owns the link.
//! A failed action changes nothing and gets an error reply; the daemon
//! keeps running. A new link's sockets are started (rings set up, bound)
//! off the lock ([`crate::starter`]): `add_link` answers when they are, or
//! at once with `"wait": false`, and then `ready` waits for all of them; a
//! link whose ports failed to start then stays, carrying no frames, and
//! `ready` says which.
//!
//! A timed batch (`at`) is checked and planned under the lock, handed to
//! its link's worker, which applies it at its time, and answered when it
//! was: its connection's thread waits for that without the lock, so other
//! connections' requests go on meanwhile (one connection's requests are
//! answered in order).
//!
//! On `shutdown`, SIGTERM or SIGINT, interfaces set down by `down admin`
//! are set up again, traces are flushed, timed batches not yet applied are
//! answered so, and the socket and pid file are removed.

use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use nestbed_pipe::Instant;
use serde_json::{json, Map, Value};

use crate::cli::Options;
use crate::dispatch::{Action, LinkState, Registry};
use crate::lateness::Histogram;
use crate::link::Link;
use crate::os::{self, Io, Unstarted};
use crate::protocol::{error_reply, ok_reply, parse_request, MAX_LINE};
use crate::starter;
use crate::trace::Trace;
use crate::watch::{self, OffloadWatch};
use crate::worker::{Applied, Change, Command, Reply, Timed, WorkerHandle};

/// The daemon's state behind the control socket.
pub struct Daemon {
    registry: Registry,
    workers: Vec<WorkerHandle>,
    /// How packet sockets read and write frames.
    io: Io,
    /// The id of the last link handed to a worker.
    last_id: u64,
    /// Which links have an interface with offloads on, for their workers.
    offloads: OffloadWatch,
    /// Links added with `"wait": false` whose ports may still be starting
    /// ([`crate::starter`]), and where their outcome will come.
    starting: Vec<(String, Receiver<Result<(), String>>)>,
    /// Timed batches handed to workers whose replies are not yet written.
    unanswered: Arc<Unanswered>,
}

/// How many timed batches' replies are still to be written: shutting down
/// waits (a little) for them, so that each connection hears why its batch
/// was not applied before the process ends.
#[derive(Default)]
pub struct Unanswered {
    count: Mutex<usize>,
    zero: Condvar,
}

impl Unanswered {
    fn count(&self) -> usize {
        *self.count.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until every reply was written, or `limit` has passed.
    fn wait(&self, limit: Duration) {
        let count = self.count.lock().unwrap_or_else(|p| p.into_inner());
        let _ = self.zero.wait_timeout_while(count, limit, |n| *n > 0);
    }
}

/// One timed batch's reply still to be written; written (or given up) when
/// dropped.
pub struct Answering(Arc<Unanswered>);

impl Answering {
    fn new(unanswered: &Arc<Unanswered>) -> Answering {
        *unanswered.count.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        Answering(Arc::clone(unanswered))
    }
}

impl Drop for Answering {
    fn drop(&mut self) {
        let mut n = self.0.count.lock().unwrap_or_else(|p| p.into_inner());
        *n -= 1;
        self.0.zero.notify_all();
    }
}

/// What became of a request line.
pub enum Handled {
    /// The reply line, and whether the daemon must shut down.
    Now(String, bool),
    /// A timed batch handed to its worker: its reply comes when the worker
    /// applied it ([`Waiting::wait`], then [`Daemon::applied`]).
    Later(Box<Waiting>),
}

/// A timed batch its worker has, and where its answer will come.
pub struct Waiting {
    action: Action,
    answer: Receiver<Result<Applied, String>>,
    /// When it was handed to its worker (CLOCK_MONOTONIC ns): after its
    /// time, it was handed over late.
    handed_ns: u64,
    /// Kept until its reply is written.
    pub answering: Answering,
}

impl Waiting {
    /// Waits (without the daemon's lock) until the worker applied the
    /// batch, or said why it did not.
    pub fn wait(&self) -> Result<Applied, String> {
        self.answer
            .recv()
            .unwrap_or_else(|_| Err("its worker thread ended before its time".into()))
    }
}

fn ask<T>(worker: &WorkerHandle, make: impl FnOnce(Reply<T>) -> Command) -> Result<T, String> {
    let (tx, rx) = channel();
    worker.send(make(tx))?;
    rx.recv_timeout(Duration::from_secs(10))
        .map_err(|_| "worker thread did not answer".to_string())?
}

impl Daemon {
    /// Starts `threads` workers.
    pub fn start(threads: usize, spin_us: u64, io: Io) -> io::Result<Daemon> {
        let workers = (0..threads.max(1))
            .map(|i| WorkerHandle::spawn(i, spin_us))
            .collect::<io::Result<Vec<_>>>()?;
        Ok(Daemon {
            registry: Registry::new(workers.len()),
            workers,
            io,
            last_id: 0,
            offloads: OffloadWatch::start(watch::PERIOD, watch::SWEEP)?,
            starting: Vec::new(),
            unanswered: Arc::default(),
        })
    }

    /// Handles one request line: the reply line and whether the daemon
    /// must shut down, or a timed batch to wait for.
    pub fn handle_line(&mut self, line: &str) -> Handled {
        let action = match parse_request(line).and_then(|r| self.registry.plan(r)) {
            Ok(a) => a,
            Err(e) => return Handled::Now(error_reply(&e), false),
        };
        if let Action::At { .. } = action {
            return match self.hand_over(&action) {
                Ok(answer) => Handled::Later(Box::new(Waiting {
                    action,
                    answer,
                    handed_ns: os::monotonic_ns(),
                    answering: Answering::new(&self.unanswered),
                })),
                Err(e) => Handled::Now(error_reply(&e), false),
            };
        }
        let shutdown = action == Action::Shutdown;
        match self.execute(&action) {
            Ok((fields, number)) => {
                self.registry.commit(&action, number);
                Handled::Now(ok_reply(fields), shutdown)
            }
            Err(e) => Handled::Now(error_reply(&e), false),
        }
    }

    /// Gives a timed batch to its link's worker.
    fn hand_over(&self, at: &Action) -> Result<Receiver<Result<Applied, String>>, String> {
        let Action::At {
            thread,
            link,
            at_ns,
            actions,
            ..
        } = at
        else {
            return Err("not a timed batch".into());
        };
        let changes = actions
            .iter()
            .filter_map(|a| match a {
                Action::Set {
                    port,
                    direction,
                    params,
                    ..
                } => Some(Change::Set(*port, *direction, Box::new(params.clone()))),
                Action::SetState { state, .. } => Some(Change::State(*state)),
                _ => None,
            })
            .collect();
        let (reply, answer) = channel();
        self.workers[*thread].send(Command::At(Box::new(Timed {
            at_ns: *at_ns,
            link: link.clone(),
            changes,
            reply,
        })))?;
        Ok(answer)
    }

    /// The reply to a timed batch once its worker answered: when it was
    /// applied (recorded in the registry) and each request's reply fields.
    pub fn applied(&mut self, waiting: &Waiting, outcome: Result<Applied, String>) -> String {
        let applied = match outcome {
            Ok(a) => a,
            Err(e) => return error_reply(&e),
        };
        self.registry.commit_applied(&waiting.action, applied.first);
        let Action::At { at_ns, actions, .. } = &waiting.action else {
            return error_reply("not a timed batch");
        };
        let mut reply = Map::new();
        reply.insert("at_ns".into(), (*at_ns).into());
        reply.insert("handed_ns".into(), waiting.handed_ns.into());
        reply.insert("applied_ns".into(), applied.applied_ns.into());
        let replies: Vec<Value> = actions
            .iter()
            .map(|a| Value::Object(a.reply_fields()))
            .collect();
        reply.insert("replies".into(), replies.into());
        ok_reply(reply)
    }

    /// Carries out an action: its reply's fields, and the worker's number
    /// of the change it made (0 if none).
    fn execute(&mut self, action: &Action) -> Result<(Map<String, Value>, u64), String> {
        let mut reply = action.reply_fields();
        let mut number = 0;
        match action {
            Action::AddLink { thread, spec } => {
                let link = Link::new(spec)?;
                // One port with offloads on: the link's super-frames must be
                // sent with their metadata on every port.
                let ifnames = spec.ports.iter().map(|p| p.ifname.clone()).collect();
                let offloads = self.offloads.watch(ifnames);
                let vnet = offloads.load(Ordering::Relaxed);
                let mut sockets = Vec::new();
                for (i, p) in spec.ports.iter().enumerate() {
                    let s = Unstarted::open(&p.ifname, self.io, vnet).map_err(|e| {
                        format!("field `ports[{i}].ifname`: cannot open {:?}: {e}", p.ifname)
                    })?;
                    sockets.push(s);
                }
                let worker = &self.workers[*thread];
                self.last_id += 1;
                let id = self.last_id;
                ask(worker, |r| {
                    Command::AddLink(Box::new(link), id, offloads, r)
                })?;
                let started = starter::start(id, sockets, worker.mailbox())
                    .map_err(|e| format!("cannot start a thread: {e}"));
                let outcome = match started {
                    Ok(done) if !spec.wait => {
                        self.starting.push((spec.link.clone(), done));
                        Ok(())
                    }
                    Ok(done) => done
                        .recv()
                        .unwrap_or_else(|_| Err("its ports' thread ended unheard".into())),
                    Err(e) => Err(e),
                };
                if let Err(e) = outcome {
                    // Nothing changed: the worker forgets the link.
                    let _ = ask(worker, |r| Command::RemoveLink(spec.link.clone(), r));
                    return Err(e);
                }
                reply.insert("thread".into(), (*thread).into());
                let seeds: Vec<Value> = spec
                    .ports
                    .iter()
                    .enumerate()
                    .map(|(i, p)| {
                        json!({
                            "port": p.port,
                            "egress": crate::seed::pipe_seed(spec.seed, i, crate::seed::Direction::Egress),
                            "ingress": crate::seed::pipe_seed(spec.seed, i, crate::seed::Direction::Ingress),
                        })
                    })
                    .collect();
                reply.insert("seeds".into(), seeds.into());
            }
            Action::RemoveLink {
                thread,
                link,
                restore_up,
            } => {
                ask(&self.workers[*thread], |r| {
                    Command::RemoveLink(link.clone(), r)
                })?;
                set_admin(restore_up, true)?;
            }
            Action::Set {
                thread,
                link,
                port,
                direction,
                params,
            } => {
                number = ask(&self.workers[*thread], |r| {
                    Command::Set(link.clone(), *port, *direction, Box::new(params.clone()), r)
                })?;
            }
            Action::SetState {
                thread,
                link,
                state,
                admin,
                ifnames,
            } => {
                // Blackhole before the interfaces go up, admin-down after
                // frames stop being forwarded: no window of unwanted traffic.
                let set_state = || {
                    ask(&self.workers[*thread], |r| {
                        Command::SetState(link.clone(), *state, r)
                    })
                };
                number = match *admin {
                    Some(true) => {
                        let n = set_state()?;
                        set_admin(ifnames, true)?;
                        n
                    }
                    Some(false) => {
                        set_admin(ifnames, false)?;
                        set_state()?
                    }
                    None => set_state()?,
                };
            }
            Action::Counters { links } => {
                let mut out = Map::new();
                let mut threads = Vec::new();
                for (i, w) in self.workers.iter().enumerate() {
                    let names: Vec<String> = links
                        .iter()
                        .filter(|(t, _)| *t == i)
                        .map(|(_, n)| n.clone())
                        .collect();
                    let (got, hist): (Vec<(String, Value)>, Histogram) =
                        ask(w, |r| Command::Counters(names, r))?;
                    out.extend(got);
                    threads.push(json!({"thread": i, "lateness": hist.report()}));
                }
                reply.insert("links".into(), Value::Object(out));
                reply.insert("threads".into(), threads.into());
                reply.insert("now_ns".into(), os::monotonic_ns().into());
            }
            Action::TraceStart { thread, link, path } => {
                let file = File::create(path)
                    .map_err(|e| format!("field `path`: cannot create {path:?}: {e}"))?;
                let t0 = os::monotonic_ns();
                let trace = Trace::new(Box::new(file), Instant::from_nanos(t0), path.clone());
                ask(&self.workers[*thread], |r| {
                    Command::TraceStart(link.clone(), Box::new(trace), r)
                })?;
                reply.insert("t0_monotonic_ns".into(), t0.into());
            }
            Action::TraceStop { thread, link } => {
                let lines = ask(&self.workers[*thread], |r| {
                    Command::TraceStop(link.clone(), r)
                })?;
                reply.insert("lines".into(), lines.into());
            }
            Action::Status => {
                reply = self.registry.status();
                reply.insert("timed_waiting".into(), self.unanswered.count().into());
            }
            Action::Ready => {
                let waited = self.starting.len();
                let failed: Vec<String> = self
                    .starting
                    .drain(..)
                    .filter_map(|(link, done)| {
                        let outcome = done
                            .recv()
                            .unwrap_or_else(|_| Err("its ports' thread ended unheard".into()));
                        outcome.err().map(|e| format!("link {link:?}: {e}"))
                    })
                    .collect();
                if !failed.is_empty() {
                    return Err(format!(
                        "ready: these links carry no frames, their ports did not start \
                         (remove them and add them again): {}",
                        failed.join("; ")
                    ));
                }
                reply.insert("waited_for".into(), waited.into());
            }
            Action::Shutdown => {}
            Action::At { .. } => return Err("a timed batch is handed over, not executed".into()),
        }
        Ok((reply, number))
    }

    /// Sets admin-down interfaces up again and stops the workers.
    pub fn stop(&mut self) {
        for entry in self.registry.links().values() {
            if entry.state == LinkState::AdminDown {
                for p in &entry.ports {
                    if let Err(e) = os::set_link_up(&p.ifname, true) {
                        eprintln!("nestbed-linkd: cannot set {} up: {e}", p.ifname);
                    }
                }
            }
        }
        for w in &mut self.workers {
            w.stop();
        }
    }
}

fn set_admin(ifnames: &[String], up: bool) -> Result<(), String> {
    let mut done: Vec<&String> = Vec::new();
    for name in ifnames {
        if let Err(e) = os::set_link_up(name, up) {
            // Roll back the ones already changed.
            for d in done {
                let _ = os::set_link_up(d, !up);
            }
            let what = if up { "up" } else { "down" };
            return Err(format!("cannot set interface {name:?} {what}: {e}"));
        }
        done.push(name);
    }
    Ok(())
}

/// Binds the control socket with mode 0600, refusing to replace a socket a
/// live daemon is listening on.
fn bind_socket(path: &Path) -> io::Result<UnixListener> {
    if path.exists() {
        if UnixStream::connect(path).is_ok() {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("{}: another daemon is listening", path.display()),
            ));
        }
        fs::remove_file(path)?;
    }
    let old = os::umask(0o177);
    let listener = UnixListener::bind(path);
    os::umask(old);
    let listener = listener?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

fn serve_connection(stream: UnixStream, daemon: Arc<Mutex<Daemon>>, stop: Arc<AtomicBool>) {
    let Ok(write_half) = stream.try_clone() else {
        return;
    };
    let mut writer = io::BufWriter::new(write_half);
    let mut reader = BufReader::new(stream);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let n = match reader
            .by_ref()
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut buf)
        {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let too_long = n > MAX_LINE && buf.last() != Some(&b'\n');
        let (reply, shutdown, answering) = if too_long {
            (
                error_reply(&format!("request: line longer than {MAX_LINE} bytes")),
                false,
                None,
            )
        } else {
            match std::str::from_utf8(&buf) {
                Ok(line) if line.trim().is_empty() => continue,
                Ok(line) => handle(&daemon, line.trim_end()),
                Err(_) => (error_reply("request: not valid UTF-8"), false, None),
            }
        };
        if writer
            .write_all(reply.as_bytes())
            .and_then(|_| writer.write_all(b"\n"))
            .and_then(|_| writer.flush())
            .is_err()
        {
            return;
        }
        drop(answering);
        if shutdown {
            stop.store(true, Ordering::SeqCst);
            return;
        }
        if too_long {
            return;
        }
    }
}

/// One request line's reply, whether the daemon must shut down, and (a
/// timed batch's, once its worker applied it, waited for without the lock)
/// what to drop once the reply is written.
fn handle(daemon: &Mutex<Daemon>, line: &str) -> (String, bool, Option<Answering>) {
    let poisoned = || (error_reply("daemon state is poisoned"), false, None);
    let handled = match daemon.lock() {
        Ok(mut d) => d.handle_line(line),
        Err(_) => return poisoned(),
    };
    match handled {
        Handled::Now(reply, shutdown) => (reply, shutdown, None),
        Handled::Later(waiting) => {
            let outcome = waiting.wait();
            let reply = match daemon.lock() {
                Ok(mut d) => d.applied(&waiting, outcome),
                Err(_) => error_reply("daemon state is poisoned"),
            };
            (reply, false, Some(waiting.answering))
        }
    }
}

/// Runs the daemon until `shutdown`, SIGTERM or SIGINT.
pub fn serve(opts: &Options) -> io::Result<()> {
    os::catch_stop_signals()?;
    let daemon = Daemon::start(opts.threads, opts.spin_us, opts.io)?;
    let unanswered = Arc::clone(&daemon.unanswered);
    let daemon = Arc::new(Mutex::new(daemon));
    let listener = bind_socket(&opts.socket)?;
    listener.set_nonblocking(true)?;
    if let Some(pid) = &opts.pidfile {
        fs::write(pid, format!("{}\n", std::process::id()))?;
    }
    let stop = Arc::new(AtomicBool::new(false));
    // Woken as soon as a client connects; the timeout only bounds how late a stop is seen.
    let epoll = os::Epoll::new()?;
    epoll.add(listener.as_raw_fd(), 0)?;
    let mut ready = Vec::new();
    while !stop.load(Ordering::SeqCst) && !os::stop_requested() {
        match listener.accept() {
            Ok((stream, _)) => {
                let _ = stream.set_nonblocking(false);
                let (d, s) = (Arc::clone(&daemon), Arc::clone(&stop));
                let _ = std::thread::Builder::new()
                    .name("linkd-control".into())
                    .spawn(move || serve_connection(stream, d, s));
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                ready.clear();
                epoll.wait(&mut ready, 100)?;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => eprintln!("nestbed-linkd: accept: {e}"),
        }
    }
    match daemon.lock() {
        Ok(mut d) => d.stop(),
        Err(p) => p.into_inner().stop(),
    }
    // The workers answered the timed batches still waiting; their
    // connections' threads write that (bounded: a client that does not read
    // cannot hold the exit up).
    unanswered.wait(Duration::from_secs(2));
    let _ = fs::remove_file(&opts.socket);
    if let Some(pid) = &opts.pidfile {
        let _ = fs::remove_file(pid);
    }
    Ok(())
}
