//! The paced sender: validates a [`SendConfig`], opens the socket (unicast or multicast),
//! sends on the absolute schedule of [`crate::pacing`], optionally collects echoes for round
//! trip times, and returns a [`SendSummary`].
//!
//! Every datagram the sender tries to send takes the next sequence number, also when the
//! kernel refuses it (`ENOBUFS`, unreachable, …): such refusals are counted by kind, not
//! fatal, and show up at the receiver as loss between the application and the interface.
//!
//! With `--ring` the datagrams leave as whole frames (`frame::Template`) from a packet ring
//! on an interface, written as they fall due and handed to the kernel a batch at a time: the
//! same schedule and header, no UDP stack, and no spinning.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use serde::Serialize;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use crate::error::ProbeError;
use crate::frame::{Mac, Template, PAYLOAD_AT};
use crate::header::{self, Header, HEADER_LEN};
use crate::os::ring::{interface_mac, TxRing};
use crate::os::{self, MonotonicClock};
use crate::pacing::{self, Burst, Clock, Limit, Schedule};
use crate::stats::{sequence_stats, Distribution};
use crate::wire;

/// How the sender spaces its datagrams.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pace {
    /// Bits per second of on-the-wire frames ([`wire::wire_bytes`]).
    RateBps(f64),
    /// Datagrams per second.
    Pps(f64),
    /// Seconds between datagrams.
    IntervalS(f64),
    /// No spacing: as fast as the socket takes them (only with bursts).
    BackToBack,
}

/// Everything the sender needs, as given by the user.
#[derive(Debug, Clone)]
pub struct SendConfig {
    /// Destination, unicast or multicast.
    pub to: SocketAddr,
    /// Local address to send from; for multicast also the outgoing interface.
    pub bind: Option<IpAddr>,
    /// UDP payload bytes, at least 12.
    pub size: usize,
    /// Spacing.
    pub pace: Pace,
    /// When to stop.
    pub limit: Limit,
    /// Bursts, if any.
    pub burst: Option<Burst>,
    /// IP TTL (multicast TTL for multicast destinations; hop limit for IPv6).
    pub ttl: Option<u32>,
    /// Sleep until this long before a send, then spin.
    pub spin_ns: u64,
    /// Per-packet CSV log.
    pub log: Option<PathBuf>,
    /// After the last send, wait this long for echoes; `None`: no echo collection.
    pub echo_wait_ns: Option<u64>,
    /// Requested send buffer (SO_SNDBUFFORCE, then SO_SNDBUF), or the kernel default.
    pub sndbuf: Option<usize>,
    /// Per-echo CSV log (with `echo_wait_ns`): one row per echo, so round trips are known
    /// per packet and, on a multicast group, per receiver.
    pub echo_log: Option<PathBuf>,
    /// Burst id of the first burst; later bursts count up from it (wrapping at 2^16), so
    /// successive runs into one receiver keep their bursts apart.
    pub first_burst: u16,
    /// Time echoes by the kernel's receive time (`SO_TIMESTAMPNS`) instead of the read.
    pub kernel_times: bool,
    /// Send whole frames from a packet ring on an interface instead of through the UDP
    /// socket (`--ring`).
    pub ring: Option<RingOut>,
}

/// Where `--ring` sends: the interface whose transmit ring takes the frames, and the
/// destination MAC they carry (the sender does not resolve one: a MAC that is not the
/// receiving host's has its IP stack drop the frames on arrival, where a packet-ring
/// receiver still counts them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RingOut {
    /// Interface in this namespace.
    pub interface: String,
    /// Destination MAC of every frame.
    pub dst_mac: Mac,
}

impl SendConfig {
    fn ipv6(&self) -> bool {
        self.to.is_ipv6()
    }

    /// Bytes of one datagram on the wire.
    pub fn wire_bytes(&self) -> u64 {
        wire::wire_bytes(self.size, self.ipv6())
    }

