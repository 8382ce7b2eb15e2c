//! What the analysis hands on: one JSON report (captures, transfers with their figures) and,
//! when asked, CSV tables of every transfer's time series and samples.
//!
//! Tables (every `t_s` is seconds since the transfer's `start_unix_s`):
//! - `series.csv`: transfer, t_s (bin start), bytes (new payload sent), acked_bytes,
//!   retransmits, rtt_samples, rtt_mean_s, idle_s, rwnd_bytes
//! - `rtt.csv`: transfer, t_s, rtt_s (Karn samples)
//! - `spacing.csv`: transfer, t_s, spacing_s (one per counted reception)
//! - `window.csv`: transfer, t_s, rwnd_bytes (each change of the advertised window)
//!
//! Rows are written as the samples arise (series rows when a connection is dropped), so the
//! rows of different transfers interleave; each transfer's own rows stay in time order.
//! Transfers are numbered by capture, connection and direction, which is known only at the
//! end; rows are written with a provisional number (the order of first payloads) and, only
//! when the two orders differ, the tables are rewritten once with the final numbers.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::capture::CaptureInfo;
use crate::error::AnalyzeError;
use crate::flows::{Connection, Flows};
use crate::half::{Half, Row, Table};
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
    /// Most connections held in memory at once (open, or closed and not yet quiet): what
    /// the analyzer's memory grows with.
    pub peak_open_connections: usize,
    /// Segments of connections already closed and dropped (a FIN or ACK sent again long
    /// after the close), not used.
    pub late_segments: u64,
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

/// Appends the decimal digits of `n`.
fn push_u64(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

/// Appends nanoseconds as seconds with nine decimals, from integers: what `{:.9}` of
/// `ns as f64 / 1e9` gives (for any duration under 48 days, where an f64 still resolves
/// 0.2 ns), at a fraction of the cost of formatting a float to a set precision, which was
/// most of the time spent writing the sample tables.
fn push_seconds(out: &mut Vec<u8>, ns: i64) {
    if ns < 0 {
        out.push(b'-');
    }
    let ns = ns.unsigned_abs();
    push_u64(out, ns / 1_000_000_000);
    out.push(b'.');
    let frac = ns % 1_000_000_000;
    let start = out.len();
    push_u64(out, frac + 1_000_000_000); // "1" and nine digits, leading zeros kept
    out.remove(start);
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
        connections: flows.connections,
        peak_open_connections: flows.peak_open,
        late_segments: flows.late_segments,
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
        rtt: h.rtt.stats(),
        spacing: h.spacing.stats(),
        idle: h.idle.stats(),
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
    /// One row being built.
    line: Vec<u8>,
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
            line: Vec::with_capacity(64),
        })
    }

    fn error(&self, e: std::io::Error) -> AnalyzeError {
        AnalyzeError::io(format!("writing tables in {}", self.dir.display()), e)
    }

    /// Writes samples of transfer `id` whose connection began at `t0` (ns).
    fn rows(&mut self, id: usize, t0: i64, rows: &[Row]) -> std::io::Result<()> {
        for r in rows {
            let (w, seconds) = match r.table {
                Table::Rtt => (&mut self.rtt, true),
                Table::Spacing => (&mut self.spacing, true),
                Table::Window => (&mut self.window, false),
                Table::Idle => continue,
            };
            // Digits by hand: `write!` spent more time than the whole analysis.
            let line = &mut self.line;
            line.clear();
            push_u64(line, id as u64);
            line.push(b',');
            push_seconds(line, r.t_ns - t0);
            line.push(b',');
            if seconds {
                push_seconds(line, r.value);
            } else {
                push_u64(line, r.value.unsigned_abs());
            }
            line.push(b'\n');
            w.write_all(line)?;
        }
        Ok(())
    }

    /// Writes the per-bin rows of transfer `id` (direction `side` of `c`).
    fn series(
        &mut self,
        id: usize,
        c: &Connection,
        side: usize,
        bin_ns: i64,
    ) -> std::io::Result<()> {
        for b in &c.halves[side].bins {
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
        Ok(())
    }

    /// Rewrites the transfer numbers of every table: `new[provisional]` is the final one.
    fn renumber(&self, new: &[usize]) -> std::io::Result<()> {
        for name in ["series.csv", "rtt.csv", "spacing.csv", "window.csv"] {
            let path = self.dir.join(name);
            let tmp = self.dir.join(format!(".{name}.renumber"));
            let mut r = BufReader::with_capacity(1 << 20, File::open(&path)?);
            let mut w = BufWriter::with_capacity(1 << 20, File::create(&tmp)?);
            let mut line = String::new();
            r.read_line(&mut line)?;
            w.write_all(line.as_bytes())?; // the header
            loop {
                line.clear();
                if r.read_line(&mut line)? == 0 {
                    break;
                }
                let (id, rest) = line.split_once(',').unwrap_or((line.as_str(), "\n"));
                match id.parse::<usize>().ok().and_then(|i| new.get(i)) {
                    Some(n) => write!(w, "{n},{rest}")?,
                    None => w.write_all(line.as_bytes())?,
                }
            }
            w.flush()?;
            drop(w);
            std::fs::rename(&tmp, &path)?;
        }
        Ok(())
    }

    /// Flushes every table.
    fn finish(mut self) -> Result<Tables, AnalyzeError> {
        for w in [
            &mut self.series,
            &mut self.rtt,
            &mut self.spacing,
            &mut self.window,
        ] {
            w.flush()
                .map_err(|e| AnalyzeError::io("flushing tables", e))?;
        }
        Ok(self)
    }
}

