//! One worker thread: an epoll loop over the packet sockets of its links,
//! an eventfd for commands from the control thread, and a timerfd armed at
//! the earliest due time of its pipes minus `spin_us` (timer slack 1 ns).
//! Within `spin_us` of a due time the loop does not sleep: it keeps polling
//! (epoll with a zero timeout), so frames that arrive meanwhile are read at
//! once and the due frames leave as soon as they are due.
//!
//! A frame's arrival time is the kernel's receive timestamp
//! (`SO_TIMESTAMPNS`, `CLOCK_REALTIME`, converted to `CLOCK_MONOTONIC` with
//! an offset refreshed every 100 ms), not the time the worker read it;
//! without a usable timestamp it is the time of the read. Frames are read
//! and sent in batches with reused buffers. Each frame's lateness (send time
//! − due time) goes into the thread's histogram.
//!
//! A timed change of a link ([`Timed`], linkd's `at`) waits here as a due
//! time of its own, so the timer and the busy-wait that send frames on time
//! apply it on time too; its answer says when it was applied. While a timed
//! change is the worker's next due time, the worker is in the real-time
//! class (lowest priority, where it may), so that its timer wakes it ahead
//! of the machine's other work (programs started at that instant, say):
//! that is the spin window before the change, and the sleep before it.
//! Frames' own due times leave it in the normal class. Every change
//! of a pipe or a link's state has a number, rising, by which the registry
//! knows which came last ([`crate::dispatch`]).

use std::io;
use std::os::fd::AsRawFd;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

use nestbed_pipe::{Instant, Packet, PipeParams};
use nestbed_ring::clock::ClockOffset;
use serde_json::Value;

use crate::dispatch::LinkState;
use crate::lateness::Histogram;
use crate::link::{Link, Outgoing};
use crate::offload;
use crate::os::{self, Batch, Epoll, EventFd, PacketSocket, SendBatch, TimerFd};
use crate::seed::Direction;
use crate::trace::Trace;
use crate::watch::Offloads;

const TOKEN_COMMAND: u64 = 0;
const TOKEN_TIMER: u64 = 1;
const TOKEN_BASE: u64 = 2;
/// Frames per recvmmsg call.
const BATCH: usize = 64;
/// recvmmsg calls per socket per wake-up (fairness between sockets).
const MAX_BATCHES: usize = 4;
/// Frame buffers kept for reuse.
const POOL_MAX: usize = 4096;
/// Frame buffers larger than this are kept apart, fewer of them.
const POOL_MAX_CAPACITY: usize = 16 * 1024;
/// Super-frame buffers (up to 64 KB) kept for reuse: allocating and freeing
/// them one by one costs page faults as the allocator returns them to the
/// kernel.
const BIG_POOL_MAX: usize = 256;
/// A kernel timestamp older than this (relative to the read) is not trusted.
const MAX_TIMESTAMP_AGE_NS: u64 = 1_000_000_000;

/// A reply channel.
pub type Reply<T> = Sender<Result<T, String>>;

/// What the control thread asks a worker to do.
pub enum Command {
    /// Take a link, known by this id, whose sockets are being started: its
    /// state, pipes and trace are served at once, its frames once
    /// [`Command::Attach`] brings the sockets; its flag says whether some
    /// port has offloads on ([`crate::watch`]).
    AddLink(Box<Link>, u64, Offloads, Reply<()>),
    /// Start serving the link of this id on these sockets (one per port,
    /// in order), bound and ready; or, on `Err`, say its ports failed to
    /// start. The reply says whether the link now carries frames, and gives
    /// back the sockets it does not use (its link was removed meanwhile, or
    /// they cannot be watched), to be closed by the sender: closing waits
    /// for the kernel, which a worker must not.
    Attach(u64, Result<Vec<PacketSocket>, String>, Sender<Attached>),
    /// Stop serving a link (its trace is flushed).
    RemoveLink(String, Reply<()>),
    /// Change one pipe; the reply is the change's number.
    Set(String, usize, Direction, Box<PipeParams>, Reply<u64>),
    /// Change the link state; the reply is the change's number.
    SetState(String, LinkState, Reply<u64>),
    /// Apply changes of one link at a time; the reply comes then.
    At(Box<Timed>),
    /// Counters of these links, and the thread's lateness histogram.
    Counters(Vec<String>, Reply<(Vec<(String, Value)>, Histogram)>),
    /// Start tracing a link.
    TraceStart(String, Box<Trace>, Reply<()>),
    /// Stop tracing; the reply is the number of lines written.
    TraceStop(String, Reply<u64>),
    /// Flush traces and exit.
    Shutdown,
}

