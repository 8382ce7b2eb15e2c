//! What the analysis hands on: one JSON report (captures, transfers with their figures) and,
//! when asked, CSV tables of every transfer's time series and samples.
//!
//! Tables (every `t_s` is seconds since the transfer's `start_unix_s`):
//! - `series.csv`: transfer, t_s (bin start), bytes (new payload sent), acked_bytes,
//!   retransmits, rtt_samples, rtt_mean_s, idle_s, rwnd_bytes
//! - `rtt.csv`: transfer, t_s, rtt_s (Karn samples)
//! - `spacing.csv`: transfer, t_s, spacing_s (one per counted reception)
//! - `window.csv`: transfer, t_s, rwnd_bytes (each change of the advertised window)

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::capture::CaptureInfo;
use crate::error::AnalyzeError;
use crate::flows::{Connection, Flows};
use crate::half::Half;
use crate::stats::Stats;

/// Version of the report's format; bumped when a field changes meaning.
pub const FORMAT_VERSION: u32 = 1;

/// The whole analysis.
#[derive(Debug, Serialize)]
pub struct Report {
    /// [`FORMAT_VERSION`].
    pub version: u32,
    /// Width of the time-series bins, seconds.
    pub bin_s: f64,
    /// One entry per input file.
    pub captures: Vec<CaptureSummary>,
    /// One entry per direction of a connection that carried payload.
    pub transfers: Vec<TransferSummary>,
}

/// One capture file.
#[derive(Debug, Serialize)]
pub struct CaptureSummary {
    /// Index of the capture (order of the arguments).
    pub capture: usize,
    /// Path as given.
    pub file: String,
    /// "pcap" or "pcapng".
    pub format: &'static str,
    /// LINKTYPE_* numbers of its records.
    pub linktypes: Vec<u32>,
    /// Records read.
    pub records: u64,
    /// Records used as TCP segments.
    pub tcp_segments: u64,
    /// Segments whose payload the snapshot length cut (still used).
    pub truncated_payloads: u64,
    /// Records not used, by reason.
    pub unusable: BTreeMap<&'static str, u64>,
    /// Sum of `unusable`.
    pub unusable_total: u64,
    /// Time of the first and last record.
    pub first_unix_s: Option<f64>,
    /// Time of the last record.
    pub last_unix_s: Option<f64>,
    /// TCP connections seen.
    pub connections: usize,
}

/// Window figures of a transfer.
#[derive(Debug, Serialize)]
pub struct WindowSummary {
    /// Both SYNs were seen, so window scaling is known.
    pub scale_known: bool,
    /// The receiver's window-scale shift (0 when not negotiated).
    pub receiver_scale: Option<u8>,
    /// Largest and smallest window the receiver advertised, bytes (unscaled if unknown).
    pub max_bytes: Option<u64>,
    /// Smallest advertised window, bytes.
    pub min_bytes: Option<u64>,
    /// Largest amount of data in flight, bytes.
    pub inflight_max_bytes: u64,
}

/// The three-way handshake, when captured.
#[derive(Debug, Serialize)]
pub struct Handshake {
    /// The client's SYN.
    pub syn_unix_s: f64,
    /// The server's SYN-ACK.
    pub synack_unix_s: Option<f64>,
    /// The client's ACK of the SYN-ACK.
    pub ack_unix_s: Option<f64>,
    /// This transfer's sender is the client (it sent the SYN).
    pub sender_is_client: bool,
}

