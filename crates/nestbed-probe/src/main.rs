//! `nestbed-probe`: the command line. Parses arguments into a [`SendConfig`] or
//! [`RecvConfig`], runs it, prints ONE JSON object on stdout and human messages on stderr.
//! Exit codes: 0 done, 2 a usage error (one sentence on stderr), 1 a system failure.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{ArgGroup, Args, Parser, Subcommand};
use nestbed_probe::frame::{parse_mac, Mac};
use nestbed_probe::os;
use nestbed_probe::pacing::{Burst, Limit};
use nestbed_probe::recv::{Receiver, RecvConfig, DEFAULT_RCVBUF};
use nestbed_probe::send::{self, Pace, RingOut, SendConfig};
use nestbed_probe::ProbeError;
use serde::Serialize;

/// Paced UDP sender and receiver with a 12-byte probe header (sequence number, burst id,
/// send timestamp). Stdout carries exactly one JSON summary; messages go to stderr.
#[derive(Parser, Debug)]
#[command(name = "nestbed-probe", version)]
struct Cli {
    /// Accepted for uniformity with nestbed's commands: stdout is always one JSON object.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Send probe datagrams on an absolute schedule.
    Send(SendArgs),
    /// Receive probe datagrams, optionally echo them, and summarize.
    Recv(RecvArgs),
}

/// Text after `send --help`: what `--rate` counts and how sends are timed.
const SEND_AFTER_HELP: &str = "\
--rate counts frames as they occupy an Ethernet wire: payload + 8 UDP + 20 IP (40 for IPv6)
+ 14 Ethernet, padded to 60, + 24 for FCS, preamble, start delimiter and inter-frame gap
(--size 12 is 84 bytes on the wire, --size 1472 is 1538). Datagram k is due at
start + k * interval (bursts: interval inside a burst, then --gap after its last datagram);
late datagrams are sent at once, none are skipped. Stdout: one JSON summary.";

#[derive(Args, Debug)]
#[command(after_help = SEND_AFTER_HELP)]
#[command(group(ArgGroup::new("pace").args(["rate", "pps", "interval"])))]
#[command(group(ArgGroup::new("limit").args(["count", "duration"]).required(true)))]
struct SendArgs {
    /// Destination IP:PORT, unicast or multicast.
    #[arg(long, value_name = "IP:PORT")]
    to: SocketAddr,
    /// Local address to send from; for multicast also the outgoing interface.
    #[arg(long, value_name = "IP")]
    bind: Option<IpAddr>,
    /// UDP payload bytes, at least 12 (the header); the rest is zero-filled.
    #[arg(long, value_name = "BYTES")]
    size: usize,
    /// On-the-wire bits per second (suffixes k, M, G: 1.544M).
    #[arg(long, value_name = "BITS_PER_S", value_parser = parse_rate)]
    rate: Option<f64>,
    /// Datagrams per second.
    #[arg(long, value_name = "N")]
    pps: Option<f64>,
    /// Seconds between datagrams.
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds)]
    interval: Option<f64>,
    /// Number of datagrams to send.
    #[arg(long, value_name = "N")]
    count: Option<u64>,
    /// Send for this many seconds.
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds)]
    duration: Option<f64>,
    /// Datagrams per burst (paced by --rate/--pps/--interval if given, else back to back).
    #[arg(long, value_name = "N", requires = "gap")]
    burst: Option<u32>,
    /// Silence after each burst's last datagram, seconds.
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds, requires = "burst")]
    gap: Option<f64>,
    /// IP TTL / hop limit (multicast TTL for multicast destinations, default 1 there).
    #[arg(long, value_name = "N")]
    ttl: Option<u32>,
    /// Sleep until this many µs before each send, then spin.
    #[arg(long, value_name = "US", default_value_t = 50)]
    spin_us: u64,
    /// Per-packet CSV log: seq,burst,planned_ns,send_ns,size,error.
    #[arg(long, value_name = "FILE.csv")]
    log: Option<PathBuf>,
    /// Collect echoes (from `recv --echo`) for round-trip times, waiting this long after the
    /// last send.
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds)]
    echo_wait: Option<f64>,
    /// Send buffer to request, bytes (SO_SNDBUFFORCE when permitted, else SO_SNDBUF).
    #[arg(long, value_name = "BYTES")]
    sndbuf: Option<usize>,
    /// Per-echo CSV log (needs --echo-wait): seq,burst,send_ns,echo_ns,rtt_ns,from.
    #[arg(long, value_name = "FILE.csv")]
    echo_log: Option<PathBuf>,
    /// Burst id of the first burst (later ones count up from it), so several runs into one
    /// receiver keep their bursts apart in its log.
    #[arg(long, value_name = "ID", default_value_t = 0)]
    first_burst: u16,
    /// Time echoes by when they reached this host (the kernel's receive time) rather than
    /// when this process read them: round trips without this host's wait to be scheduled.
    #[arg(long)]
    kernel_times: bool,
    /// Send whole Ethernet frames from a packet ring (PACKET_TX_RING) on this interface, a
    /// batch per system call, instead of through the UDP stack (IPv4, root; the frames come
    /// from the address and port the UDP socket would use).
    #[arg(long, value_name = "IFACE", requires = "dst_mac")]
    ring: Option<String>,
    /// Destination MAC of the frames --ring sends (a MAC other than the receiver's has its IP
    /// stack drop them on arrival, where `recv --ring` still counts them).
    #[arg(long, value_name = "MAC", value_parser = parse_mac, requires = "ring")]
    dst_mac: Option<Mac>,
}

