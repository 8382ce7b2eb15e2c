//! The connection table of one capture: TCP segments matched to connections by their
//! 4-tuple in either direction, each connection split into its two directions ([`Half`]).
//!
//! A SYN with a new initial sequence number on a 4-tuple that already carried a connection
//! (port reuse) starts a new connection. Window scaling applies when both SYNs were seen and
//! both carried the option; when the handshake is not in the capture the scale is unknown and
//! windows are reported unscaled, flagged as such.
//!
//! Memory is bounded by the connections open at once, not by the capture's length: samples
//! leave through [`Output`] as they arise, and a connection that can give no more samples
//! (a RST, or FINs both ways with everything acknowledged) is summarized and dropped once it
//! has been quiet for [`LINGER_NS`]. Its 4-tuple is remembered (at most [`TOMBSTONES`] of
//! them, for [`TOMBSTONE_NS`]) so that stragglers (a FIN sent again, its ACK) are not taken
//! for a new connection.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::net::IpAddr;

use crate::capture::Frame;
use crate::decode::{decode, flags, Segment};
use crate::half::Half;
use crate::reason::Unusable;
use crate::report::Output;

/// How long a closed connection stays after its last segment, ns: a retransmitted FIN (or
/// a late ACK) within it is still counted where it belongs.
pub const LINGER_NS: i64 = 2_000_000_000;
/// How long the 4-tuple of a dropped connection is remembered, ns: TIME_WAIT on Linux.
pub const TOMBSTONE_NS: i64 = 60_000_000_000;
/// At most this many dropped 4-tuples are remembered (the oldest are forgotten first).
pub const TOMBSTONES: usize = 1 << 16;

type Endpoint = (IpAddr, u16);
type Key = (Endpoint, Endpoint);

/// One TCP connection: endpoint `a` sent the first segment seen (the SYN when captured).
#[derive(Debug)]
pub struct Connection {
    /// Index of the connection in its capture (order of first segments).
    pub id: usize,
    /// First endpoint: the one that sent the first segment seen.
    pub a: Endpoint,
    /// Second endpoint.
    pub b: Endpoint,
    /// Time of the first segment, ns: the origin of this connection's bins.
    pub t0_ns: i64,
    /// Time of the last segment, ns.
    pub t_last_ns: i64,
    /// `halves[0]`: data from a to b; `halves[1]`: from b to a.
    pub halves: [Half; 2],
    /// Window-scale option in each side's SYN, and whether that SYN was seen.
    wscale: [Option<u8>; 2],
    syn: [bool; 2],
    /// The side that sent the first SYN without ACK (the client), if seen.
    pub client: Option<usize>,
    /// Handshake times, ns: SYN, SYN-ACK, the client's first ACK after it.
    pub handshake: [Option<i64>; 3],
    /// A RST was seen.
    pub rst_seen: bool,
    /// Queued to be dropped once quiet.
    closing: bool,
}

impl Connection {
    fn new(id: usize, a: Endpoint, b: Endpoint, t_ns: i64, bin_ns: i64) -> Connection {
        Connection {
            id,
            a,
            b,
            t0_ns: t_ns,
            t_last_ns: t_ns,
            halves: [Half::new(t_ns, bin_ns), Half::new(t_ns, bin_ns)],
            wscale: [None; 2],
            syn: [false; 2],
            client: None,
            handshake: [None; 3],
            rst_seen: false,
            closing: false,
        }
    }

    /// Nothing more can come of it: reset, or closed both ways with everything acknowledged.
    fn closed(&self) -> bool {
        self.rst_seen || self.halves.iter().all(|h| h.fin_seen && h.all_acked())
    }

    /// The window-scale shift of windows advertised by `side`, if known.
    pub fn scale(&self, side: usize) -> Option<u8> {
        if !(self.syn[0] && self.syn[1]) {
            return None;
        }
        match (self.wscale[0], self.wscale[1]) {
            (Some(x), Some(y)) => Some([x, y][side]),
            _ => Some(0),
        }
    }

    fn has_traffic(&self) -> bool {
        self.halves
            .iter()
            .any(|h| h.data_segments > 0 || h.fin_seen)
            || self.rst_seen
    }