/// One direction of a connection that carried payload.
#[derive(Debug, Serialize)]
pub struct TransferSummary {
    /// Index over all captures.
    pub transfer: usize,
    /// Capture it was seen in.
    pub capture: usize,
    /// Connection index within the capture.
    pub connection: usize,
    /// Data sender's address.
    pub src: String,
    /// Data sender's port.
    pub sport: u16,
    /// Data receiver's address.
    pub dst: String,
    /// Data receiver's port.
    pub dport: u16,
    /// 4 or 6.
    pub ip_version: u8,
    /// Sender's initial (or first seen) sequence number: with the 4-tuple, the same transfer
    /// in another capture has the same one.
    pub first_seq: u32,
    /// Origin of the time series: the connection's first segment.
    pub start_unix_s: f64,
    /// First payload, relative to `start_unix_s`.
    pub first_data_s: f64,
    /// Last payload or last ACK advancing, relative to `start_unix_s`.
    pub end_s: f64,
    /// `end_s - first_data_s`.
    pub duration_s: f64,
    /// SYN, FIN and RST seen.
    pub syn_seen: bool,
    /// FIN from the sender seen.
    pub fin_seen: bool,
    /// RST seen on the connection.
    pub rst_seen: bool,
    /// Segments with payload.
    pub data_segments: u64,
    /// Payload bytes, retransmissions included.
    pub payload_bytes: u64,
    /// Highest minus lowest sequence number of payload.
    pub unique_bytes: u64,
    /// Payload bytes the receiver acknowledged (0 when its ACKs are not in the capture).
    pub acked_bytes: u64,
    /// Segments carrying already-sent bytes.
    pub retransmitted_segments: u64,
    /// Already-sent bytes sent again.
    pub retransmitted_bytes: u64,
    /// `retransmitted_segments / data_segments`.
    pub loss_rate: f64,
    /// Segments that skipped ahead of the highest byte seen.
    pub seq_holes: u64,
    /// ACKs repeating the cumulative acknowledgment.
    pub dup_acks: u64,
    /// Goodput: acked (or, without ACKs, unique) bytes over `duration_s`.
    pub throughput_bytes_per_s: Option<f64>,
    /// Largest payload of a segment: p of equation (1).
    pub mss_bytes: u32,
    /// IP packet size of that segment: P of equation (1).
    pub packet_bytes: u32,
    /// Receiver window figures.
    pub window: WindowSummary,
    /// RTT samples (Karn).
    pub rtt: Stats,
    /// Packet spacing samples.
    pub spacing: Stats,
    /// Idle time before sends (the longest spacing before each).
    pub idle: Stats,
    /// Receptions followed by a retransmission instead of new data.
    pub spacing_skipped_retransmit: u64,
    /// The handshake, when captured.
    pub handshake: Option<Handshake>,
}

fn unix_s(ns: i64) -> f64 {
    ns as f64 / 1e9
}

fn rel_s(ns: i64, t0: i64) -> f64 {
    (ns - t0) as f64 / 1e9
}

/// Summarizes one capture.
pub fn capture_summary(
    index: usize,
    file: &Path,
    info: &CaptureInfo,
    flows: &Flows,
) -> CaptureSummary {
    let mut unusable = flows.unusable.clone();
    unusable.merge(&info.unreadable);
    CaptureSummary {
        capture: index,
        file: file.display().to_string(),
        format: info.format,
        linktypes: info.linktypes.iter().copied().collect(),
        records: info.records,
        tcp_segments: flows.segments,
        truncated_payloads: flows.truncated_payloads,
        unusable_total: unusable.total(),
        unusable: unusable.to_map(),
        first_unix_s: flows.first_ns.map(unix_s),
        last_unix_s: flows.last_ns.map(unix_s),
        connections: flows.connections.len(),
    }
}

/// Summarizes direction `side` of connection `c` (`transfer` is its index over all captures).
pub fn transfer_summary(
    ids: (usize, usize, usize),
    c: &Connection,
    side: usize,
) -> TransferSummary {
    let (transfer, capture, connection) = ids;
    let h: &Half = &c.halves[side];
    let (src, dst) = if side == 0 { (c.a, c.b) } else { (c.b, c.a) };
    let first = h.first_data_ns.unwrap_or(c.t0_ns);
    let end = h
        .last_ack_ns
        .map_or(h.last_data_ns, |a| a.max(h.last_data_ns));
    let duration = (end - first) as f64 / 1e9;
    let delivered = if h.last_ack_ns.is_some() {
        h.acked_bytes
    } else {
        h.unique_bytes()
    };
    let handshake = c.handshake[0].map(|syn| Handshake {
        syn_unix_s: unix_s(syn),
        synack_unix_s: c.handshake[1].map(unix_s),
        ack_unix_s: c.handshake[2].map(unix_s),
        sender_is_client: c.client == Some(side),
    });
    let scale = c.scale(1 - side);
    TransferSummary {
        transfer,
        capture,
        connection,
        src: src.0.to_string(),
        sport: src.1,
        dst: dst.0.to_string(),
        dport: dst.1,
        ip_version: if src.0.is_ipv4() { 4 } else { 6 },
        first_seq: h.first_seq.unwrap_or(0),
        start_unix_s: unix_s(c.t0_ns),
        first_data_s: rel_s(first, c.t0_ns),
        end_s: rel_s(end, c.t0_ns),
        duration_s: duration,
        syn_seen: h.syn_seen,
        fin_seen: h.fin_seen,
        rst_seen: c.rst_seen,
        data_segments: h.data_segments,
        payload_bytes: h.payload_bytes,
        unique_bytes: h.unique_bytes(),
        acked_bytes: h.acked_bytes,
        retransmitted_segments: h.retrans_segments,
        retransmitted_bytes: h.retrans_bytes,
        loss_rate: h.retrans_segments as f64 / h.data_segments.max(1) as f64,
        seq_holes: h.seq_holes,
        dup_acks: h.dup_acks,
        throughput_bytes_per_s: (duration > 0.0).then(|| delivered as f64 / duration),
        mss_bytes: h.mss,
        packet_bytes: h.packet_size,
        window: WindowSummary {
            scale_known: scale.is_some(),
            receiver_scale: scale,
            max_bytes: h.rwnd_max,
            min_bytes: h.rwnd_min,
            inflight_max_bytes: h.inflight_max,
        },
        rtt: Stats::of_ns(h.rtt.iter().map(|s| s.1)),
        spacing: Stats::of_ns(h.spacing.iter().map(|s| s.1)),
        idle: Stats::of_ns(h.idle.iter().map(|s| s.1)),
        spacing_skipped_retransmit: h.spacing_skipped_retransmit,
        handshake,
    }
}