/// Where the analysis of the captures goes as it streams: the CSV rows (when asked for) and
/// the summary of each transfer once its connection is done.
pub struct Output {
    tables: Option<Tables>,
    capture: usize,
    /// (capture, connection, direction) and the summary, numbered provisionally.
    transfers: Vec<((usize, usize, usize), TransferSummary)>,
    next: usize,
    error: Option<std::io::Error>,
}

impl Output {
    /// Creates the tables in `tables` when given.
    pub fn new(tables: Option<&Path>) -> Result<Output, AnalyzeError> {
        Ok(Output {
            tables: tables.map(Tables::create).transpose()?,
            capture: 0,
            transfers: Vec::new(),
            next: 0,
            error: None,
        })
    }

    /// What follows belongs to capture `index`.
    pub fn start_capture(&mut self, index: usize) {
        self.capture = index;
    }

    /// A provisional number for a direction that just carried its first payload.
    pub fn new_transfer(&mut self) -> usize {
        self.next += 1;
        self.next - 1
    }

    /// Writes samples of transfer `id` (provisional), whose connection began at `t0` ns.
    pub fn rows(&mut self, id: usize, t0: i64, rows: &[Row]) {
        if let (Some(t), None) = (self.tables.as_mut(), self.error.as_ref()) {
            self.error = t.rows(id, t0, rows).err();
        }
    }

    /// Summarizes the transfers of connection `c` and writes their series: it is done.
    pub fn connection_done(&mut self, c: &Connection, bin_ns: i64) {
        for side in 0..2 {
            let Some(id) = c.halves[side].transfer else {
                continue;
            };
            self.transfers.push((
                (self.capture, c.id, side),
                transfer_summary((id, self.capture, c.id), c, side),
            ));
            if let (Some(t), None) = (self.tables.as_mut(), self.error.as_ref()) {
                self.error = t.series(id, c, side, bin_ns).err();
            }
        }
    }

    /// The transfers, numbered by capture, connection and direction; the tables flushed and
    /// renumbered to match.
    pub fn finish(mut self) -> Result<Vec<TransferSummary>, AnalyzeError> {
        self.transfers.sort_unstable_by_key(|t| t.0);
        let mut new = vec![0; self.transfers.len()];
        for (i, (_, t)) in self.transfers.iter_mut().enumerate() {
            new[t.transfer] = i;
            t.transfer = i;
        }
        if let Some(t) = self.tables {
            if let Some(e) = self.error {
                return Err(t.error(e));
            }
            let t = t.finish()?;
            if new.iter().enumerate().any(|(i, &n)| i != n) {
                t.renumber(&new).map_err(|e| t.error(e))?;
            }
        }
        Ok(self.transfers.into_iter().map(|t| t.1).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::push_seconds;

    struct Seconds(i64);

    impl std::fmt::Display for Seconds {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            let mut out = Vec::new();
            push_seconds(&mut out, self.0);
            f.write_str(std::str::from_utf8(&out).unwrap())
        }
    }

    #[test]
    fn seconds_print_as_the_float_did() {
        let mut x: u64 = 88_172_645_463_325_252;
        for ns in [
            0,
            1,
            -1,
            999_999_999,
            1_000_000_000,
            -1_500_000_000,
            86_400_000_000_123,
        ] {
            assert_eq!(Seconds(ns).to_string(), format!("{:.9}", ns as f64 / 1e9));
        }
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let ns = (x % 4_000_000_000_000_000) as i64 - 1_000_000_000_000; // -1000 s to 46 days
            assert_eq!(
                Seconds(ns).to_string(),
                format!("{:.9}", ns as f64 / 1e9),
                "{ns}"
            );
        }
    }
}