/// Changes of one link to apply in order at a time (CLOCK_MONOTONIC ns):
/// at once if it has passed.
pub struct Timed {
    /// When.
    pub at_ns: u64,
    /// The link.
    pub link: String,
    /// What, in order.
    pub changes: Vec<Change>,
    /// Where the answer goes, when they were applied (or why not).
    pub reply: Reply<Applied>,
}

/// One change of a [`Timed`] batch.
pub enum Change {
    /// A pipe's parameters: port index, direction.
    Set(usize, Direction, Box<PipeParams>),
    /// The link's state (never admin down: that is the control thread's).
    State(LinkState),
}

/// When a [`Timed`] batch was applied, and the number of its first change
/// (the others follow it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Applied {
    /// CLOCK_MONOTONIC ns, read once the last change was made.
    pub applied_ns: u64,
    /// The first change's number.
    pub first: u64,
}

/// The answer to [`Command::Attach`]: whether the link carries frames, and
/// the sockets given back.
pub type Attached = (Result<(), String>, Vec<PacketSocket>);

/// The control thread's handle on a worker.
pub struct WorkerHandle {
    mailbox: Mailbox,
    join: Option<JoinHandle<()>>,
}

/// Where commands to a worker are sent, from any thread.
#[derive(Clone)]
pub struct Mailbox {
    tx: Sender<Command>,
    wake: Arc<EventFd>,
}

impl Mailbox {
    /// Sends a command and wakes the worker.
    pub fn send(&self, cmd: Command) -> Result<(), String> {
        self.tx
            .send(cmd)
            .map_err(|_| "worker thread is gone".to_string())?;
        self.wake.notify();
        Ok(())
    }
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
            mailbox: Mailbox { tx, wake },
            join: Some(join),
        })
    }

    /// Sends a command and wakes the worker.
    pub fn send(&self, cmd: Command) -> Result<(), String> {
        self.mailbox.send(cmd)
    }

    /// Where other threads send this worker commands.
    pub fn mailbox(&self) -> Mailbox {
        self.mailbox.clone()
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
    /// Which [`Command::AddLink`] made it.
    id: u64,
    /// One per port once attached; none while they start (or if they failed).
    sockets: Vec<PacketSocket>,
    /// Why the ports have no sockets: "starting", or "failed".
    unattached: &'static str,
    /// Whether some port has offloads on, as the watcher last read.
    offloads: Offloads,
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
    send_batch: SendBatch,
    out: Vec<Outgoing>,
    pool: Vec<Vec<u8>>,
    big_pool: Vec<Vec<u8>>,
    clock: ClockOffset,
    running: bool,
    /// Timed batches waiting for their time, soonest first (in arrival
    /// order at one time), with the id of their link's slot.
    timed: Vec<(u64, Timed)>,
    /// The number of the last change made.
    changes: u64,
    /// Whether the thread is in the real-time class now; and whether it
    /// may not be (no privilege: not tried again).
    realtime: bool,
    realtime_refused: bool,
}

