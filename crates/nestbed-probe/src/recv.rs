//! The receiver: binds (and joins a multicast group), receives probe datagrams with the
//! kernel's drop counter, optionally echoes each one to its sender unchanged, and at the end
//! turns what it kept into a [`RecvSummary`] and an optional per-packet CSV log.
//!
//! The receive loop does only `recvmsg`, a clock read, the echo and a push onto a vector
//! (24 bytes a packet); decoding statistics and writing the log happen after it ends.
//! Receive times are read from `CLOCK_MONOTONIC` right after `recvmsg` returns, so one-way
//! delay is application to application and includes the receiver's scheduling latency.
//! Sequence statistics assume one sender per receiver (one sequence space).
//!
//! With `--ring` the receiver reads no socket: it counts the datagrams to its address and port
//! in the frames a packet ring on an interface holds (`os::ring::RxRing`), timed by the
//! kernel's receive time and sized by their UDP length, so the figures mean what they mean on
//! the socket path, at no UDP stack cost and for frames the IP stack dropped too.

use std::collections::{BTreeMap, HashSet};
use std::io::{self, Write};
use std::net::{IpAddr, SocketAddr, SocketAddrV4};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::Serialize;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use crate::error::ProbeError;
use crate::frame::parse_udp4;
use crate::header::{self, Header};
use crate::os;
use crate::os::ring::RxRing;
use crate::stats::{sequence_stats, Distribution};
use crate::wire;

/// Default requested receive buffer: 8 MiB.
pub const DEFAULT_RCVBUF: usize = 8 << 20;

/// How often the loop wakes without traffic to check its stop conditions.
const POLL: Duration = Duration::from_millis(20);

/// Everything the receiver needs, as given by the user.
#[derive(Debug, Clone)]
pub struct RecvConfig {
    /// Local address and port (port 0: any free port).
    pub bind: SocketAddr,
    /// Multicast group to join; the bind address's IP is then the interface to join on.
    pub group: Option<IpAddr>,
    /// Send every datagram back to its sender unchanged.
    pub echo: bool,
    /// Stop this long after the start.
    pub duration_ns: Option<u64>,
    /// Stop after this many probe datagrams.
    pub count: Option<u64>,
    /// Stop after this long without any datagram (counted from the start until the first).
    pub idle_ns: Option<u64>,
    /// Count loss against this many datagrams instead of the highest sequence seen + 1.
    pub expect: Option<u64>,
    /// Per-packet CSV log.
    pub log: Option<PathBuf>,
    /// Requested receive buffer in bytes; 0 keeps the kernel's default.
    pub rcvbuf: usize,
    /// Time arrivals by the kernel's receive time (`SO_TIMESTAMPNS`) instead of the read.
    pub kernel_times: bool,
    /// Count the datagrams to `bind` in the frames reaching this interface, read from a
    /// packet ring (`--ring`), instead of receiving them on a UDP socket.
    pub ring: Option<String>,
}

/// One received probe datagram, as kept during the run.
#[derive(Debug, Clone, Copy)]
struct Record {
    seq: u32,
    burst: u16,
    size: u16,
    send_ns: u64,
    recv_ns: u64,
}

/// Why the receiver stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// `--count` datagrams arrived.
    Count,
    /// `--duration` passed.
    Duration,
    /// `--idle` passed without a datagram.
    Idle,
    /// SIGINT or SIGTERM.
    Signal,
}

/// Achieved receive rate over first to last arrival.
#[derive(Debug, Clone, Serialize)]
pub struct Rate {
    /// Datagrams per second: (packets − 1) / span.
    pub pps: f64,
    /// Payload bits per second (the first datagram's bytes excluded, as it opens the span).
    pub payload_bps: f64,
    /// On-the-wire bits per second, frames sized as the sender's `--rate` counts them.
    pub wire_bps: f64,
}

