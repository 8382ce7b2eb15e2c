//! One direction of a TCP connection as seen at the capture point: the data its sender sends
//! and the acknowledgments and windows its receiver sends back.
//!
//! Definitions (docs/analyze.md explains them):
//! - **Retransmission**: a segment carrying bytes at or below the highest sequence number
//!   already sent.
//! - **RTT sample** (Karn's rule): an ACK that advances the cumulative acknowledgment to
//!   exactly the end of a segment gives `t_ack - t_send` of that segment, unless any segment
//!   it acknowledges was ever retransmitted, or any byte at or below the ACK was sent again
//!   after that segment (as tcptrace: the ACK may answer that later transmission, e.g. a
//!   duplicate ACK that a spurious retransmission releases). Those samples are ambiguous.
//! - **Packet spacing** (the anomaly paper, §5.4): the idle time between the reception of a
//!   packet and the sending of the next one. A reception counts when it lets the sender send
//!   (it acknowledges new data or moves the window's right edge, and leaves at least one MSS
//!   of window open); the next send must be new data. Each such reception gives one sample.
//!   The **idle time** before a send is the longest of them: the time since the first
//!   reception after the previous send (these intervals never overlap, so they add up).

use std::collections::VecDeque;

use crate::decode::{flags, Segment};
use crate::stats::Dist;

/// Sequence numbers unwrapped into a 64-bit space starting at the first one seen.
#[derive(Clone, Copy, Debug, Default)]
struct SeqSpace {
    base: Option<u32>,
    last_raw: u32,
    last_rel: i64,
}

impl SeqSpace {
    fn rel(&mut self, raw: u32) -> i64 {
        if self.base.is_none() {
            self.base = Some(raw);
            self.last_raw = raw;
            self.last_rel = 0;
            return 0;
        }
        let rel = self.last_rel + i64::from(raw.wrapping_sub(self.last_raw) as i32);
        if rel > self.last_rel {
            self.last_raw = raw;
            self.last_rel = rel;
        }
        rel
    }
}

/// A range of sequence space sent once (and maybe again), not yet acknowledged.
#[derive(Clone, Copy, Debug)]
struct Sent {
    start: i64,
    end: i64,
    t_ns: i64,
    retransmitted: bool,
}

/// The tables a [`Row`] belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Table {
    /// An RTT sample (`rtt.csv`).
    Rtt,
    /// A spacing sample (`spacing.csv`).
    Spacing,
    /// An idle time (no table: only the statistics and the bins have it).
    Idle,
    /// A change of the advertised window (`window.csv`), bytes.
    Window,
}

/// One sample as it arises, at `t_ns`: a duration in ns, or a window in bytes. Rows wait in
/// [`Half::rows`] only until the connection table hands them to the CSV writers (after each
/// segment), so memory does not grow with the capture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Row {
    /// Which table.
    pub table: Table,
    /// Time of the sample, ns.
    pub t_ns: i64,
    /// The sample.
    pub value: i64,
}

/// Per-bin counters of one direction.
#[derive(Clone, Copy, Debug, Default)]
pub struct Bin {
    /// Bin number: `floor((t - start) / bin)`.
    pub index: i64,
    /// New payload bytes sent.
    pub bytes: u64,
    /// Payload bytes newly acknowledged.
    pub acked_bytes: u64,
    /// Retransmitted segments.
    pub retransmits: u64,
    /// RTT samples and their sum, ns.
    pub rtt_samples: u64,
    /// Sum of RTT samples, ns.
    pub rtt_sum_ns: i64,
    /// Sender idle time ending in this bin, ns.
    pub idle_ns: i64,
    /// Receive window advertised last in this bin, bytes.
    pub rwnd_bytes: Option<u64>,
}