    /// Checks every parameter and returns the schedule; all problems are reported together.
    pub fn schedule(&self) -> Result<Schedule, ProbeError> {
        let mut problems = Vec::new();
        let max = wire::max_payload(self.ipv6());
        if self.size < HEADER_LEN {
            problems.push(format!(
                "--size {} is below the {HEADER_LEN}-byte probe header; use --size {HEADER_LEN} or more.",
                self.size
            ));
        } else if self.size > max {
            problems.push(format!(
                "--size {} exceeds the largest UDP payload ({max} bytes).",
                self.size
            ));
        }
        let positive = |v: f64| v.is_finite() && v > 0.0;
        let interval_ns = match self.pace {
            Pace::RateBps(r) if !positive(r) => {
                problems.push(format!(
                    "--rate {r} must be a positive number of bits per second."
                ));
                0.0
            }
            Pace::RateBps(r) => self.wire_bytes() as f64 * 8.0 * 1e9 / r,
            Pace::Pps(p) if !positive(p) => {
                problems.push(format!(
                    "--pps {p} must be a positive number of packets per second."
                ));
                0.0
            }
            Pace::Pps(p) => 1e9 / p,
            Pace::IntervalS(s) if !positive(s) => {
                problems.push(format!(
                    "--interval {s} must be a positive number of seconds."
                ));
                0.0
            }
            Pace::IntervalS(s) => s * 1e9,
            Pace::BackToBack if self.burst.is_none() => {
                problems.push(
                    "give one of --rate, --pps or --interval (only --burst may go without)."
                        .to_string(),
                );
                0.0
            }
            Pace::BackToBack => 0.0,
        };
        match self.limit {
            Limit::Count(0) => problems.push("--count must be at least 1.".to_string()),
            Limit::Duration(0) => problems.push("--duration must be positive.".to_string()),
            _ => {}
        }
        if let Some(b) = self.burst {
            if b.packets == 0 {
                problems.push("--burst must be at least 1 packet.".to_string());
            }
        }
        if self.echo_log.is_some() && self.echo_wait_ns.is_none() {
            problems.push("--echo-log needs --echo-wait (how long to collect echoes).".to_string());
        }
        if let Some(ttl) = self.ttl {
            if ttl == 0 || ttl > 255 {
                problems.push(format!("--ttl {ttl} must be between 1 and 255."));
            }
        }
        if let Some(bind) = self.bind {
            if bind.is_ipv6() != self.ipv6() {
                problems.push(format!(
                    "--bind {bind} and --to {} are of different IP versions.",
                    self.to
                ));
            }
        }
        if self.ring.is_some() {
            if self.ipv6() {
                problems.push("--ring sends IPv4 only; give --to an IPv4 address.".to_string());
            }
            if self.echo_wait_ns.is_some() {
                problems.push(
                    "--echo-wait needs the UDP socket (echoes come back to it); drop --ring."
                        .to_string(),
                );
            }
            if self.size > RING_MAX_PAYLOAD {
                problems.push(format!(
                    "--ring sends one frame per datagram: --size {} exceeds its {RING_MAX_PAYLOAD} bytes.",
                    self.size
                ));
            }
        }
        if self.to.port() == 0 || self.to.ip().is_unspecified() {
            problems.push(format!(
                "--to {} needs a destination address and a non-zero port.",
                self.to
            ));
        }
        if problems.is_empty() {
            Ok(Schedule {
                interval_ns,
                burst: self.burst,
                limit: self.limit,
            })
        } else {
            Err(ProbeError::Usage(problems.join(" ")))
        }
    }

    /// One line for humans: where to, what size on the wire, how fast.
    pub fn describe(&self, schedule: &Schedule) -> String {
        let frame = wire::describe(self.size, self.ipv6());
        let pace = if schedule.interval_ns > 0.0 {
            let pps = 1e9 / schedule.interval_ns;
            format!(
                "interval {:.3} µs = {:.1} packets/s = {:.6} Mb/s on the wire",
                schedule.interval_ns / 1e3,
                pps,
                pps * self.wire_bytes() as f64 * 8.0 / 1e6
            )
        } else {
            "back to back".to_string()
        };
        let burst = match schedule.burst {
            Some(b) => format!(
                ", bursts of {} with {:.6} s gaps",
                b.packets,
                b.gap_ns as f64 / 1e9
            ),
            None => String::new(),
        };
        let via = match &self.ring {
            Some(r) => format!(" from a packet ring on {}", r.interface),
            None => String::new(),
        };
        format!("sending to {}{via}: {frame}; {pace}{burst}", self.to)
    }
}