/// The receiver's JSON summary.
#[derive(Debug, Clone, Serialize)]
pub struct RecvSummary {
    /// Always "recv".
    pub role: &'static str,
    /// Local address the socket was bound to.
    pub local: String,
    /// Multicast group joined.
    pub group: Option<String>,
    /// Probe datagrams received (duplicates included).
    pub packets: u64,
    /// Payload bytes of those.
    pub bytes: u64,
    /// Datagrams that were not probe datagrams, by reason (e.g. "too_short").
    pub malformed: BTreeMap<String, u64>,
    /// Distinct sequence numbers received.
    pub unique: u64,
    /// Datagrams expected: `--expect`, or the highest sequence number + 1.
    pub expected: u64,
    /// Expected sequence numbers that never arrived.
    pub lost: u64,
    /// Loss as a probability in [0, 1] (lost / expected).
    pub loss: Option<f64>,
    /// Datagrams whose sequence number had already arrived.
    pub duplicates: u64,
    /// Datagrams that arrived after one with a higher sequence number.
    pub reordered: u64,
    /// Highest sequence number seen.
    pub highest_seq: Option<u32>,
    /// Distinct burst ids seen.
    pub bursts: u64,
    /// One-way delay (receive time − header timestamp, mod 2^48) of every probe datagram.
    pub delay: Distribution,
    /// `CLOCK_MONOTONIC` ns of the first arrival.
    pub first_recv_ns: Option<u64>,
    /// `CLOCK_MONOTONIC` ns of the last arrival.
    pub last_recv_ns: Option<u64>,
    /// Achieved rate, when at least two datagrams arrived at different times.
    pub rate: Option<Rate>,
    /// The kernel's count of datagrams dropped on this socket (`SO_RXQ_OVFL`), as last
    /// reported with a datagram; 0 when it never reported any.
    pub kernel_drops: u64,
    /// Whether the kernel drop counter is available on this socket.
    pub kernel_drops_available: bool,
    /// Datagrams whose receive time was before their send time (a clock error, counted in
    /// `delay` as 0: [`header::received_before_sent`]).
    pub received_before_sent: u64,
    /// Whether receive times are the kernel's (`--kernel-times`: when a datagram reached this
    /// host) rather than when this process read it.
    pub kernel_receive_times: bool,
    /// The interface whose packet ring the datagrams were counted on (`--ring`), or none:
    /// they were received on a UDP socket.
    pub ring_interface: Option<String>,
    /// User and system CPU seconds the receiver used until it stopped receiving.
    pub cpu_user_s: f64,
    /// See `cpu_user_s`.
    pub cpu_system_s: f64,
    /// Receive buffer requested, bytes (0: the kernel's default).
    pub rcvbuf_requested: usize,
    /// Receive buffer the kernel granted (as it reports it, doubled).
    pub rcvbuf_granted: usize,
    /// Datagrams echoed back.
    pub echoed: u64,
    /// Echoes the kernel refused.
    pub echo_errors: u64,
    /// Why the run ended.
    pub stopped_by: StopReason,
}

impl RecvConfig {
    /// Checks every parameter; all problems are reported together.
    pub fn validate(&self) -> Result<(), ProbeError> {
        let mut problems = Vec::new();
        if self.count == Some(0) {
            problems.push("--count must be at least 1.".to_string());
        }
        if self.duration_ns == Some(0) {
            problems.push("--duration must be positive.".to_string());
        }
        if self.idle_ns == Some(0) {
            problems.push("--idle must be positive.".to_string());
        }
        if let Some(g) = self.group {
            if !g.is_multicast() {
                problems.push(format!("--group {g} is not a multicast address."));
            } else if g.is_ipv6() != self.bind.is_ipv6() {
                problems.push(format!(
                    "--group {g} and --bind {} are of different IP versions.",
                    self.bind
                ));
            }
        }
        if self.ring.is_some() {
            if self.echo {
                problems.push("--echo needs the UDP socket; drop --ring.".to_string());
            }
            if self.group.is_some() {
                problems.push("--group needs the UDP socket; drop --ring.".to_string());
            }
            if self.bind.is_ipv6() || self.bind.port() == 0 {
                problems.push(format!(
                    "--ring counts IPv4 datagrams to one port: --bind {} needs an IPv4 address and a port.",
                    self.bind
                ));
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ProbeError::Usage(problems.join(" ")))
        }
    }
}

/// Where datagrams are read from.
enum Source {
    Socket(Socket),
    /// A receive ring; the frames counted are those to this address (any of this host's
    /// when its IP is unspecified).
    Ring(RxRing, SocketAddrV4),
}

/// A bound receiver, ready to [`run`](Receiver::run).
pub struct Receiver {
    source: Source,
    cfg: RecvConfig,
    local: SocketAddr,
    rcvbuf_granted: usize,
    kernel_drops_available: bool,
    kernel_receive_times: bool,
}