/// The state and measurements of one direction.
#[derive(Debug, Default)]
pub struct Half {
    seq: SeqSpace,
    /// Raw sequence number of the SYN, or of the first segment seen.
    pub first_seq: Option<u32>,
    /// A SYN was seen from this direction's sender.
    pub syn_seen: bool,
    /// A FIN was seen from this direction's sender.
    pub fin_seen: bool,
    snd_nxt: Option<i64>,
    data_hi: Option<i64>,
    data_lo: Option<i64>,
    /// First and last payload-carrying segment, ns.
    pub first_data_ns: Option<i64>,
    /// Last payload-carrying segment, ns.
    pub last_data_ns: i64,
    /// Segments with payload.
    pub data_segments: u64,
    /// Payload bytes, retransmissions included.
    pub payload_bytes: u64,
    /// Payload bytes sent for the first time.
    pub new_bytes: u64,
    /// Segments that carried already-sent bytes.
    pub retrans_segments: u64,
    /// Already-sent bytes sent again.
    pub retrans_bytes: u64,
    /// Segments that started beyond the highest byte seen so far (lost before the capture
    /// point, or reordered).
    pub seq_holes: u64,
    /// Largest payload of a segment (p of equation (1)) and its IP packet size (P).
    pub mss: u32,
    /// IP packet bytes of the segment with the largest payload.
    pub packet_size: u32,
    outstanding: VecDeque<Sent>,
    /// Retransmissions (t ns, first byte) since the oldest outstanding segment was sent:
    /// the only ones that can make a later sample ambiguous.
    retx: VecDeque<(i64, i64)>,
    snd_una: Option<i64>,
    right_edge: Option<i64>,
    /// Last ACK from the receiver that advanced the cumulative acknowledgment, ns.
    pub last_ack_ns: Option<i64>,
    /// Payload bytes acknowledged.
    pub acked_bytes: u64,
    /// ACKs that acknowledged nothing new and changed nothing.
    pub dup_acks: u64,
    rwnd: Option<u64>,
    /// Largest and smallest window advertised by the receiver, bytes.
    pub rwnd_max: Option<u64>,
    /// Smallest advertised window, bytes.
    pub rwnd_min: Option<u64>,
    /// Largest amount of data in flight (sent, not acknowledged), bytes.
    pub inflight_max: u64,
    /// RTT samples (Karn), ns.
    pub rtt: Dist,
    pending: Vec<i64>,
    /// Spacing samples, ns.
    pub spacing: Dist,
    /// Idle time before sends, ns; per bin, spread over the bins the idle interval spans.
    pub idle: Dist,
    /// Samples not yet written out (only when `keep_rows`): RTT, spacing and idle samples and
    /// window changes, in the order they arose. A direction that has not carried payload yet
    /// keeps its window changes here until it does (they belong to its table then), or until
    /// its connection is dropped.
    pub rows: Vec<Row>,
    /// Whether to record [`Half::rows`] (the tables were asked for).
    pub keep_rows: bool,
    /// Provisional transfer number, given at the first payload (the final numbering, by
    /// connection, is known only at the end of the capture).
    pub transfer: Option<usize>,
    /// Receptions whose next send was a retransmission (recovery, not spacing).
    pub spacing_skipped_retransmit: u64,
    /// Per-bin counters, in time order.
    pub bins: Vec<Bin>,
    /// Origin and width of the bins, ns (width 0: idle time goes to the bin of its send).
    binning: (i64, i64),
}

impl Half {
    /// An empty direction whose bins start at `t0_ns` and are `bin_ns` wide.
    pub fn new(t0_ns: i64, bin_ns: i64) -> Half {
        Half {
            binning: (t0_ns, bin_ns),
            keep_rows: true,
            ..Half::default()
        }
    }

    /// Adds the idle interval [from, to] to the bins it spans, so per-bin idle time lines up
    /// with what happened in each bin (a long stall is not all charged to its last bin).
    fn spread_idle(&mut self, from: i64, to: i64, bin: i64) {
        let (t0, width) = self.binning;
        if width <= 0 {
            self.bin(bin).idle_ns += to - from;
            return;
        }
        let mut a = from.max(t0);
        while a < to {
            let index = (a - t0) / width;
            let b = (t0 + (index + 1) * width).min(to);
            self.bin(index).idle_ns += b - a;
            a = b;
        }
    }

    fn bin(&mut self, index: i64) -> &mut Bin {
        // Records almost always come in time order; a late one goes to its own bin.
        let pos = match self.bins.last() {
            Some(b) if b.index == index => self.bins.len() - 1,
            Some(b) if b.index < index => {
                self.bins.push(Bin {
                    index,
                    ..Bin::default()
                });
                self.bins.len() - 1
            }
            None => {
                self.bins.push(Bin {
                    index,
                    ..Bin::default()
                });
                0
            }
            Some(_) => match self.bins.binary_search_by_key(&index, |b| b.index) {
                Ok(i) => i,
                Err(i) => {
                    self.bins.insert(
                        i,
                        Bin {
                            index,
                            ..Bin::default()
                        },
                    );
                    i
                }
            },
        };
        &mut self.bins[pos]
    }

