//! One worker thread: an epoll loop over the packet sockets of its links,
//! an eventfd for commands from the control thread, and a timerfd armed at
//! the earliest due time of its pipes (timer slack 1 ns; optionally a
//! busy-wait for the last `spin_us` microseconds). Frames are read and sent
//! in batches. Each frame's lateness (send time − due time) goes into the
//! thread's histogram.

use std::io;
use std::os::fd::AsRawFd;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

use nestbed_pipe::{Instant, PipeParams};
use serde_json::Value;

use crate::dispatch::LinkState;
use crate::lateness::Histogram;
use crate::link::{Link, Outgoing};
use crate::os::{self, Batch, Epoll, EventFd, PacketSocket, TimerFd};
use crate::seed::Direction;
use crate::trace::Trace;

const TOKEN_COMMAND: u64 = 0;
const TOKEN_TIMER: u64 = 1;
const TOKEN_BASE: u64 = 2;
/// Frames per recvmmsg call.
const BATCH: usize = 64;
/// recvmmsg calls per socket per wake-up (fairness between sockets).
const MAX_BATCHES: usize = 4;

/// A reply channel.
pub type Reply<T> = Sender<Result<T, String>>;

/// What the control thread asks a worker to do.
pub enum Command {
    /// Start serving a link on these sockets (one per port, in order).
    AddLink(Box<Link>, Vec<PacketSocket>, Reply<()>),
    /// Stop serving a link (its trace is flushed).
    RemoveLink(String, Reply<()>),
    /// Change one pipe.
    Set(String, usize, Direction, Box<PipeParams>, Reply<()>),
    /// Change the link state.
    SetState(String, LinkState, Reply<()>),
    /// Counters of these links, and the thread's lateness histogram.
    Counters(Vec<String>, Reply<(Vec<(String, Value)>, Histogram)>),
    /// Start tracing a link.
    TraceStart(String, Box<Trace>, Reply<()>),
    /// Stop tracing; the reply is the number of lines written.
    TraceStop(String, Reply<u64>),
    /// Flush traces and exit.
    Shutdown,
}

/// The control thread's handle on a worker.
pub struct WorkerHandle {
    tx: Sender<Command>,
    wake: Arc<EventFd>,
    join: Option<JoinHandle<()>>,
}

impl WorkerHandle {
    /// Starts worker number `index`.
    pub fn spawn(index: usize, spin_us: u64) -> io::Result<WorkerHandle> {
        let wake = Arc::new(EventFd::new()?);
        let (tx, rx) = channel();
        let mut worker = Worker::new(rx, Arc::clone(&wake), spin_us)?;
        let join = std::thread::Builder::new()
            .name(format!("linkd-worker-{index}"))
            .spawn(move || worker.run())?;
        Ok(WorkerHandle {
            tx,
            wake,
            join: Some(join),
        })
    }

    /// Sends a command and wakes the worker.
    pub fn send(&self, cmd: Command) -> Result<(), String> {
        self.tx
            .send(cmd)
            .map_err(|_| "worker thread is gone".to_string())?;
        self.wake.notify();
        Ok(())
    }

    /// Asks the worker to stop and waits for it.
    pub fn stop(&mut self) {
        let _ = self.send(Command::Shutdown);
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
    }
}

struct Slot {
    link: Link,
    sockets: Vec<PacketSocket>,
}

struct Worker {
    rx: Receiver<Command>,
    wake: Arc<EventFd>,
    epoll: Epoll,
    timer: TimerFd,
    armed: Option<u64>,
    spin_ns: u64,
    slots: Vec<Option<Slot>>,
    lateness: Histogram,
    batch: Batch,
    out: Vec<Outgoing>,
    running: bool,
}

fn token(slot: usize, port: usize) -> u64 {
    TOKEN_BASE + ((slot as u64) << 16 | port as u64)
}

impl Worker {
    fn new(rx: Receiver<Command>, wake: Arc<EventFd>, spin_us: u64) -> io::Result<Worker> {
        let epoll = Epoll::new()?;
        let timer = TimerFd::new()?;
        epoll.add(wake.as_raw_fd(), TOKEN_COMMAND)?;
        epoll.add(timer.as_raw_fd(), TOKEN_TIMER)?;
        Ok(Worker {
            rx,
            wake,
            epoll,
            timer,
            armed: None,
            spin_ns: spin_us * 1_000,
            slots: Vec::new(),
            lateness: Histogram::default(),
            batch: Batch::new(BATCH),
            out: Vec::new(),
            running: true,
        })
    }