/// The monotonic arrival time of a frame read at `read` (monotonic) with
/// kernel timestamp `kernel` (realtime), if that is plausible; else `read`.
fn arrival(clock: &ClockOffset, kernel: Option<u64>, read: u64) -> u64 {
    let Some(k) = kernel else {
        return read;
    };
    let m = clock.monotonic(i128::from(k));
    if m > i128::from(read) || m < i128::from(read.saturating_sub(MAX_TIMESTAMP_AGE_NS)) {
        // After the read (an offset error), or implausibly old (the
        // realtime clock stepped, or not a receive timestamp).
        return read;
    }
    m as u64
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
            send_batch: SendBatch::default(),
            out: Vec::new(),
            pool: Vec::new(),
            big_pool: Vec::new(),
            clock: ClockOffset::measure(),
            running: true,
            timed: Vec::new(),
            changes: 0,
            realtime: false,
            realtime_refused: false,
        })
    }

    fn run(&mut self) {
        // Best effort: without it timers are up to 50 µs late.
        let _ = os::set_min_timer_slack();
        let mut tokens = Vec::with_capacity(64);
        let mut next: Option<u64> = None;
        let mut busy = false;
        while self.running {
            tokens.clear();
            self.follow_timed(next);
            let timeout = if busy {
                // Due within the spin window: look for input without
                // sleeping, then go round again; but let any thread waiting
                // for this CPU run first, or it waits for the next tick.
                os::yield_cpu();
                0
            } else {
                let at = next.map(|t| t.saturating_sub(self.spin_ns));
                if at != self.armed && self.timer.set(at).is_ok() {
                    self.armed = at;
                }
                -1
            };
            if let Err(e) = self.epoll.wait(&mut tokens, timeout) {
                eprintln!("nestbed-linkd: epoll_wait: {e}");
                return;
            }
            let start = os::monotonic_ns();
            if self.clock.refresh(start) {
                self.follow_offloads();
            }
            self.handle(&tokens, next);
            // Frames read above carry their kernel arrival times; moving the
            // pipes only to `start` (not past it) keeps a frame that arrived
            // after `start` from entering a pipe whose clock is already
            // later than its arrival.
            next = self.service(start);
            let now = os::monotonic_ns();
            busy = next.is_some_and(|t| t <= now + self.spin_ns);
        }
    }

    /// Puts the thread in the real-time class while a timed change is its
    /// next due time `next`, and back once it is not.
    fn follow_timed(&mut self, next: Option<u64>) {
        let wanted = self
            .timed
            .first()
            .is_some_and(|(_, t)| next == Some(t.at_ns));
        if wanted == self.realtime || (wanted && self.realtime_refused) {
            return;
        }
        match os::set_realtime(wanted) {
            Ok(()) => self.realtime = wanted,
            Err(_) => self.realtime_refused = true,
        }
    }

    /// Reads and sends frames with their offload metadata on the links one
    /// of whose interfaces has offloads on (a super-frame read on one port
    /// must be sent with its metadata on another), and without it
    /// elsewhere; checked as often as the clock offset, so a change of
    /// offloads while linkd runs is followed within about 200 ms (the
    /// watcher's period and this one; longer while the watcher waits for
    /// the kernel's rtnl lock). Only the watcher's flag is read: reading
    /// the interfaces here would wait for that lock.
    /// A socket going from its rings to the copy path loses what its
    /// receive ring holds, so that is read first.
    fn follow_offloads(&mut self) {
        for index in 0..self.slots.len() {
            let Some(s) = &self.slots[index] else {
                continue;
            };
            let on = s.offloads.load(std::sync::atomic::Ordering::Relaxed);
            for port in 0..s.sockets.len() {
                if self.slots[index]
                    .as_ref()
                    .is_some_and(|s| s.sockets[port].has_rings() && on)
                {
                    self.receive(index, port, None);
                }
            }
            let Some(s) = &mut self.slots[index] else {
                continue;
            };
            for (sock, port) in s.sockets.iter_mut().zip(s.link.ports()) {
                if let Err(e) = sock.set_vnet(on) {
                    eprintln!("nestbed-linkd: frame I/O on {}: {e}", port.ifname);
                }
            }
        }
    }

    fn handle(&mut self, tokens: &[u64], deadline: Option<u64>) {
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
                    self.receive(slot, port, deadline);
                }
            }
        }
    }

    /// Reads what is pending on one socket (at most `MAX_BATCHES` batches,
    /// and no further batch once `deadline` has passed, so due frames are
    /// not held up by a backlog of arrivals).
    fn receive(&mut self, slot: usize, port: usize, deadline: Option<u64>) {
        let Some(Some(s)) = self.slots.get_mut(slot) else {
            return;
        };
        let Some(sock) = s.sockets.get_mut(port) else {
            return;
        };
        let clock = &self.clock;
        let (pool, big_pool) = (&mut self.pool, &mut self.big_pool);
        for _ in 0..MAX_BATCHES {
            let link = &mut s.link;
            let mut read = None;
            let got = sock.recv_batch(&mut self.batch, |frame| {
                let read = *read.get_or_insert_with(os::monotonic_ns);
                let at = arrival(clock, frame.kernel_realtime_ns, read);
                let len = frame.data.0.len() + frame.data.1.len();
                let mut buf = if len > POOL_MAX_CAPACITY {
                    big_pool.pop()
                } else {
                    pool.pop()
                }
                .unwrap_or_default();
                buf.clear();
                buf.extend_from_slice(frame.data.0);
                buf.extend_from_slice(frame.data.1);
                let (wire_len, segments) = offload::wire(&buf, frame.meta);
                let packet = Packet::with_segments(buf, wire_len, segments, frame.meta);
                link.receive(Instant::from_nanos(at), port, packet, frame.truncated);
            });
            match got {
                Ok(n) if n == BATCH => {
                    let now = read.unwrap_or_else(os::monotonic_ns);
                    if deadline.is_some_and(|d| now >= d) {
                        break;
                    }
                }
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

    /// Applies the timed batches due by `now`, each at its own time in its
    /// pipes (or their clock, if that is later: it never goes back).
    fn apply_timed(&mut self, now: u64) {
        while self.timed.first().is_some_and(|(_, t)| t.at_ns <= now) {
            let (id, t) = self.timed.remove(0);
            let answer = self
                .apply(id, t.at_ns, &t.changes)
                .map_err(|e| format!("link {:?}: {e}", t.link));
            let _ = t.reply.send(answer);
        }
    }

    /// Makes a timed batch's changes of the link in slot `id`, all or none.
    fn apply(&mut self, id: u64, at_ns: u64, changes: &[Change]) -> Result<Applied, String> {
        let Some(s) = self.slots.iter_mut().flatten().find(|s| s.id == id) else {
            return Err("removed before the change's time; nothing applied".into());
        };
        let state_change = changes.iter().any(|c| matches!(c, Change::State(_)));
        if state_change && s.link.state() == LinkState::AdminDown {
            // Its interfaces are down: setting a state here would hide that.
            return Err("set down admin before the change's time; nothing applied".into());
        }
        let first = self.changes + 1;
        for change in changes {
            match change {
                Change::Set(port, direction, params) => {
                    let pipe = s
                        .link
                        .port_mut(*port)
                        .ok_or("no such port")?
                        .pipe_mut(*direction);
                    // (checked when planned: this cannot fail half-way)
                    pipe.set_params(Instant::from_nanos(at_ns), (**params).clone())
                        .map_err(|e| format!("field `params`: {e}"))?;
                }
                Change::State(state) => s.link.set_state(*state),
            }
            self.changes += 1;
        }
        Ok(Applied {
            applied_ns: os::monotonic_ns(),
            first,
        })
    }

    /// Answers the timed batches of slot `id` (None: all) that they will
    /// not be applied.
    fn drop_timed(&mut self, id: Option<u64>, why: &str) {
        let (gone, kept) = std::mem::take(&mut self.timed)
            .into_iter()
            .partition(|(slot, _)| id.is_none_or(|i| i == *slot));
        self.timed = kept;
        for (_, t) in gone {
            let _ = t
                .reply
                .send(Err(format!("link {:?}: {why}; nothing applied", t.link)));
        }
    }

    /// Moves every link forward to `now` (after the timed batches due by
    /// then), sends what is due, and returns the earliest next due time
    /// (monotonic ns).
    fn service(&mut self, now: u64) -> Option<u64> {
        self.apply_timed(now);
        let mut next: Option<u64> = self.timed.first().map(|(_, t)| t.at_ns);
        let now = Instant::from_nanos(now);
        for s in self.slots.iter_mut().flatten() {
            s.link.poll(now, &mut self.out);
            if !self.out.is_empty() {
                send(s, &mut self.send_batch, &self.out, &mut self.lateness);
                for o in self.out.drain(..) {
                    if o.frame.capacity() > POOL_MAX_CAPACITY {
                        if self.big_pool.len() < BIG_POOL_MAX {
                            self.big_pool.push(o.frame);
                        }
                    } else if self.pool.len() < POOL_MAX {
                        self.pool.push(o.frame);
                    }
                }
            }
            if let Some(w) = s.link.next_wakeup() {
                let w = w.as_nanos();
                next = Some(next.map_or(w, |n| n.min(w)));
            }
        }
        next
    }

    /// Starts reading the started sockets of the link in slot `index`
    /// (frames that arrived since they were bound wait in them); gives the
    /// sockets back if they cannot be watched, and the link stays without.
    fn attach(&mut self, index: usize, sockets: Vec<PacketSocket>) -> Attached {
        for (port, sock) in sockets.iter().enumerate() {
            if let Err(e) = self.epoll.add(sock.as_raw_fd(), token(index, port)) {
                for sock in &sockets[..port] {
                    let _ = self.epoll.delete(sock.as_raw_fd());
                }
                if let Some(s) = &mut self.slots[index] {
                    s.unattached = "failed";
                }
                return (Err(format!("epoll_ctl: {e}")), sockets);
            }
        }
        if let Some(s) = &mut self.slots[index] {
            s.sockets = sockets;
        }
        (Ok(()), Vec::new())
    }

    fn find(&mut self, name: &str) -> Result<&mut Slot, String> {
        self.slots
            .iter_mut()
            .flatten()
            .find(|s| s.link.name() == name)
            .ok_or_else(|| format!("field `link`: unknown link {name:?} in worker"))
    }

    /// The number of a change just made.
    fn numbered(&mut self) -> u64 {
        self.changes += 1;
        self.changes
    }

    fn command(&mut self, cmd: Command) {
        let now = Instant::from_nanos(os::monotonic_ns());
        match cmd {
            Command::AddLink(link, id, offloads, reply) => {
                let slot = Some(Slot {
                    link: *link,
                    id,
                    sockets: Vec::new(),
                    unattached: "starting",
                    offloads,
                });
                match self.slots.iter().position(Option::is_none) {
                    Some(index) => self.slots[index] = slot,
                    None => self.slots.push(slot),
                }
                let _ = reply.send(Ok(()));
            }
            Command::Attach(id, started, back) => {
                let index = self
                    .slots
                    .iter()
                    .position(|s| s.as_ref().is_some_and(|s| s.id == id));
                let attached = match (index, started) {
                    (Some(index), Ok(sockets)) => self.attach(index, sockets),
                    (Some(index), Err(e)) => {
                        if let Some(s) = &mut self.slots[index] {
                            s.unattached = "failed";
                        }
                        (Err(e), Vec::new())
                    }
                    // Removed while its ports started: nothing to report.
                    (None, started) => (Ok(()), started.unwrap_or_default()),
                };
                let _ = back.send(attached);
            }
            Command::RemoveLink(name, reply) => {
                let pos = self
                    .slots
                    .iter()
                    .position(|s| s.as_ref().is_some_and(|s| s.link.name() == name));
                let r = match pos.and_then(|i| self.slots[i].take()) {
                    Some(mut s) => {
                        self.drop_timed(Some(s.id), "removed before the change's time");
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
                let _ = reply.send(r.map(|()| self.numbered()));
            }
            Command::SetState(name, state, reply) => {
                let r = self.find(&name).map(|s| s.link.set_state(state));
                let _ = reply.send(r.map(|()| self.numbered()));
            }
            Command::At(t) => match self.find(&t.link).map(|s| s.id) {
                Ok(id) => {
                    let at = self.timed.partition_point(|(_, o)| o.at_ns <= t.at_ns);
                    self.timed.insert(at, (id, *t));
                }
                Err(e) => {
                    let _ = t.reply.send(Err(e));
                }
            },
            Command::Counters(names, reply) => {
                let mut links = Vec::new();
                for name in names {
                    if let Ok(s) = self.find(&name) {
                        let mut counters = s.link.counters();
                        // Which frame I/O path each port's socket is on now.
                        for (i, port) in s.link.ports().iter().enumerate() {
                            let io = match s.sockets.get(i) {
                                Some(sock) if sock.has_rings() => "rings",
                                Some(_) => "copy",
                                None => s.unattached,
                            };
                            if let Some(p) = counters["ports"].get_mut(&port.name) {
                                p["io"] = io.into();
                            }
                        }
                        links.push((name, counters));
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
                self.drop_timed(None, "nestbed-linkd stopped before the change's time");
                for s in self.slots.iter_mut().flatten() {
                    if let Some(t) = s.link.stop_trace() {
                        let _ = t.finish();
                    }
                }
                let sockets = self
                    .slots
                    .iter_mut()
                    .flatten()
                    .flat_map(|s| s.sockets.drain(..))
                    .collect();
                close_in_parallel(sockets);
                self.running = false;
            }
        }
    }
}

/// Closes packet sockets from many threads at once. Closing a bound packet socket waits
/// for an RCU grace period (`synchronize_net`); one after the other, 200 of them take
/// seconds, while concurrent closes share grace periods.
fn close_in_parallel(mut sockets: Vec<PacketSocket>) {
    let chunk = sockets.len().div_ceil(32).max(1);
    std::thread::scope(|scope| {
        while !sockets.is_empty() {
            let part: Vec<PacketSocket> = sockets.drain(..chunk.min(sockets.len())).collect();
            scope.spawn(move || drop(part));
        }
    });
}

/// Sends the frames in `out` out of their ports, batched per port (in
/// order within a port), and records their lateness.
fn send(s: &mut Slot, scratch: &mut SendBatch, out: &[Outgoing], lateness: &mut Histogram) {
    for port in 0..s.sockets.len() {
        let count = out.iter().filter(|o| o.port == port).count();
        if count == 0 {
            continue;
        }
        let group = || out.iter().filter(move |o| o.port == port);
        let sent_at = os::monotonic_ns();
        let ok = s.sockets[port].send_batch(scratch, group().map(|o| (o.frame.as_slice(), o.meta)));
        for o in group() {
            lateness.record(sent_at.saturating_sub(o.due.as_nanos()));
        }
        if let Some(p) = s.link.port_mut(port) {
            p.stats.sent += ok as u64;
            p.stats.send_failed += (count - ok) as u64;
            if ok == count {
                p.stats.sent_bytes += group().map(|o| o.frame.len() as u64).sum::<u64>();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! Timed changes through a real worker thread (its timer and busy-wait),
    //! on a link without sockets: no root needed.

    use std::time::Duration;

    use super::*;
    use crate::protocol::{parse_request, Request};

    const WAIT: Duration = Duration::from_secs(30); // only a bound on a hung test

    fn worker_with_link() -> WorkerHandle {
        worker_with_link_numbered(0)
    }

    fn worker_with_link_numbered(index: usize) -> WorkerHandle {
        let line = r#"{"op":"add_link","link":"l0","ports":[{"port":"a","ifname":"nbtw0a"},{"port":"b","ifname":"nbtw0b"}]}"#;
        let Ok(Request::AddLink(spec)) = parse_request(line) else {
            panic!()
        };
        let w = WorkerHandle::spawn(index, 200).unwrap();
        ask(&w, |r| {
            Command::AddLink(
                Box::new(Link::new(&spec).unwrap()),
                1,
                Offloads::default(),
                r,
            )
        })
        .unwrap();
        w
    }

    fn ask<T>(w: &WorkerHandle, make: impl FnOnce(Reply<T>) -> Command) -> Result<T, String> {
        let (tx, rx) = channel();
        w.send(make(tx)).unwrap();
        rx.recv_timeout(WAIT).unwrap()
    }

    /// Hands the worker a timed batch; where its answer comes.
    fn at(w: &WorkerHandle, at_ns: u64, changes: Vec<Change>) -> Receiver<Result<Applied, String>> {
        let (reply, answer) = channel();
        let link = "l0".to_string();
        w.send(Command::At(Box::new(Timed {
            at_ns,
            link,
            changes,
            reply,
        })))
        .unwrap();
        answer
    }

    /// The link's state and port a's egress queue limit (packets), as its
    /// counters say.
    fn seen(w: &WorkerHandle) -> (String, u64) {
        let (links, _) = ask(w, |r| Command::Counters(vec!["l0".into()], r)).unwrap();
        let c = &links[0].1;
        let limit = c["ports"]["a"]["egress"]["queue_limit"]["packets"].as_u64();
        (c["state"].as_str().unwrap().into(), limit.unwrap())
    }

    fn queue_of(packets: u64) -> Change {
        let params: PipeParams =
            serde_json::from_value(serde_json::json!({"queue": {"limit": {"packets": packets}}}))
                .unwrap();
        Change::Set(0, Direction::Egress, Box::new(params))
    }

    #[test]
    fn a_timed_batch_is_applied_at_its_time_in_order_and_answered_with_when() {
        let mut w = worker_with_link();
        let before = seen(&w);
        assert_eq!(before, ("up".into(), 50));
        let due = os::monotonic_ns() + 20_000_000;
        let answer = at(
            &w,
            due,
            vec![queue_of(7), Change::State(LinkState::Blackhole)],
        );
        let applied = answer.recv_timeout(WAIT).unwrap().unwrap();
        assert!(applied.applied_ns >= due, "applied before its time");
        assert_eq!(seen(&w), ("blackhole".into(), 7));
        // Numbered after each other, and after them the next change asked for now.
        let n = ask(&w, |r| Command::SetState("l0".into(), LinkState::Up, r)).unwrap();
        assert_eq!(n, applied.first + 2);
        w.stop();
    }

    #[test]
    fn a_timed_batch_waits_for_its_time_while_the_worker_answers_other_commands() {
        let mut w = worker_with_link();
        // An hour from now: still waiting whatever the machine's load.
        let far = at(
            &w,
            os::monotonic_ns() + 3_600_000_000_000,
            vec![queue_of(9)],
        );
        let past = at(&w, 1, vec![Change::State(LinkState::Blackhole)]);
        assert!(
            past.recv_timeout(WAIT).unwrap().is_ok(),
            "past its time: at once"
        );
        assert_eq!(seen(&w), ("blackhole".into(), 50)); // the far one not yet
        assert!(far.try_recv().is_err());
        // Removing the link answers it at once, and nothing was applied.
        ask(&w, |r| Command::RemoveLink("l0".into(), r)).unwrap();
        let e = far.recv_timeout(WAIT).unwrap().unwrap_err();
        assert!(
            e.contains("removed") && e.contains("nothing applied"),
            "{e}"
        );
        w.stop();
    }

    #[test]
    fn stopping_answers_the_timed_batches_still_waiting() {
        let mut w = worker_with_link();
        let far = at(
            &w,
            os::monotonic_ns() + 3_600_000_000_000,
            vec![queue_of(9)],
        );
        w.stop(); // returns: the worker does not wait for it
        let e = far.recv_timeout(WAIT).unwrap().unwrap_err();
        assert!(
            e.contains("stopped") && e.contains("nothing applied"),
            "{e}"
        );
    }

    #[test]
    fn a_timed_state_change_is_not_applied_to_a_link_set_down_admin_meanwhile() {
        let mut w = worker_with_link();
        ask(&w, |r| {
            Command::SetState("l0".into(), LinkState::AdminDown, r)
        })
        .unwrap();
        let answer = at(&w, 1, vec![queue_of(9), Change::State(LinkState::Up)]);
        let e = answer.recv_timeout(WAIT).unwrap().unwrap_err();
        assert!(
            e.contains("down admin") && e.contains("nothing applied"),
            "{e}"
        );
        assert_eq!(seen(&w), ("admin_down".into(), 50));
        w.stop();
    }

    /// The scheduling policy of this process's thread called `name` (0
    /// normal, 1 FIFO), from its stat line.
    fn policy_of(name: &str) -> u64 {
        for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
            let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
            if comm.trim_end() == name {
                let stat = std::fs::read_to_string(task.path().join("stat")).unwrap();
                let after = stat.rsplit_once(')').unwrap().1;
                // (fields from the third on; the policy is the 41st)
                return after.split_whitespace().nth(38).unwrap().parse().unwrap();
            }
        }
        panic!("no thread {name}")
    }

    #[test]
    fn the_worker_waits_for_a_timed_change_in_the_real_time_class_and_leaves_it_after() {
        let mut w = worker_with_link_numbered(7); // a name no other test's worker has
        let far = at(
            &w,
            os::monotonic_ns() + 3_600_000_000_000,
            vec![queue_of(9)],
        );
        let wanted = if os::is_root() { 1 } else { 0 }; // without the privilege: as before
        until_policy("linkd-worker-7", wanted);
        ask(&w, |r| Command::RemoveLink("l0".into(), r)).unwrap();
        assert!(far.recv_timeout(WAIT).unwrap().is_err());
        until_policy("linkd-worker-7", 0);
        w.stop();
    }

    fn until_policy(name: &str, wanted: u64) {
        let deadline = std::time::Instant::now() + WAIT;
        while policy_of(name) != wanted {
            assert!(
                std::time::Instant::now() < deadline,
                "{name}: policy not {wanted}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}