    fn on_segment(&mut self, side: usize, t_ns: i64, seg: &Segment, bin_ns: i64) {
        self.t_last_ns = self.t_last_ns.max(t_ns);
        let bin = (t_ns - self.t0_ns).max(0) / bin_ns;
        let syn = seg.has(flags::SYN);
        if syn {
            self.syn[side] = true;
            self.wscale[side] = seg.wscale;
            if !seg.has(flags::ACK) {
                self.client.get_or_insert(side);
                self.handshake[0].get_or_insert(t_ns);
            } else if self.client == Some(1 - side) {
                self.handshake[1].get_or_insert(t_ns);
            }
        } else if self.client == Some(side) && self.handshake[1].is_some() {
            self.handshake[2].get_or_insert(t_ns);
        }
        self.rst_seen |= seg.has(flags::RST);
        self.halves[side].on_send(t_ns, seg, bin);
        if seg.has(flags::ACK) {
            let scale = self.scale(side);
            self.halves[1 - side].on_ack(t_ns, seg, scale, bin);
        }
    }
}

/// Every connection of one capture, and what could not be used.
#[derive(Debug)]
pub struct Flows {
    bin_ns: i64,
    keep_rows: bool,
    /// Connections that may still give samples, by 4-tuple (lower endpoint first).
    live: FxMap<Key, Connection>,
    /// Closed connections to drop once quiet: 4-tuple and connection id.
    closing: VecDeque<(Key, usize)>,
    /// 4-tuples of dropped connections and when they were dropped, ns.
    tombstones: FxMap<Key, i64>,
    tombstone_order: VecDeque<(Key, i64)>,
    /// Connections seen.
    pub connections: usize,
    /// Most connections held at once.
    pub peak_open: usize,
    /// Segments of dropped connections, ignored.
    pub late_segments: u64,
    /// Records that gave no TCP segment, by reason.
    pub unusable: Unusable,
    /// TCP segments used.
    pub segments: u64,
    /// Segments whose payload the snapshot length cut (still used).
    pub truncated_payloads: u64,
    /// First and last record time, ns.
    pub first_ns: Option<i64>,
    /// Last record time, ns.
    pub last_ns: Option<i64>,
}

impl Flows {
    /// An empty table binning time series by `bin_ns` nanoseconds; `keep_rows` when the
    /// per-sample tables are written.
    pub fn new(bin_ns: i64, keep_rows: bool) -> Flows {
        Flows {
            bin_ns: bin_ns.max(1),
            keep_rows,
            live: FxMap::default(),
            closing: VecDeque::new(),
            tombstones: FxMap::default(),
            tombstone_order: VecDeque::new(),
            connections: 0,
            peak_open: 0,
            late_segments: 0,
            unusable: Unusable::default(),
            segments: 0,
            truncated_payloads: 0,
            first_ns: None,
            last_ns: None,
        }
    }

    /// Connections held now (open, or closed but not yet quiet).
    pub fn open_connections(&self) -> usize {
        self.live.len()
    }

    /// Takes one record of the capture; samples and finished transfers go to `out`.
    pub fn record(&mut self, frame: &Frame<'_>, out: &mut Output) {
        self.first_ns = Some(self.first_ns.map_or(frame.ts_ns, |t| t.min(frame.ts_ns)));
        let now = self.last_ns.map_or(frame.ts_ns, |t| t.max(frame.ts_ns));
        self.last_ns = Some(now);
        match decode(frame.linktype, frame.data, frame.orig_len) {
            Ok(seg) => self.segment(frame.ts_ns, &seg, out),
            Err(reason) => self.unusable.add(reason),
        }
        self.expire(now, out);
    }

    /// Drops the closed connections quiet for [`LINGER_NS`] at `now`, and forgets old
    /// tombstones.
    fn expire(&mut self, now: i64, out: &mut Output) {
        while let Some(&(key, id)) = self.closing.front() {
            let Some(c) = self.live.get(&key).filter(|c| c.id == id) else {
                self.closing.pop_front(); // replaced by a new connection: already dropped
                continue;
            };
            if c.t_last_ns + LINGER_NS >= now {
                break;
            }
            self.closing.pop_front();
            self.drop_connection(key, now, out);
        }
        while let Some(&(key, t)) = self.tombstone_order.front() {
            if t + TOMBSTONE_NS >= now && self.tombstone_order.len() <= TOMBSTONES {
                break;
            }
            self.tombstone_order.pop_front();
            if self.tombstones.get(&key) == Some(&t) {
                self.tombstones.remove(&key);
            }
        }
    }