/// What was planned.
#[derive(Debug, Clone, Serialize)]
pub struct Planned {
    /// Spacing of datagrams (inside bursts), ns.
    pub interval_ns: f64,
    /// Datagrams per second (inside bursts); `None` when back to back.
    pub pps: Option<f64>,
    /// On-the-wire bits per second (inside bursts); `None` when back to back.
    pub wire_rate_bps: Option<f64>,
    /// Datagrams per burst.
    pub burst_packets: Option<u32>,
    /// Silence between bursts, ns.
    pub burst_gap_ns: Option<u64>,
}

/// Round trips measured from echoed datagrams.
#[derive(Debug, Clone, Serialize)]
pub struct EchoSummary {
    /// Echoes received (valid probe datagrams, duplicates included).
    pub received: u64,
    /// Sent sequence numbers never echoed back (lost either way, or refused by the kernel).
    pub lost: u64,
    /// Echoes of a sequence number already echoed.
    pub duplicates: u64,
    /// Echoes that arrived after one with a higher sequence number.
    pub reordered: u64,
    /// Round-trip time: echo arrival minus the timestamp in the header.
    pub rtt: Distribution,
}

/// The sender's JSON summary.
#[derive(Debug, Clone, Serialize)]
pub struct SendSummary {
    /// Always "send".
    pub role: &'static str,
    /// Destination.
    pub to: String,
    /// Local address the datagrams left from.
    pub local: String,
    /// UDP payload bytes per datagram.
    pub payload_bytes: usize,
    /// Bytes per datagram on the wire (what `--rate` paces).
    pub wire_bytes: u64,
    /// The plan.
    pub planned: Planned,
    /// Datagrams the sender tried to send (= sequence numbers used).
    pub packets_attempted: u64,
    /// Datagrams the kernel accepted.
    pub packets_sent: u64,
    /// Payload bytes the kernel accepted.
    pub bytes_sent: u64,
    /// Datagrams the kernel refused.
    pub send_errors: u64,
    /// Refusals by errno name (ENOBUFS, ENETUNREACH, ...).
    pub send_errors_by_kind: BTreeMap<String, u64>,
    /// `CLOCK_MONOTONIC` ns of the first send.
    pub first_send_ns: Option<u64>,
    /// `CLOCK_MONOTONIC` ns of the last send.
    pub last_send_ns: Option<u64>,
    /// Datagrams per second accepted, over first to last send: (sent − 1) / span.
    pub achieved_pps: Option<f64>,
    /// On-the-wire bits per second accepted, over the same span.
    pub achieved_wire_rate_bps: Option<f64>,
    /// Payload bits per second accepted, over the same span.
    pub achieved_payload_rate_bps: Option<f64>,
    /// How late each send started against its planned time.
    pub lateness: Distribution,
    /// Send buffer the kernel granted (as it reports it, doubled).
    pub sndbuf_bytes: usize,
    /// The interface whose packet ring sent the frames (`--ring`), or none: the UDP socket.
    pub ring_interface: Option<String>,
    /// User and system CPU seconds the sender used (the whole run, setup included).
    pub cpu_user_s: f64,
    /// See `cpu_user_s`.
    pub cpu_system_s: f64,
    /// Round trips, with `--echo-wait`.
    pub echo: Option<EchoSummary>,
    /// True when SIGINT/SIGTERM ended the run early.
    pub interrupted: bool,
}

/// Name of an errno for counting send errors.
fn errno_name(e: &io::Error) -> String {
    let name = match e.raw_os_error() {
        Some(libc::ENOBUFS) => "ENOBUFS",
        Some(libc::EAGAIN) => "EAGAIN",
        Some(libc::ECONNREFUSED) => "ECONNREFUSED",
        Some(libc::EHOSTUNREACH) => "EHOSTUNREACH",
        Some(libc::ENETUNREACH) => "ENETUNREACH",
        Some(libc::ENETDOWN) => "ENETDOWN",
        Some(libc::EHOSTDOWN) => "EHOSTDOWN",
        Some(libc::EPERM) => "EPERM",
        Some(libc::EINTR) => "EINTR",
        Some(libc::ENOMEM) => "ENOMEM",
        Some(n) => return format!("errno {n}"),
        None => return e.kind().to_string(),
    };
    name.to_string()
}