impl Receiver {
    /// Validates the configuration, opens and binds the socket, joins the group, sizes the
    /// receive buffer.
    pub fn open(cfg: RecvConfig) -> Result<Receiver, ProbeError> {
        cfg.validate()?;
        if let (Some(ifname), SocketAddr::V4(to)) = (&cfg.ring, cfg.bind) {
            let ring = RxRing::open(ifname)
                .map_err(|e| ProbeError::ring(&format!("opening a packet ring on {ifname}"), e))?;
            return Ok(Receiver {
                source: Source::Ring(ring, to),
                local: cfg.bind,
                cfg,
                rcvbuf_granted: 0,
                kernel_drops_available: true,
                kernel_receive_times: true,
            });
        }
        let sock = Socket::new(
            Domain::for_address(cfg.bind),
            Type::DGRAM,
            Some(Protocol::UDP),
        )
        .map_err(|e| ProbeError::io("creating a UDP socket", e))?;
        // 0: the kernel's default, as an untuned application gets it.
        if cfg.rcvbuf > 0 && os::force_recv_buffer(&sock, cfg.rcvbuf).is_err() {
            sock.set_recv_buffer_size(cfg.rcvbuf)
                .map_err(|e| ProbeError::io("setting SO_RCVBUF", e))?;
        }
        let rcvbuf_granted = sock.recv_buffer_size().unwrap_or(0);
        let kernel_drops_available = os::enable_rxq_ovfl(&sock).is_ok();
        if cfg.kernel_times {
            os::enable_kernel_timestamps(&sock)
                .map_err(|e| ProbeError::io("setting SO_TIMESTAMPNS", e))?;
        }
        let kernel_receive_times = cfg.kernel_times;
        let bind_to = match cfg.group {
            Some(g) => {
                sock.set_reuse_address(true)
                    .map_err(|e| ProbeError::io("setting SO_REUSEADDR", e))?;
                SocketAddr::new(g, cfg.bind.port())
            }
            None => cfg.bind,
        };
        sock.bind(&SockAddr::from(bind_to)).map_err(|e| {
            ProbeError::Usage(format!(
                "cannot receive on {bind_to}: {e}; give --bind an address of this host (or namespace) and a free port."
            ))
        })?;
        match (cfg.group, cfg.bind.ip()) {
            (Some(IpAddr::V4(g)), IpAddr::V4(ifaddr)) => sock.join_multicast_v4(&g, &ifaddr),
            (Some(IpAddr::V6(g)), _) => sock.join_multicast_v6(&g, 0),
            _ => Ok(()),
        }
        .map_err(|e| {
            ProbeError::Usage(format!(
                "cannot join multicast group {} on {}: {e}.",
                cfg.group.map_or_else(String::new, |g| g.to_string()),
                cfg.bind.ip()
            ))
        })?;
        sock.set_read_timeout(Some(POLL))
            .map_err(|e| ProbeError::io("setting SO_RCVTIMEO", e))?;
        let local = sock
            .local_addr()
            .ok()
            .and_then(|a| a.as_socket())
            .unwrap_or(bind_to);
        Ok(Receiver {
            source: Source::Socket(sock),
            cfg,
            local,
            rcvbuf_granted,
            kernel_drops_available,
            kernel_receive_times,
        })
    }

    /// The address the socket is bound to (with the port chosen when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Receives until a stop condition holds, then writes the log and returns the summary.
    pub fn run(mut self, stop: &AtomicBool) -> Result<RecvSummary, ProbeError> {
        let capacity = self
            .cfg
            .count
            .or(self.cfg.expect)
            .unwrap_or(1 << 16)
            .min(1 << 24);
        let mut got = Got {
            records: Vec::with_capacity(capacity as usize),
            malformed: BTreeMap::new(),
            echoed: 0,
            echo_errors: 0,
            kernel_drops: 0,
        };
        let stopped_by = match &mut self.source {
            Source::Socket(sock) => receive_on_socket(sock, &self.cfg, self.local, &mut got, stop)?,
            Source::Ring(ring, to) => receive_on_ring(ring, *to, &self.cfg, &mut got, stop),
        };
        let cpu = os::cpu_seconds();
        if let Some(path) = &self.cfg.log {
            write_log(path, &got.records)?;
        }
        Ok(self.summarize(got, stopped_by, cpu))
    }