    /// A segment from this direction's sender, at `t_ns`, in bin `bin`.
    pub fn on_send(&mut self, t_ns: i64, seg: &Segment, bin: i64) {
        let syn = seg.has(flags::SYN);
        let rel = self.seq.rel(seg.seq);
        if self.first_seq.is_none() || (syn && !self.syn_seen) {
            self.first_seq = Some(seg.seq);
        }
        self.syn_seen |= syn;
        let start = rel + i64::from(syn);
        let end = start + i64::from(seg.payload_len);
        if seg.payload_len > 0 {
            self.on_data(t_ns, seg, start, end, bin);
        } else if syn {
            self.snd_nxt = Some(self.snd_nxt.map_or(start, |n| n.max(start)));
        }
        if seg.has(flags::FIN) {
            self.fin_seen = true;
            self.snd_nxt = Some(self.snd_nxt.map_or(end + 1, |n| n.max(end + 1)));
        }
    }

    fn on_data(&mut self, t_ns: i64, seg: &Segment, start: i64, end: i64, bin: i64) {
        self.data_segments += 1;
        self.payload_bytes += u64::from(seg.payload_len);
        self.first_data_ns.get_or_insert(t_ns);
        self.last_data_ns = self.last_data_ns.max(t_ns);
        if seg.payload_len > self.mss {
            self.mss = seg.payload_len;
            self.packet_size = seg.ip_len;
        }
        self.data_lo = Some(self.data_lo.map_or(start, |lo| lo.min(start)));
        self.data_hi = Some(self.data_hi.map_or(end, |hi| hi.max(end)));
        let nxt = self.snd_nxt.unwrap_or(start);
        let retransmission = start < nxt;
        if retransmission {
            self.retrans_segments += 1;
            self.retrans_bytes += (end.min(nxt) - start) as u64;
            self.bin(bin).retransmits += 1;
            self.retx.push_back((t_ns, start));
            self.mark_retransmitted(start, end.min(nxt));
            // The wait before a retransmission is loss recovery, not the sender's spacing.
            self.spacing_skipped_retransmit += self.pending.len() as u64;
            self.pending.clear();
        } else if self.snd_nxt.is_some() && start > nxt {
            self.seq_holes += 1;
        }
        if end > nxt {
            let from = start.max(nxt);
            let fresh = (end - from) as u64;
            self.new_bytes += fresh;
            self.bin(bin).bytes += fresh;
            self.outstanding.push_back(Sent {
                start: from,
                end,
                t_ns,
                retransmitted: retransmission,
            });
            self.snd_nxt = Some(end);
            if let Some(una) = self.snd_una {
                self.inflight_max = self.inflight_max.max((end - una).max(0) as u64);
            }
            if !retransmission && !self.pending.is_empty() {
                let first = self.pending[0];
                for i in 0..self.pending.len() {
                    let spacing = (t_ns - self.pending[i]).max(0);
                    self.sample(Table::Spacing, t_ns, spacing);
                }
                let idle = (t_ns - first).max(0);
                self.sample(Table::Idle, t_ns, idle);
                self.spread_idle(t_ns - idle, t_ns, bin);
                self.pending.clear();
            }
        }
    }

    fn mark_retransmitted(&mut self, start: i64, end: i64) {
        let first = self.outstanding.partition_point(|s| s.end <= start);
        for s in self.outstanding.iter_mut().skip(first) {
            if s.start >= end {
                break;
            }
            s.retransmitted = true;
        }
    }