/// Errors that refuse one datagram but may pass the next; anything else ends the run.
fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(
            libc::ENOBUFS
                | libc::EAGAIN
                | libc::ECONNREFUSED
                | libc::EHOSTUNREACH
                | libc::ENETUNREACH
                | libc::ENETDOWN
                | libc::EHOSTDOWN
                | libc::EPERM
                | libc::EINTR
                | libc::ENOMEM
        )
    )
}

/// Receive buffer requested for echoes, so a burst of echoes is not dropped at the sender.
const ECHO_RCVBUF: usize = 8 << 20;

fn open_socket(cfg: &SendConfig) -> Result<Socket, ProbeError> {
    let sock = Socket::new(
        Domain::for_address(cfg.to),
        Type::DGRAM,
        Some(Protocol::UDP),
    )
    .map_err(|e| ProbeError::io("creating a UDP socket", e))?;
    let local_ip = cfg.bind.unwrap_or(if cfg.ipv6() {
        IpAddr::V6(Ipv6Addr::UNSPECIFIED)
    } else {
        IpAddr::V4(Ipv4Addr::UNSPECIFIED)
    });
    sock.bind(&SockAddr::from(SocketAddr::new(local_ip, 0)))
        .map_err(|e| {
            ProbeError::Usage(format!(
                "cannot send from {local_ip}: {e}; give --bind an address of this host (or namespace)."
            ))
        })?;
    let opt = |what: &str, r: io::Result<()>| r.map_err(|e| ProbeError::io(what.to_string(), e));
    match (cfg.to.ip(), cfg.bind) {
        (IpAddr::V4(g), bind) if g.is_multicast() => {
            opt(
                "setting IP_MULTICAST_TTL",
                sock.set_multicast_ttl_v4(cfg.ttl.unwrap_or(1)),
            )?;
            opt(
                "setting IP_MULTICAST_LOOP",
                sock.set_multicast_loop_v4(true),
            )?;
            if let Some(IpAddr::V4(ifaddr)) = bind {
                opt("setting IP_MULTICAST_IF", sock.set_multicast_if_v4(&ifaddr))?;
            }
        }
        (IpAddr::V6(g), _) if g.is_multicast() => {
            opt(
                "setting IPV6_MULTICAST_HOPS",
                sock.set_multicast_hops_v6(cfg.ttl.unwrap_or(1)),
            )?;
        }
        (IpAddr::V4(_), _) => {
            opt("setting SO_BROADCAST", sock.set_broadcast(true))?;
            if let Some(ttl) = cfg.ttl {
                opt("setting IP_TTL", sock.set_ttl_v4(ttl))?;
            }
        }
        (IpAddr::V6(_), _) => {
            if let Some(ttl) = cfg.ttl {
                opt("setting IPV6_UNICAST_HOPS", sock.set_unicast_hops_v6(ttl))?;
            }
        }
    }
    if cfg.echo_wait_ns.is_some() {
        if os::force_recv_buffer(&sock, ECHO_RCVBUF).is_err() {
            opt("setting SO_RCVBUF", sock.set_recv_buffer_size(ECHO_RCVBUF))?;
        }
        if cfg.kernel_times {
            opt(
                "setting SO_TIMESTAMPNS",
                os::enable_kernel_timestamps(&sock),
            )?;
        }
    }
    if let Some(bytes) = cfg.sndbuf {
        if os::force_send_buffer(&sock, bytes).is_err() {
            opt("setting SO_SNDBUF", sock.set_send_buffer_size(bytes))?;
        }
    }
    if cfg.ring.is_some() {
        // The ring's frames come from the address the routes would send from (and the
        // socket's port): connecting picks it.
        sock.connect(&SockAddr::from(cfg.to))
            .map_err(|e| ProbeError::Usage(format!("cannot send to {}: {e}.", cfg.to)))?;
    }
    Ok(sock)
}

/// One echo as the collector kept it.
#[derive(Debug, Clone, Copy)]
struct Echo {
    seq: u32,
    burst: u16,
    send_ns: u64,
    echo_ns: u64,
    from: Option<SocketAddr>,
}

impl Echo {
    fn rtt_ns(&self) -> u64 {
        header::delay_ns(self.send_ns, self.echo_ns)
    }
}