    fn drop_connection(&mut self, key: Key, now: i64, out: &mut Output) {
        if let Some(c) = self.live.remove(&key) {
            out.connection_done(&c, self.bin_ns);
            self.tombstones.insert(key, now);
            self.tombstone_order.push_back((key, now));
        }
    }

    /// Takes one decoded TCP segment captured at `t_ns`.
    pub fn segment(&mut self, t_ns: i64, seg: &Segment, out: &mut Output) {
        self.segments += 1;
        self.truncated_payloads += u64::from(seg.payload_truncated);
        let (src, dst) = ((seg.src, seg.sport), (seg.dst, seg.dport));
        let key = if src <= dst { (src, dst) } else { (dst, src) };
        let fresh_syn = seg.has(flags::SYN) && !seg.has(flags::ACK);
        // One lookup for the usual case: a segment of a connection already held.
        if let Some(c) = self.live.get_mut(&key) {
            let side = usize::from(c.a != src);
            let reused = fresh_syn
                && c.has_traffic()
                && c.halves[side].first_seq.is_some_and(|s| s != seg.seq);
            if !reused {
                feed(c, side, t_ns, seg, self.bin_ns, out, &mut self.closing, key);
                return;
            }
            // The old connection gets no more segments: it is done.
            self.drop_connection(key, t_ns, out);
        } else if !fresh_syn && self.tombstones.contains_key(&key) {
            self.late_segments += 1;
            return;
        }
        self.open(key, src, dst, t_ns);
        let c = self.live.get_mut(&key).expect("opened above");
        let side = usize::from(c.a != src);
        feed(c, side, t_ns, seg, self.bin_ns, out, &mut self.closing, key);
    }

    fn open(&mut self, key: Key, a: Endpoint, b: Endpoint, t_ns: i64) {
        if !self.tombstones.is_empty() {
            self.tombstones.remove(&key);
        }
        let mut c = Connection::new(self.connections, a, b, t_ns, self.bin_ns);
        for h in &mut c.halves {
            h.keep_rows = self.keep_rows;
        }
        self.connections += 1;
        self.live.insert(key, c);
        self.peak_open = self.peak_open.max(self.live.len());
    }

    /// The end of the capture: every connection still held is summarized and dropped.
    pub fn finish(&mut self, out: &mut Output) {
        let mut rest: Vec<Connection> = self.live.drain().map(|(_, c)| c).collect();
        rest.sort_unstable_by_key(|c| c.id);
        for c in &rest {
            out.connection_done(c, self.bin_ns);
        }
        self.closing.clear();
        self.tombstones.clear();
        self.tombstone_order.clear();
    }
}

/// Hands segment `seg` to side `side` of `c`, passes on the samples it gave, and queues the
/// connection to be dropped when it has just closed.
#[allow(clippy::too_many_arguments)] // the disjoint fields of `Flows` it needs
fn feed(
    c: &mut Connection,
    side: usize,
    t_ns: i64,
    seg: &Segment,
    bin_ns: i64,
    out: &mut Output,
    closing: &mut VecDeque<(Key, usize)>,
    key: Key,
) {
    c.on_segment(side, t_ns, seg, bin_ns);
    for h in &mut c.halves {
        if h.transfer.is_none() && h.data_segments > 0 {
            h.transfer = Some(out.new_transfer());
        }
        if let Some(id) = h.transfer {
            if !h.rows.is_empty() {
                out.rows(id, c.t0_ns, &h.rows);
                h.rows.clear();
            }
        }
    }
    if !c.closing && c.closed() {
        c.closing = true;
        closing.push_back((key, c.id));
    }
}

/// The FxHash of rustc (a multiply and a rotate per word, finished with a rotate as in
/// rustc-hash 2): the 4-tuple is hashed once or twice per segment, and the standard
/// SipHash took a third of the analyzer's time. Its weakness, collisions that an adversary
/// can provoke, does not matter for captures analyzed offline.
#[derive(Clone, Copy, Default)]
struct FxHasher(u64);

const FX_SEED: u64 = 0xf135_7aea_2e62_a9c5;

impl FxHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0 ^ word).wrapping_mul(FX_SEED).rotate_left(5);
    }
}

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
    }
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }
    fn write_u16(&mut self, i: u16) {
        self.add(u64::from(i));
    }
    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
    fn finish(&self) -> u64 {
        self.0.rotate_left(26)
    }
}

type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;