    fn run(&mut self) {
        // Best effort: without it timers are up to 50 µs late.
        let _ = os::set_min_timer_slack();
        let mut tokens = Vec::with_capacity(64);
        while self.running {
            let next = self.service();
            let now = os::monotonic_ns();
            match next {
                Some(t) if t <= now + self.spin_ns => {
                    // Due within the spin window: busy-wait, then go round
                    // again without sleeping.
                    while os::monotonic_ns() < t {
                        std::hint::spin_loop();
                    }
                    if self.poll_sockets_nonblocking(&mut tokens) {
                        self.handle(&tokens);
                    }
                    continue;
                }
                _ => {}
            }
            let at = next.map(|t| t.saturating_sub(self.spin_ns));
            if at != self.armed && self.timer.set(at).is_ok() {
                self.armed = at;
            }
            tokens.clear();
            if let Err(e) = self.epoll.wait(&mut tokens, -1) {
                eprintln!("nestbed-linkd: epoll_wait: {e}");
                return;
            }
            self.handle(&tokens);
        }
    }

    /// Checks for ready sockets without sleeping (used while spinning).
    fn poll_sockets_nonblocking(&mut self, tokens: &mut Vec<u64>) -> bool {
        tokens.clear();
        self.epoll.wait(tokens, 0).is_ok() && !tokens.is_empty()
    }

    fn handle(&mut self, tokens: &[u64]) {
        for &t in tokens {
            match t {
                TOKEN_COMMAND => {
                    self.wake.drain();
                    while let Ok(cmd) = self.rx.try_recv() {
                        self.command(cmd);
                    }
                }
                TOKEN_TIMER => {
                    self.timer.drain();
                    self.armed = None;
                }
                t => {
                    let slot = ((t - TOKEN_BASE) >> 16) as usize;
                    let port = ((t - TOKEN_BASE) & 0xffff) as usize;
                    self.receive(slot, port);
                }
            }
        }
    }

    fn receive(&mut self, slot: usize, port: usize) {
        let Some(Some(s)) = self.slots.get_mut(slot) else {
            return;
        };
        let Some(sock) = s.sockets.get(port) else {
            return;
        };
        for _ in 0..MAX_BATCHES {
            let link = &mut s.link;
            let mut now = None;
            let got = sock.recv_batch(&mut self.batch, |frame| {
                let t = *now.get_or_insert_with(|| Instant::from_nanos(os::monotonic_ns()));
                link.receive(t, port, frame.data.to_vec(), frame.truncated);
            });
            match got {
                Ok(n) if n == BATCH => continue,
                Ok(_) => break,
                // The interface went down (admin down): expected; the
                // socket works again once it is up.
                Err(e) if e.raw_os_error() == Some(libc::ENETDOWN) => break,
                Err(e) => {
                    eprintln!(
                        "nestbed-linkd: recvmmsg on {}: {e}",
                        link.ports()[port].ifname
                    );
                    break;
                }
            }
        }
    }

    /// Moves every link forward to now, sends what is due, and returns the
    /// earliest next due time (monotonic ns).
    fn service(&mut self) -> Option<u64> {
        let mut next: Option<u64> = None;
        for s in self.slots.iter_mut().flatten() {
            let now = Instant::from_nanos(os::monotonic_ns());
            self.out.clear();
            s.link.poll(now, &mut self.out);
            if !self.out.is_empty() {
                send(s, &mut self.out, &mut self.lateness);
            }
            if let Some(w) = s.link.next_wakeup() {
                let w = w.as_nanos();
                next = Some(next.map_or(w, |n| n.min(w)));
            }
        }
        next
    }

    fn find(&mut self, name: &str) -> Result<&mut Slot, String> {
        self.slots
            .iter_mut()
            .flatten()
            .find(|s| s.link.name() == name)
            .ok_or_else(|| format!("field `link`: unknown link {name:?} in worker"))
    }