/// Collects echoes on a clone of the sending socket until `deadline` (ns, set once sending
/// ends; `u64::MAX` until then) passes.
fn spawn_echo_collector(
    sock: Socket,
    deadline: Arc<AtomicU64>,
    stop: &'static AtomicBool,
) -> thread::JoinHandle<Vec<Echo>> {
    thread::spawn(move || {
        let mut got = Vec::new();
        let mut buf = vec![0u8; 65_536];
        let _ = sock.set_read_timeout(Some(Duration::from_millis(20)));
        loop {
            match os::recv_with_drops(&sock, &mut buf) {
                Ok(r) => {
                    // The kernel's receive time when asked for, as the receiver's (`recv`).
                    let now = r.kernel_ns.unwrap_or_else(os::monotonic_ns);
                    if let Ok(h) = Header::decode(&buf[..r.len]) {
                        got.push(Echo {
                            seq: h.seq,
                            burst: h.burst,
                            send_ns: h.send_ns,
                            echo_ns: now,
                            from: r.from,
                        });
                    }
                }
                Err(e) if os::nothing_yet(&e) => {}
                Err(_) => break,
            }
            if os::monotonic_ns() >= deadline.load(Ordering::Relaxed)
                || stop.load(Ordering::Relaxed)
            {
                break;
            }
        }
        got
    })
}

/// One row of the sender's log.
struct LogRow {
    seq: u32,
    burst: u16,
    planned_ns: u64,
    send_ns: u64,
    error: Option<String>,
}

fn write_log(path: &PathBuf, size: usize, rows: &[LogRow]) -> Result<(), ProbeError> {
    let what = || format!("writing the log {}", path.display());
    let file = std::fs::File::create(path).map_err(|e| ProbeError::io(what(), e))?;
    let mut w = io::BufWriter::new(file);
    let mut write = || -> io::Result<()> {
        writeln!(w, "seq,burst,planned_ns,send_ns,size,error")?;
        for r in rows {
            writeln!(
                w,
                "{},{},{},{},{},{}",
                r.seq,
                r.burst,
                r.planned_ns & header::TIMESTAMP_MASK,
                r.send_ns & header::TIMESTAMP_MASK,
                size,
                r.error.as_deref().unwrap_or("")
            )?;
        }
        w.flush()
    };
    write().map_err(|e| ProbeError::io(what(), e))
}

/// Writes `seq,burst,send_ns,echo_ns,rtt_ns,from`: times are `CLOCK_MONOTONIC` ns modulo
/// 2^48 (the header's domain), `from` the echoing receiver's address.
fn write_echo_log(path: &PathBuf, echoes: &[Echo]) -> Result<(), ProbeError> {
    let what = || format!("writing the echo log {}", path.display());
    let file = std::fs::File::create(path).map_err(|e| ProbeError::io(what(), e))?;
    let mut w = io::BufWriter::new(file);
    let mut write = || -> io::Result<()> {
        writeln!(w, "seq,burst,send_ns,echo_ns,rtt_ns,from")?;
        for e in echoes {
            let from = e.from.map_or_else(String::new, |a| a.to_string());
            writeln!(
                w,
                "{},{},{},{},{},{}",
                e.seq,
                e.burst,
                e.send_ns,
                e.echo_ns & header::TIMESTAMP_MASK,
                e.rtt_ns(),
                from
            )?;
        }
        w.flush()
    };
    write().map_err(|e| ProbeError::io(what(), e))
}

/// Largest `--size` with `--ring`: one 1 514-byte frame, as a 1 500-byte MTU allows.
pub const RING_MAX_PAYLOAD: usize = 1472;

/// With `--ring`, datagrams are written into the ring as they fall due and handed to the
/// kernel together; between batches the sender sleeps at least this long (no spinning: the
/// generator must leave the cores to what it measures). At 150 000 datagrams/s a batch is
/// some 15 frames, bursts a link's queue (50 frames by default) takes whole.
const RING_BATCH_NS: u64 = 100_000;

/// Time between now and the first planned send, so the first packet is not late just
/// because the loop started.
const START_LEAD_NS: u64 = 1_000_000;

/// What a send loop did, datagram by datagram.
struct Sending {
    attempted: u64,
    sent: u64,
    errors: u64,
    by_kind: BTreeMap<String, u64>,
    first_send: Option<u64>,
    last_send: Option<u64>,
    lateness: Vec<u64>,
    log: Vec<LogRow>,
    logging: bool,
    interrupted: bool,
}