    fn summarize(
        &self,
        got: Got,
        stopped_by: StopReason,
        (cpu_user_s, cpu_system_s): (f64, f64),
    ) -> RecvSummary {
        let Got {
            records,
            malformed,
            echoed,
            echo_errors,
            kernel_drops,
        } = got;
        let records = &records[..];
        let seq = sequence_stats(records.iter().map(|r| r.seq), self.cfg.expect);
        let mut delays: Vec<u64> = records
            .iter()
            .map(|r| header::delay_ns(r.send_ns, r.recv_ns))
            .collect();
        let received_before_sent = records
            .iter()
            .filter(|r| header::received_before_sent(r.send_ns, r.recv_ns))
            .count() as u64;
        let bytes: u64 = records.iter().map(|r| u64::from(r.size)).sum();
        let bursts = records
            .iter()
            .map(|r| r.burst)
            .collect::<HashSet<_>>()
            .len() as u64;
        let first = records.first().map(|r| r.recv_ns);
        let last = records.last().map(|r| r.recv_ns);
        let ipv6 = self.local.is_ipv6();
        let rate = match (records.first(), last) {
            (Some(f), Some(l)) if records.len() > 1 && l > f.recv_ns => {
                let span_s = (l - f.recv_ns) as f64 / 1e9;
                let tail = &records[1..];
                let wire: u64 = tail
                    .iter()
                    .map(|r| wire::wire_bytes(usize::from(r.size), ipv6))
                    .sum();
                Some(Rate {
                    pps: tail.len() as f64 / span_s,
                    payload_bps: (bytes - u64::from(f.size)) as f64 * 8.0 / span_s,
                    wire_bps: wire as f64 * 8.0 / span_s,
                })
            }
            _ => None,
        };
        RecvSummary {
            role: "recv",
            local: self.local.to_string(),
            group: self.cfg.group.map(|g| g.to_string()),
            packets: records.len() as u64,
            bytes,
            malformed,
            unique: seq.unique,
            expected: seq.expected,
            lost: seq.lost,
            loss: (seq.expected > 0).then(|| seq.lost as f64 / seq.expected as f64),
            duplicates: seq.duplicates,
            reordered: seq.reordered,
            highest_seq: seq.highest_seq,
            bursts,
            delay: Distribution::of(&mut delays),
            first_recv_ns: first,
            last_recv_ns: last,
            rate,
            kernel_drops,
            kernel_drops_available: self.kernel_drops_available,
            received_before_sent,
            kernel_receive_times: self.kernel_receive_times,
            ring_interface: self.cfg.ring.clone(),
            cpu_user_s,
            cpu_system_s,
            rcvbuf_requested: self.cfg.rcvbuf,
            rcvbuf_granted: self.rcvbuf_granted,
            echoed,
            echo_errors,
            stopped_by,
        }
    }
}

/// What a receive loop kept.
struct Got {
    records: Vec<Record>,
    malformed: BTreeMap<String, u64>,
    echoed: u64,
    echo_errors: u64,
    kernel_drops: u64,
}

impl Got {
    /// Keeps `datagram` (its first bytes) of `size` bytes, received at `recv_ns`.
    fn keep(&mut self, datagram: &[u8], size: usize, recv_ns: u64) {
        match Header::decode(datagram) {
            Ok(h) => self.records.push(Record {
                seq: h.seq,
                burst: h.burst,
                size: size.min(usize::from(u16::MAX)) as u16,
                send_ns: h.send_ns,
                recv_ns,
            }),
            Err(e) => *self.malformed.entry(e.reason().to_string()).or_insert(0) += 1,
        }
    }
}

/// Whether the receiver should stop now, and why.
fn stop_reason(
    cfg: &RecvConfig,
    kept: usize,
    start: u64,
    last_activity: u64,
    stop: &AtomicBool,
) -> Option<StopReason> {
    let now = os::monotonic_ns();
    if cfg.count.is_some_and(|n| kept as u64 >= n) {
        Some(StopReason::Count)
    } else if cfg.duration_ns.is_some_and(|d| now - start >= d) {
        Some(StopReason::Duration)
    } else if cfg.idle_ns.is_some_and(|d| now - last_activity >= d) {
        Some(StopReason::Idle)
    } else if stop.load(Ordering::Relaxed) {
        Some(StopReason::Signal)
    } else {
        None
    }
}