    fn command(&mut self, cmd: Command) {
        let now = Instant::from_nanos(os::monotonic_ns());
        match cmd {
            Command::AddLink(link, sockets, reply) => {
                let index = self
                    .slots
                    .iter()
                    .position(Option::is_none)
                    .unwrap_or(self.slots.len());
                let mut r = Ok(());
                for (port, sock) in sockets.iter().enumerate() {
                    if let Err(e) = self.epoll.add(sock.as_raw_fd(), token(index, port)) {
                        r = Err(format!("epoll_ctl: {e}"));
                    }
                }
                if r.is_ok() {
                    let slot = Some(Slot {
                        link: *link,
                        sockets,
                    });
                    if index == self.slots.len() {
                        self.slots.push(slot);
                    } else {
                        self.slots[index] = slot;
                    }
                } else {
                    for sock in &sockets {
                        let _ = self.epoll.delete(sock.as_raw_fd());
                    }
                }
                let _ = reply.send(r);
            }
            Command::RemoveLink(name, reply) => {
                let pos = self
                    .slots
                    .iter()
                    .position(|s| s.as_ref().is_some_and(|s| s.link.name() == name));
                let r = match pos.and_then(|i| self.slots[i].take()) {
                    Some(mut s) => {
                        for sock in &s.sockets {
                            let _ = self.epoll.delete(sock.as_raw_fd());
                        }
                        match s.link.stop_trace() {
                            Some(t) => t.finish().map(|_| ()).map_err(|e| format!("trace: {e}")),
                            None => Ok(()),
                        }
                    }
                    None => Err(format!("field `link`: unknown link {name:?} in worker")),
                };
                let _ = reply.send(r);
            }
            Command::Set(name, port, direction, params, reply) => {
                let r = self.find(&name).and_then(|s| {
                    let p = s
                        .link
                        .port_mut(port)
                        .ok_or_else(|| "field `port`: no such port".to_string())?;
                    p.pipe_mut(direction)
                        .set_params(now, *params)
                        .map_err(|e| format!("field `params`: {e}"))
                });
                let _ = reply.send(r);
            }
            Command::SetState(name, state, reply) => {
                let r = self.find(&name).map(|s| s.link.set_state(state));
                let _ = reply.send(r);
            }
            Command::Counters(names, reply) => {
                let mut links = Vec::new();
                for name in names {
                    if let Ok(s) = self.find(&name) {
                        links.push((name, s.link.counters()));
                    }
                }
                let _ = reply.send(Ok((links, self.lateness.clone())));
            }
            Command::TraceStart(name, trace, reply) => {
                let r = self.find(&name).map(|s| {
                    if let Some(old) = s.link.start_trace(*trace) {
                        let _ = old.finish();
                    }
                });
                let _ = reply.send(r);
            }
            Command::TraceStop(name, reply) => {
                let r = self.find(&name).and_then(|s| match s.link.stop_trace() {
                    Some(t) => t.finish().map_err(|e| format!("trace: {e}")),
                    None => Err(format!("field `link`: link {name:?} is not tracing")),
                });
                let _ = reply.send(r);
            }
            Command::Shutdown => {
                for s in self.slots.iter_mut().flatten() {
                    if let Some(t) = s.link.stop_trace() {
                        let _ = t.finish();
                    }
                }
                self.running = false;
            }
        }
    }
}

/// Sends the frames in `out` out of their ports, batched per port, and
/// records their lateness.
fn send(s: &mut Slot, out: &mut [Outgoing], lateness: &mut Histogram) {
    out.sort_by_key(|o| o.port);
    let mut start = 0;
    while start < out.len() {
        let port = out[start].port;
        let end = start + out[start..].iter().take_while(|o| o.port == port).count();
        let group = &out[start..end];
        let frames: Vec<&[u8]> = group.iter().map(|o| o.frame.as_slice()).collect();
        let sent_at = os::monotonic_ns();
        let ok = s
            .sockets
            .get(port)
            .map_or(0, |sock| sock.send_batch(&frames));
        for o in group {
            lateness.record(sent_at.saturating_sub(o.due.as_nanos()));
        }
        if let Some(p) = s.link.port_mut(port) {
            p.stats.sent += ok as u64;
            p.stats.send_failed += (group.len() - ok) as u64;
            if ok == group.len() {
                p.stats.sent_bytes += group.iter().map(|o| o.frame.len() as u64).sum::<u64>();
            }
        }
        start = end;
    }
}