impl Sending {
    fn new(schedule: &Schedule, logging: bool) -> Sending {
        let expected = match schedule.limit {
            Limit::Count(n) => n,
            Limit::Duration(_) => 1 << 16,
        };
        Sending {
            attempted: 0,
            sent: 0,
            errors: 0,
            by_kind: BTreeMap::new(),
            first_send: None,
            last_send: None,
            lateness: Vec::with_capacity(expected.min(1 << 22) as usize),
            log: Vec::new(),
            logging,
            interrupted: false,
        }
    }

    /// Datagram `seq` of `burst`, planned at `planned`, went (or failed with `error`) at
    /// `send_ns`.
    fn record(&mut self, seq: u32, burst: u16, planned: u64, send_ns: u64, error: Option<String>) {
        self.attempted += 1;
        self.lateness.push(send_ns.saturating_sub(planned));
        match &error {
            None => {
                self.sent += 1;
                self.first_send.get_or_insert(send_ns);
                self.last_send = Some(send_ns);
            }
            Some(name) => {
                self.errors += 1;
                *self.by_kind.entry(name.clone()).or_insert(0) += 1;
            }
        }
        if self.logging {
            self.log.push(LogRow {
                seq,
                burst,
                planned_ns: planned,
                send_ns,
                error,
            });
        }
    }
}

/// Sends each datagram through the UDP socket at its planned time (sleep, then spin).
fn send_from_socket(
    cfg: &SendConfig,
    schedule: &Schedule,
    sock: &Socket,
    sending: &mut Sending,
    stop: &'static AtomicBool,
) -> Result<(), ProbeError> {
    let mut clock = MonotonicClock;
    let mut buf = vec![0u8; cfg.size];
    let dest = SockAddr::from(cfg.to);
    let start = clock.now_ns() + START_LEAD_NS;
    let mut k = 0u64;
    while let Some(slot) = schedule.slot(k) {
        let planned = start + slot.offset_ns;
        if stop.load(Ordering::Relaxed)
            || pacing::wait_until(&mut clock, planned, cfg.spin_ns, stop).is_none()
        {
            sending.interrupted = true;
            break;
        }
        let send_ns = clock.now_ns();
        let burst = slot.burst.wrapping_add(cfg.first_burst);
        Header::new(k as u32, burst, send_ns)
            .encode(&mut buf)
            .expect("size was validated to hold the header");
        let error = match sock.send_to(&buf, &dest) {
            Ok(_) => None,
            Err(e) if is_transient(&e) => Some(errno_name(&e)),
            Err(e) => return Err(ProbeError::io(format!("sending to {}", cfg.to), e)),
        };
        sending.record(k as u32, burst, planned, send_ns, error);
        k += 1;
    }
    Ok(())
}