#[derive(Args, Debug)]
struct RecvArgs {
    /// Local IP:PORT to receive on (port 0: any free port, printed on stderr).
    #[arg(long, value_name = "IP:PORT")]
    bind: SocketAddr,
    /// Multicast group to join, on the interface of --bind's IP (0.0.0.0: the default one).
    #[arg(long, value_name = "MCAST_ADDR")]
    group: Option<IpAddr>,
    /// Send every datagram back to its sender unchanged.
    #[arg(long)]
    echo: bool,
    /// Stop after this many seconds.
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds)]
    duration: Option<f64>,
    /// Stop after this many probe datagrams.
    #[arg(long, value_name = "N")]
    count: Option<u64>,
    /// Stop after this many seconds without a datagram (counted from the start until the
    /// first one arrives).
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds)]
    idle: Option<f64>,
    /// Count loss against N datagrams (sequence numbers 0..N) instead of the highest seen.
    #[arg(long, value_name = "N")]
    expect: Option<u64>,
    /// Per-packet CSV log: seq,burst,send_ns,recv_ns,size,delay_ns.
    #[arg(long, value_name = "FILE.csv")]
    log: Option<PathBuf>,
    /// Receive buffer to request, bytes (SO_RCVBUFFORCE when permitted, else SO_RCVBUF);
    /// 0 keeps the kernel's default (net.core.rmem_default).
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_RCVBUF)]
    rcvbuf: usize,
    /// Time arrivals by when they reached this host (the kernel's receive time) rather than
    /// when this process read them: the network's delay, without the wait in the socket
    /// and for this process to be scheduled (application to application is the default).
    #[arg(long)]
    kernel_times: bool,
    /// Count the datagrams to --bind in the frames reaching this interface, read from a
    /// packet ring (PACKET_RX_RING) with the kernel's receive times, instead of receiving
    /// them on a UDP socket: frames the IP stack drops (another MAC) are counted too, and
    /// the receiver costs no UDP stack work (IPv4, root; no --echo or --group).
    #[arg(long, value_name = "IFACE")]
    ring: Option<String>,
}

/// Parses a non-negative number of seconds.
fn parse_seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("{s:?} is not a non-negative number of seconds")),
    }
}