/// The four CSV tables, written as transfers are summarized.
pub struct Tables {
    dir: PathBuf,
    series: BufWriter<File>,
    rtt: BufWriter<File>,
    spacing: BufWriter<File>,
    window: BufWriter<File>,
}

impl Tables {
    /// Creates `dir` (if needed) and the four tables with their headers.
    pub fn create(dir: &Path) -> Result<Tables, AnalyzeError> {
        std::fs::create_dir_all(dir)
            .map_err(|e| AnalyzeError::io(format!("creating {}", dir.display()), e))?;
        let open = |name: &str, header: &str| -> Result<BufWriter<File>, AnalyzeError> {
            let path = dir.join(name);
            let what = || format!("writing {}", path.display());
            let mut w = BufWriter::with_capacity(
                1 << 20,
                File::create(&path).map_err(|e| AnalyzeError::io(what(), e))?,
            );
            writeln!(w, "{header}").map_err(|e| AnalyzeError::io(what(), e))?;
            Ok(w)
        };
        Ok(Tables {
            dir: dir.to_path_buf(),
            series: open(
                "series.csv",
                "transfer,t_s,bytes,acked_bytes,retransmits,rtt_samples,rtt_mean_s,idle_s,rwnd_bytes",
            )?,
            rtt: open("rtt.csv", "transfer,t_s,rtt_s")?,
            spacing: open("spacing.csv", "transfer,t_s,spacing_s")?,
            window: open("window.csv", "transfer,t_s,rwnd_bytes")?,
        })
    }

    fn error(&self, e: std::io::Error) -> AnalyzeError {
        AnalyzeError::io(format!("writing tables in {}", self.dir.display()), e)
    }

    /// Writes the rows of one transfer (direction `side` of `c`).
    pub fn write(
        &mut self,
        transfer: usize,
        c: &Connection,
        side: usize,
        bin_ns: i64,
    ) -> Result<(), AnalyzeError> {
        self.rows(transfer, c, side, bin_ns)
            .map_err(|e| self.error(e))
    }

    fn rows(&mut self, id: usize, c: &Connection, side: usize, bin_ns: i64) -> std::io::Result<()> {
        let h = &c.halves[side];
        let t0 = c.t0_ns;
        for b in &h.bins {
            let rtt_mean = if b.rtt_samples > 0 {
                format!("{:.9}", b.rtt_sum_ns as f64 / b.rtt_samples as f64 / 1e9)
            } else {
                String::new()
            };
            let rwnd = b.rwnd_bytes.map(|w| w.to_string()).unwrap_or_default();
            writeln!(
                self.series,
                "{id},{:.6},{},{},{},{},{rtt_mean},{:.9},{rwnd}",
                (b.index * bin_ns) as f64 / 1e9,
                b.bytes,
                b.acked_bytes,
                b.retransmits,
                b.rtt_samples,
                b.idle_ns as f64 / 1e9,
            )?;
        }
        for &(t, v) in &h.rtt {
            writeln!(self.rtt, "{id},{:.9},{:.9}", rel_s(t, t0), v as f64 / 1e9)?;
        }
        for &(t, v) in &h.spacing {
            writeln!(
                self.spacing,
                "{id},{:.9},{:.9}",
                rel_s(t, t0),
                v as f64 / 1e9
            )?;
        }
        for &(t, v) in &h.window {
            writeln!(self.window, "{id},{:.9},{v}", rel_s(t, t0))?;
        }
        Ok(())
    }

    /// Flushes every table.
    pub fn finish(mut self) -> Result<(), AnalyzeError> {
        for w in [
            &mut self.series,
            &mut self.rtt,
            &mut self.spacing,
            &mut self.window,
        ] {
            w.flush()
                .map_err(|e| AnalyzeError::io("flushing tables", e))?;
        }
        Ok(())
    }
}