/// Sends whole frames from a transmit ring on `out.interface`: every datagram due is
/// written into the ring (its header stamped as it is written), then the batch goes with
/// one `send`; the sender sleeps until the next is due, at least [`RING_BATCH_NS`]. The
/// frames come from the UDP socket's address and port (it is connected to the destination,
/// so the address is the one the routes choose), which stays open meanwhile.
fn send_from_ring(
    cfg: &SendConfig,
    schedule: &Schedule,
    sock: &Socket,
    out: &RingOut,
    sending: &mut Sending,
    stop: &'static AtomicBool,
) -> Result<(), ProbeError> {
    let on = |what: &str| format!("{what} on {}", out.interface);
    let local = match sock.local_addr().ok().and_then(|a| a.as_socket()) {
        Some(SocketAddr::V4(a)) if !a.ip().is_unspecified() => a,
        _ => {
            return Err(ProbeError::Usage(format!(
                "--ring found no IPv4 address to send from; give --bind an address of {}.",
                out.interface
            )))
        }
    };
    let SocketAddr::V4(to) = cfg.to else {
        unreachable!("--ring with IPv6 is refused by the schedule")
    };
    let src_mac = interface_mac(&out.interface)
        .map_err(|e| ProbeError::ring(&on("reading the MAC address"), e))?;
    let template = Template::new(
        src_mac,
        out.dst_mac,
        local,
        to,
        cfg.size,
        cfg.ttl.unwrap_or(64) as u8,
    );
    let mut ring = TxRing::open(&out.interface)
        .map_err(|e| ProbeError::ring(&on("opening a packet ring"), e))?;
    let mut clock = MonotonicClock;
    let start = clock.now_ns() + START_LEAD_NS;
    let mut batch: Vec<(u32, u16, u64, u64)> = Vec::new();
    let mut k = 0u64;
    while let Some(slot) = schedule.slot(k) {
        let planned = start + slot.offset_ns;
        if stop.load(Ordering::Relaxed)
            || pacing::wait_until(&mut clock, planned, 0, stop).is_none()
        {
            sending.interrupted = true;
            break;
        }
        let now = clock.now_ns();
        // Everything due by now (as much as the ring holds), then one send.
        while let Some(slot) = schedule.slot(k) {
            let planned = start + slot.offset_ns;
            if planned > now || !ring.has_room() {
                break;
            }
            let send_ns = clock.now_ns();
            let burst = slot.burst.wrapping_add(cfg.first_burst);
            ring.push(template.bytes(), |frame| {
                Header::new(k as u32, burst, send_ns)
                    .encode(&mut frame[PAYLOAD_AT..])
                    .expect("size was validated to hold the header");
            });
            batch.push((k as u32, burst, planned, send_ns));
            k += 1;
        }
        let refused = ring.flush();
        let taken = batch.len() - refused;
        for (i, (seq, burst, planned, send_ns)) in batch.drain(..).enumerate() {
            let error = (i >= taken).then(|| "ring refused".to_string());
            sending.record(seq, burst, planned, send_ns, error);
        }
        let next = now + RING_BATCH_NS;
        if schedule.slot(k).is_some_and(|s| start + s.offset_ns < next) {
            os::sleep_until_monotonic_ns(next);
        }
    }
    Ok(())
}