    /// A segment from this direction's receiver carrying an ACK, at `t_ns`, in bin `bin`;
    /// `scale` is the receiver's window-scale shift (0 when not negotiated), `None` when the
    /// handshake was not captured: windows are then kept unscaled and not used to decide
    /// whether a reception let the sender send.
    pub fn on_ack(&mut self, t_ns: i64, seg: &Segment, scale: Option<u8>, bin: i64) {
        let known = scale.is_some();
        let scale = scale.unwrap_or(0);
        let ack = self.seq.rel(seg.ack);
        let syn = seg.has(flags::SYN);
        // The window of a SYN is never scaled (RFC 7323 §2.2); it bounds the first flight
        // but is left out of the window's figures, which describe the transfer.
        let rwnd = u64::from(seg.window) << if syn { 0 } else { scale.min(14) };
        if !syn {
            if self.rwnd != Some(rwnd) {
                self.rwnd = Some(rwnd);
                if self.keep_rows {
                    self.rows.push(Row {
                        table: Table::Window,
                        t_ns,
                        value: rwnd as i64,
                    });
                }
            }
            self.rwnd_max = Some(self.rwnd_max.map_or(rwnd, |m| m.max(rwnd)));
            self.rwnd_min = Some(self.rwnd_min.map_or(rwnd, |m| m.min(rwnd)));
            self.bin(bin).rwnd_bytes = Some(rwnd);
        }
        let edge = ack + rwnd as i64;
        let Some(una) = self.snd_una else {
            self.snd_una = Some(ack);
            self.right_edge = Some(edge);
            return;
        };
        let advanced = ack > una;
        let widened = self.right_edge.is_some_and(|e| edge > e);
        if advanced {
            self.on_advance(t_ns, una, ack, bin);
        } else if ack == una && seg.payload_len == 0 && !widened && !seg.has(flags::FIN) && !syn {
            self.dup_acks += 1;
        }
        if edge > self.right_edge.unwrap_or(edge) || self.right_edge.is_none() {
            self.right_edge = Some(edge);
        }
        if (advanced || widened) && !syn {
            let nxt = self.snd_nxt.unwrap_or(ack);
            let usable = edge - nxt.max(ack);
            if !known || usable >= i64::from(self.mss.max(1)) {
                self.pending.push(t_ns);
            }
        }
    }

    fn on_advance(&mut self, t_ns: i64, una: i64, ack: i64, bin: i64) {
        self.snd_una = Some(ack);
        self.last_ack_ns = Some(t_ns);
        if let (Some(lo), Some(hi)) = (self.data_lo, self.data_hi) {
            let acked = ack.clamp(lo, hi) - una.clamp(lo, hi);
            if acked > 0 {
                self.acked_bytes += acked as u64;
                self.bin(bin).acked_bytes += acked as u64;
            }
        }
        let mut last: Option<Sent> = None;
        let mut ambiguous = false;
        while let Some(s) = self.outstanding.front_mut() {
            if s.end <= ack {
                ambiguous |= s.retransmitted;
                last = self.outstanding.pop_front();
            } else {
                if s.start < ack {
                    s.start = ack; // a partial acknowledgment: no sample from it
                }
                break;
            }
        }
        if let Some(s) = last {
            // Karn: no sample if any byte below this ACK was retransmitted after s was sent
            // (the ACK may answer the retransmission); scanned only for a candidate sample.
            let retx_after = || {
                self.retx
                    .iter()
                    .any(|&(t, start)| start < ack && t > s.t_ns)
            };
            if s.end == ack && !ambiguous && t_ns >= s.t_ns && !retx_after() {
                let rtt = t_ns - s.t_ns;
                self.sample(Table::Rtt, t_ns, rtt);
                let b = self.bin(bin);
                b.rtt_samples += 1;
                b.rtt_sum_ns += rtt;
            }
        }
        // Segments are queued in the order they were first sent, so the front is the oldest:
        // a retransmission before it cannot follow any segment still to be sampled.
        let oldest = self.outstanding.front().map_or(i64::MAX, |s| s.t_ns);
        while self.retx.front().is_some_and(|r| r.0 < oldest) {
            self.retx.pop_front();
        }
    }

    /// Adds a duration sample to its statistics and, when tables are written, to the rows.
    fn sample(&mut self, table: Table, t_ns: i64, value: i64) {
        match table {
            Table::Rtt => self.rtt.add(value),
            Table::Spacing => self.spacing.add(value),
            Table::Idle => self.idle.add(value),
            Table::Window => {}
        }
        if self.keep_rows {
            self.rows.push(Row { table, t_ns, value });
        }
    }

    /// The sender's data and FIN were all acknowledged (or there were none): nothing it sent
    /// can still give a sample.
    pub fn all_acked(&self) -> bool {
        match (self.snd_nxt, self.snd_una) {
            (Some(nxt), Some(una)) => una >= nxt,
            (None, _) => true,
            (Some(_), None) => false,
        }
    }