/// Receives on the UDP socket, echoing when asked.
fn receive_on_socket(
    sock: &Socket,
    cfg: &RecvConfig,
    local: SocketAddr,
    got: &mut Got,
    stop: &AtomicBool,
) -> Result<StopReason, ProbeError> {
    let mut buf = vec![0u8; 65_536];
    let start = os::monotonic_ns();
    let mut last_activity = start;
    loop {
        if let Some(why) = stop_reason(cfg, got.records.len(), start, last_activity, stop) {
            return Ok(why);
        }
        let r = match os::recv_with_drops(sock, &mut buf) {
            Ok(r) => r,
            Err(e) if os::nothing_yet(&e) => continue,
            Err(e) => return Err(ProbeError::io(format!("receiving on {local}"), e)),
        };
        let now = os::monotonic_ns();
        last_activity = now;
        // The kernel's receive time (when asked for) leaves out the wait in the socket and
        // for this thread to be scheduled: the delay measured is the network's alone.
        let recv_ns = r.kernel_ns.unwrap_or(now);
        let datagram = &buf[..r.len];
        if cfg.echo {
            if let Some(from) = r.from {
                match sock.send_to(datagram, &SockAddr::from(from)) {
                    Ok(_) => got.echoed += 1,
                    Err(_) => got.echo_errors += 1,
                }
            }
        }
        if let Some(d) = r.kernel_drops {
            got.kernel_drops = u64::from(d);
        }
        got.keep(datagram, r.len, recv_ns);
    }
}

/// Having read frames, the ring receiver sleeps this long before reading again, so it wakes
/// a few thousand times a second at most however many frames come (the ring holds some
/// 200 ms of them); with none waiting it sleeps in `poll` until one comes.
const RING_NAP_NS: u64 = 500_000;

/// Counts the datagrams to `to` in the frames of a receive ring, each timed by the
/// kernel's receive time and sized by its UDP length (so `wire_bps` counts the frames as
/// the socket path and the sender's `--rate` do); the ring's overflows are its kernel drops.
fn receive_on_ring(
    ring: &mut RxRing,
    to: SocketAddrV4,
    cfg: &RecvConfig,
    got: &mut Got,
    stop: &AtomicBool,
) -> StopReason {
    let start = os::monotonic_ns();
    let mut last_activity = start;
    let mut offset = os::ClockOffset::measure();
    loop {
        if let Some(why) = stop_reason(cfg, got.records.len(), start, last_activity, stop) {
            got.kernel_drops = ring.drops();
            return why;
        }
        offset.refresh(os::monotonic_ns());
        let mut mine = 0;
        let read = ring.drain(|f| {
            let Some(udp) = parse_udp4(f.head) else {
                return;
            };
            if udp.dst.port() != to.port() || !(to.ip().is_unspecified() || udp.dst.ip() == to.ip())
            {
                return;
            }
            mine += 1;
            let read_ns = os::monotonic_ns(); // frames keep coming while the ring drains
            let recv_ns = offset.received(i128::from(f.realtime_ns), read_ns);
            let recv_ns = u64::try_from(recv_ns).unwrap_or(0);
            got.keep(udp.payload, udp.payload_len, recv_ns);
        });
        if mine > 0 {
            last_activity = os::monotonic_ns();
        }
        if read > 0 {
            os::sleep_until_monotonic_ns(os::monotonic_ns() + RING_NAP_NS);
        } else {
            ring.wait(POLL.as_millis() as i32);
        }
    }
}

/// Writes `seq,burst,send_ns,recv_ns,size,delay_ns`; both times are `CLOCK_MONOTONIC` ns
/// modulo 2^48 (the header's domain), `delay_ns` their difference modulo 2^48 (0 if the
/// receive time is before the send time: [`header::delay_ns`]).
fn write_log(path: &PathBuf, records: &[Record]) -> Result<(), ProbeError> {
    let what = || format!("writing the log {}", path.display());
    let file = std::fs::File::create(path).map_err(|e| ProbeError::io(what(), e))?;
    let mut w = io::BufWriter::new(file);
    let mut write = || -> io::Result<()> {
        writeln!(w, "seq,burst,send_ns,recv_ns,size,delay_ns")?;
        for r in records {
            writeln!(
                w,
                "{},{},{},{},{},{}",
                r.seq,
                r.burst,
                r.send_ns,
                r.recv_ns & header::TIMESTAMP_MASK,
                r.size,
                header::delay_ns(r.send_ns, r.recv_ns)
            )?;
        }
        w.flush()
    };
    write().map_err(|e| ProbeError::io(what(), e))
}