/// Sends as configured and returns the summary. `stop` (see [`os::stop_on_signals`]) ends
/// the run early; the summary says so.
pub fn run(cfg: &SendConfig, stop: &'static AtomicBool) -> Result<SendSummary, ProbeError> {
    let schedule = cfg.schedule()?;
    let sock = open_socket(cfg)?;
    let local = sock
        .local_addr()
        .ok()
        .and_then(|a| a.as_socket())
        .map_or_else(|| "?".to_string(), |a| a.to_string());
    let sndbuf_bytes = sock.send_buffer_size().unwrap_or(0);
    let _ = os::set_timer_slack_ns(1);

    let echo_deadline = Arc::new(AtomicU64::new(u64::MAX));
    let echo_thread = match cfg.echo_wait_ns {
        Some(_) => {
            let clone = sock
                .try_clone()
                .map_err(|e| ProbeError::io("cloning the socket for echoes", e))?;
            Some(spawn_echo_collector(clone, echo_deadline.clone(), stop))
        }
        None => None,
    };

    let mut sending = Sending::new(&schedule, cfg.log.is_some());
    match &cfg.ring {
        Some(out) => send_from_ring(cfg, &schedule, &sock, out, &mut sending, stop)?,
        None => send_from_socket(cfg, &schedule, &sock, &mut sending, stop)?,
    }
    let Sending {
        attempted,
        sent,
        errors,
        by_kind,
        first_send,
        last_send,
        mut lateness,
        log,
        interrupted,
        logging: _,
    } = sending;

    let echo = match (echo_thread, cfg.echo_wait_ns) {
        (Some(handle), Some(wait)) => {
            echo_deadline.store(os::monotonic_ns() + wait, Ordering::Relaxed);
            let got = handle.join().unwrap_or_default();
            if let Some(path) = &cfg.echo_log {
                write_echo_log(path, &got)?;
            }
            let seq = sequence_stats(got.iter().map(|e| e.seq), Some(attempted));
            let mut rtts: Vec<u64> = got.iter().map(Echo::rtt_ns).collect();
            Some(EchoSummary {
                received: got.len() as u64,
                lost: seq.lost,
                duplicates: seq.duplicates,
                reordered: seq.reordered,
                rtt: Distribution::of(&mut rtts),
            })
        }
        _ => None,
    };

    if let Some(path) = &cfg.log {
        write_log(path, cfg.size, &log)?;
    }

    let wire_bytes = cfg.wire_bytes();
    let span_s = match (first_send, last_send) {
        (Some(a), Some(b)) if b > a && sent > 1 => Some((b - a) as f64 / 1e9),
        _ => None,
    };
    let achieved_pps = span_s.map(|s| (sent - 1) as f64 / s);
    let interval = schedule.interval_ns;
    let (cpu_user_s, cpu_system_s) = os::cpu_seconds();
    Ok(SendSummary {
        role: "send",
        to: cfg.to.to_string(),
        local,
        payload_bytes: cfg.size,
        wire_bytes,
        planned: Planned {
            interval_ns: interval,
            pps: (interval > 0.0).then(|| 1e9 / interval),
            wire_rate_bps: (interval > 0.0).then(|| wire_bytes as f64 * 8.0 * 1e9 / interval),
            burst_packets: schedule.burst.map(|b| b.packets),
            burst_gap_ns: schedule.burst.map(|b| b.gap_ns),
        },
        packets_attempted: attempted,
        packets_sent: sent,
        bytes_sent: sent * cfg.size as u64,
        send_errors: errors,
        send_errors_by_kind: by_kind,
        first_send_ns: first_send,
        last_send_ns: last_send,
        achieved_pps,
        achieved_wire_rate_bps: achieved_pps.map(|p| p * wire_bytes as f64 * 8.0),
        achieved_payload_rate_bps: achieved_pps.map(|p| p * cfg.size as f64 * 8.0),
        lateness: Distribution::of(&mut lateness),
        sndbuf_bytes,
        ring_interface: cfg.ring.as_ref().map(|r| r.interface.clone()),
        cpu_user_s,
        cpu_system_s,
        echo,
        interrupted,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> SendConfig {
        SendConfig {
            to: "127.0.0.1:5001".parse().unwrap(),
            bind: None,
            size: 1000,
            pace: Pace::RateBps(8_528_000.0),
            limit: Limit::Count(10),
            burst: None,
            ttl: None,
            spin_ns: 50_000,
            log: None,
            echo_wait_ns: None,
            sndbuf: None,
            echo_log: None,
            first_burst: 0,
            kernel_times: false,
            ring: None,
        }
    }

    #[test]
    fn rate_paces_wire_frames() {
        // 1000 B payload = 1066 B = 8528 bits on the wire; 8.528 Mb/s is 1000 packets/s.
        let s = cfg().schedule().unwrap();
        assert!((s.interval_ns - 1_000_000.0).abs() < 1e-6);
    }

    #[test]
    fn pps_and_interval() {
        let mut c = cfg();
        c.pace = Pace::Pps(20_000.0);
        assert_eq!(c.schedule().unwrap().interval_ns, 50_000.0);
        c.pace = Pace::IntervalS(0.002);
        assert_eq!(c.schedule().unwrap().interval_ns, 2_000_000.0);
    }

    #[test]
    fn bad_parameters_are_all_reported() {
        let mut c = cfg();
        c.size = 11;
        c.pace = Pace::RateBps(0.0);
        c.ttl = Some(0);
        let msg = c.schedule().unwrap_err().to_string();
        assert!(
            msg.contains("--size 11 is below the 12-byte probe header"),
            "{msg}"
        );
        assert!(msg.contains("--rate 0 must be a positive"), "{msg}");
        assert!(msg.contains("--ttl 0"), "{msg}");
        assert_eq!(c.schedule().unwrap_err().exit_code(), 2);
    }

    #[test]
    fn back_to_back_only_with_bursts() {
        let mut c = cfg();
        c.pace = Pace::BackToBack;
        assert!(c.schedule().is_err());
        c.burst = Some(Burst {
            packets: 100,
            gap_ns: 1_000_000,
        });
        assert_eq!(c.schedule().unwrap().interval_ns, 0.0);
    }

    #[test]
    fn echo_log_needs_echo_wait() {
        let mut c = cfg();
        c.echo_log = Some(PathBuf::from("/tmp/x.csv"));
        let msg = c.schedule().unwrap_err().to_string();
        assert!(msg.contains("--echo-log needs --echo-wait"), "{msg}");
        c.echo_wait_ns = Some(1);
        assert!(c.schedule().is_ok());
    }

    #[test]
    fn oversized_payload_is_refused() {
        let mut c = cfg();
        c.size = 65_508;
        assert!(c.schedule().unwrap_err().to_string().contains("65507"));
    }
}