    /// Highest byte sent minus the first one: the bytes the transfer covered.
    pub fn unique_bytes(&self) -> u64 {
        match (self.data_lo, self.data_hi) {
            (Some(lo), Some(hi)) => (hi - lo).max(0) as u64,
            _ => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    fn seg(seq: u32, ack: u32, len: u32, f: u8, window: u16) -> Segment {
        let ip = IpAddr::V4(Ipv4Addr::LOCALHOST);
        Segment {
            src: ip,
            dst: ip,
            sport: 1,
            dport: 2,
            seq,
            ack,
            flags: f,
            window,
            wscale: None,
            payload_len: len,
            ip_len: len + 40,
            payload_truncated: false,
        }
    }

    const MS: i64 = 1_000_000;

    /// The rows of one table, as (t ns, value).
    fn rows(h: &Half, table: Table) -> Vec<(i64, i64)> {
        h.rows
            .iter()
            .filter(|r| r.table == table)
            .map(|r| (r.t_ns, r.value))
            .collect()
    }

    #[test]
    fn sequence_numbers_unwrap_past_2_32() {
        let mut s = SeqSpace::default();
        assert_eq!(s.rel(u32::MAX - 9), 0);
        assert_eq!(s.rel(5), 15);
        assert_eq!(s.rel(u32::MAX - 4), 5); // an older one stays older
    }

    #[test]
    fn karn_takes_no_sample_from_retransmitted_data() {
        let mut h = Half::new(0, 0);
        h.on_ack(0, &seg(0, 1000, 0, flags::ACK, 60000), Some(0), 0);
        h.on_send(0, &seg(1000, 0, 100, flags::ACK, 0), 0);
        h.on_send(MS, &seg(1100, 0, 100, flags::ACK, 0), 0);
        // Clean sample: the first segment acked 20 ms after it was sent.
        h.on_ack(20 * MS, &seg(0, 1100, 0, flags::ACK, 60000), Some(0), 0);
        assert_eq!(rows(&h, Table::Rtt), vec![(20 * MS, 20 * MS)]);
        // The second segment is retransmitted; its ACK gives no sample.
        h.on_send(200 * MS, &seg(1100, 0, 100, flags::ACK, 0), 0);
        h.on_ack(220 * MS, &seg(0, 1200, 0, flags::ACK, 60000), Some(0), 0);
        assert_eq!(rows(&h, Table::Rtt).len(), 1);
        assert_eq!((h.retrans_segments, h.retrans_bytes), (1, 100));
        assert_eq!(h.acked_bytes, 200);
    }

    #[test]
    fn no_sample_for_a_segment_sent_before_a_later_transmission_below_it() {
        let mut h = Half::new(0, 0);
        h.on_ack(0, &seg(0, 0, 0, flags::ACK, 60000), Some(0), 0);
        h.on_send(0, &seg(0, 0, 100, flags::ACK, 0), 0);
        h.on_send(MS, &seg(100, 0, 100, flags::ACK, 0), 0);
        h.on_send(5 * MS, &seg(0, 0, 100, flags::ACK, 0), 0); // first segment again
        h.on_send(6 * MS, &seg(200, 0, 100, flags::ACK, 0), 0);
        h.on_ack(20 * MS, &seg(0, 100, 0, flags::ACK, 60000), Some(0), 0);
        // Acknowledges only the second segment, but it was sent before the retransmission
        // below it, which this ACK may answer: no sample (tcptrace's rule too).
        h.on_ack(21 * MS, &seg(0, 200, 0, flags::ACK, 60000), Some(0), 0);
        assert!(
            rows(&h, Table::Rtt).is_empty(),
            "{:?}",
            rows(&h, Table::Rtt)
        );
        // The third was sent after the retransmission: its ACK is its own.
        h.on_ack(26 * MS, &seg(0, 300, 0, flags::ACK, 60000), Some(0), 0);
        assert_eq!(rows(&h, Table::Rtt), vec![(26 * MS, 20 * MS)]);
        // A spurious retransmission of acknowledged bytes (it releases a duplicate ACK at
        // the receiver) makes the segments sent before it ambiguous, not those after it.
        h.on_send(28 * MS, &seg(300, 0, 100, flags::ACK, 0), 0);
        h.on_send(30 * MS, &seg(0, 0, 100, flags::ACK, 0), 0);
        h.on_send(31 * MS, &seg(400, 0, 100, flags::ACK, 0), 0);
        h.on_ack(48 * MS, &seg(0, 400, 0, flags::ACK, 60000), Some(0), 0);
        h.on_ack(51 * MS, &seg(0, 500, 0, flags::ACK, 60000), Some(0), 0);
        assert_eq!(
            rows(&h, Table::Rtt),
            vec![(26 * MS, 20 * MS), (51 * MS, 20 * MS)]
        );
        assert_eq!(h.retrans_segments, 2);
    }

    #[test]
    fn spacing_runs_from_each_reception_to_the_next_new_send() {
        let mut h = Half::new(0, 0);
        h.on_ack(0, &seg(0, 0, 0, flags::ACK, 60000), Some(0), 0);
        h.on_send(0, &seg(0, 0, 1000, flags::ACK, 0), 0);
        h.on_send(0, &seg(1000, 0, 1000, flags::ACK, 0), 0);
        h.on_ack(10 * MS, &seg(0, 1000, 0, flags::ACK, 60000), Some(0), 0);
        h.on_ack(11 * MS, &seg(0, 2000, 0, flags::ACK, 60000), Some(0), 0);
        h.on_send(15 * MS, &seg(2000, 0, 1000, flags::ACK, 0), 0);
        assert_eq!(
            rows(&h, Table::Spacing),
            vec![(15 * MS, 5 * MS), (15 * MS, 4 * MS)]
        );
        assert_eq!(rows(&h, Table::Idle), vec![(15 * MS, 5 * MS)]);
    }

    #[test]
    fn idle_time_is_spread_over_the_bins_it_spans() {
        let mut h = Half::new(0, 10 * MS);
        h.on_ack(0, &seg(0, 0, 0, flags::ACK, 60000), Some(0), 0);
        h.on_send(0, &seg(0, 0, 1000, flags::ACK, 0), 0);
        h.on_ack(5 * MS, &seg(0, 1000, 0, flags::ACK, 60000), Some(0), 0);
        h.on_send(27 * MS, &seg(1000, 0, 1000, flags::ACK, 0), 2);
        let idle: Vec<(i64, i64)> = h.bins.iter().map(|b| (b.index, b.idle_ns)).collect();
        assert_eq!(idle, vec![(0, 5 * MS), (1, 10 * MS), (2, 7 * MS)]);
    }

    #[test]
    fn a_closed_window_gives_no_spacing_sample() {
        let mut h = Half::new(0, 0);
        h.on_ack(0, &seg(0, 0, 0, flags::ACK, 2000), Some(0), 0);
        h.on_send(0, &seg(0, 0, 1000, flags::ACK, 0), 0);
        h.on_send(0, &seg(1000, 0, 1000, flags::ACK, 0), 0);
        // Acknowledges everything but advertises no room: the sender may not send.
        h.on_ack(10 * MS, &seg(0, 2000, 0, flags::ACK, 0), Some(0), 0);
        h.on_ack(50 * MS, &seg(0, 2000, 0, flags::ACK, 4000), Some(0), 0);
        h.on_send(51 * MS, &seg(2000, 0, 1000, flags::ACK, 0), 0);
        assert_eq!(rows(&h, Table::Spacing), vec![(51 * MS, MS)]);
    }

    #[test]
    fn without_the_handshake_the_window_does_not_gate_spacing() {
        let mut h = Half::new(0, 0);
        h.on_ack(0, &seg(0, 0, 0, flags::ACK, 500), None, 0);
        h.on_send(0, &seg(0, 0, 1000, flags::ACK, 0), 0);
        h.on_send(0, &seg(1000, 0, 1000, flags::ACK, 0), 0);
        // The unscaled 500 looks closed, but the real scale is unknown.
        h.on_ack(10 * MS, &seg(0, 1000, 0, flags::ACK, 500), None, 0);
        h.on_send(12 * MS, &seg(2000, 0, 1000, flags::ACK, 0), 0);
        assert_eq!(rows(&h, Table::Spacing), vec![(12 * MS, 2 * MS)]);
    }

    #[test]
    fn window_is_scaled_except_on_syn() {
        let mut h = Half::new(0, 0);
        h.on_ack(0, &seg(0, 0, 0, flags::SYN | flags::ACK, 1000), Some(7), 0);
        h.on_ack(1, &seg(0, 0, 0, flags::ACK, 1000), Some(7), 0);
        assert_eq!(rows(&h, Table::Window), vec![(1, 128_000)]);
        assert_eq!(h.rwnd_max, Some(128_000));
    }
}