/// Parses bits per second with an optional SI suffix: 56k, 1.544M, 1G.
fn parse_rate(s: &str) -> Result<f64, String> {
    let (digits, factor) = match s.chars().last() {
        Some('k' | 'K') => (&s[..s.len() - 1], 1e3),
        Some('M') => (&s[..s.len() - 1], 1e6),
        Some('G') => (&s[..s.len() - 1], 1e9),
        _ => (s, 1.0),
    };
    match digits.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v * factor),
        _ => Err(format!(
            "{s:?} is not a rate in bits per second (e.g. 1000000, 56k, 1.544M, 1G)"
        )),
    }
}

fn ns(seconds: f64) -> u64 {
    (seconds * 1e9).round() as u64
}

fn send_config(a: SendArgs) -> SendConfig {
    let pace = match (a.rate, a.pps, a.interval) {
        (Some(r), _, _) => Pace::RateBps(r),
        (_, Some(p), _) => Pace::Pps(p),
        (_, _, Some(i)) => Pace::IntervalS(i),
        _ => Pace::BackToBack,
    };
    let limit = match (a.count, a.duration) {
        (Some(n), _) => Limit::Count(n),
        (_, Some(d)) => Limit::Duration(ns(d)),
        _ => unreachable!("clap requires --count or --duration"),
    };
    SendConfig {
        to: a.to,
        bind: a.bind,
        size: a.size,
        pace,
        limit,
        burst: a.burst.map(|packets| Burst {
            packets,
            gap_ns: ns(a.gap.unwrap_or(0.0)),
        }),
        ttl: a.ttl,
        spin_ns: a.spin_us.saturating_mul(1_000),
        log: a.log,
        echo_wait_ns: a.echo_wait.map(ns),
        sndbuf: a.sndbuf,
        echo_log: a.echo_log,
        first_burst: a.first_burst,
        kernel_times: a.kernel_times,
        ring: a
            .ring
            .zip(a.dst_mac)
            .map(|(interface, dst_mac)| RingOut { interface, dst_mac }),
    }
}

fn recv_config(a: RecvArgs) -> RecvConfig {
    RecvConfig {
        bind: a.bind,
        group: a.group,
        echo: a.echo,
        duration_ns: a.duration.map(ns),
        count: a.count,
        idle_ns: a.idle.map(ns),
        expect: a.expect,
        log: a.log,
        rcvbuf: a.rcvbuf,
        kernel_times: a.kernel_times,
        ring: a.ring,
    }
}

fn to_json(value: &impl Serialize) -> String {
    serde_json::to_string(value).expect("summaries serialize")
}

fn run(command: Command) -> Result<String, ProbeError> {
    let stop = os::stop_on_signals();
    match command {
        Command::Send(args) => {
            let cfg = send_config(args);
            let schedule = cfg.schedule()?;
            eprintln!("nestbed-probe send: {}", cfg.describe(&schedule));
            let summary = send::run(&cfg, stop)?;
            eprintln!(
                "nestbed-probe send: {} of {} datagrams sent, {} refused by the kernel, lateness p99 {} ns",
                summary.packets_sent,
                summary.packets_attempted,
                summary.send_errors,
                summary.lateness.p99_ns.unwrap_or(0)
            );
            Ok(to_json(&summary))
        }
        Command::Recv(args) => {
            let receiver = Receiver::open(recv_config(args))?;
            eprintln!("nestbed-probe recv: listening on {}", receiver.local_addr());
            let summary = receiver.run(stop)?;
            eprintln!(
                "nestbed-probe recv: {} datagrams, {} lost of {}, {} duplicates, {} reordered",
                summary.packets,
                summary.lost,
                summary.expected,
                summary.duplicates,
                summary.reordered
            );
            Ok(to_json(&summary))
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let _ = cli.json;
    match run(cli.command) {
        Ok(json) => {
            println!("{json}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("nestbed-probe: {e}");
            ExitCode::from(e.exit_code() as u8)
        }
    }
}
