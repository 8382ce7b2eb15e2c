//! The connection table of one capture: TCP segments matched to connections by their
//! 4-tuple in either direction, each connection split into its two directions ([`Half`]).
//!
//! A SYN with a new initial sequence number on a 4-tuple that already carried a connection
//! (port reuse) starts a new connection. Window scaling applies when both SYNs were seen and
//! both carried the option; when the handshake is not in the capture the scale is unknown and
//! windows are reported unscaled, flagged as such.

use std::collections::HashMap;
use std::net::IpAddr;

use crate::capture::Frame;
use crate::decode::{decode, flags, Segment};
use crate::half::Half;
use crate::reason::Unusable;

type Endpoint = (IpAddr, u16);

/// One TCP connection: endpoint `a` sent the first segment seen (the SYN when captured).
#[derive(Debug)]
pub struct Connection {
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
}

impl Connection {
    fn new(a: Endpoint, b: Endpoint, t_ns: i64, bin_ns: i64) -> Connection {
        Connection {
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
        }
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
    index: HashMap<(Endpoint, Endpoint), usize>,
    /// Connections in the order their first segment appeared.
    pub connections: Vec<Connection>,
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
    /// An empty table binning time series by `bin_ns` nanoseconds.
    pub fn new(bin_ns: i64) -> Flows {
        Flows {
            bin_ns: bin_ns.max(1),
            index: HashMap::new(),
            connections: Vec::new(),
            unusable: Unusable::default(),
            segments: 0,
            truncated_payloads: 0,
            first_ns: None,
            last_ns: None,
        }
    }

    /// Takes one record of the capture.
    pub fn record(&mut self, frame: &Frame<'_>) {
        self.first_ns = Some(self.first_ns.map_or(frame.ts_ns, |t| t.min(frame.ts_ns)));
        self.last_ns = Some(self.last_ns.map_or(frame.ts_ns, |t| t.max(frame.ts_ns)));
        match decode(frame.linktype, frame.data, frame.orig_len) {
            Ok(seg) => self.segment(frame.ts_ns, &seg),
            Err(reason) => self.unusable.add(reason),
        }
    }

    /// Takes one decoded TCP segment captured at `t_ns`.
    pub fn segment(&mut self, t_ns: i64, seg: &Segment) {
        self.segments += 1;
        self.truncated_payloads += u64::from(seg.payload_truncated);
        let (src, dst) = ((seg.src, seg.sport), (seg.dst, seg.dport));
        let key = if src <= dst { (src, dst) } else { (dst, src) };
        let fresh_syn = seg.has(flags::SYN) && !seg.has(flags::ACK);
        let id = match self.index.get(&key) {
            Some(&id) => {
                let c = &self.connections[id];
                let side = usize::from(c.a != src);
                let reused = fresh_syn
                    && c.has_traffic()
                    && c.halves[side].first_seq.is_some_and(|s| s != seg.seq);
                if reused {
                    self.open(key, src, dst, t_ns)
                } else {
                    id
                }
            }
            None => self.open(key, src, dst, t_ns),
        };
        let c = &mut self.connections[id];
        let side = usize::from(c.a != src);
        c.on_segment(side, t_ns, seg, self.bin_ns);
    }

    fn open(&mut self, key: (Endpoint, Endpoint), a: Endpoint, b: Endpoint, t_ns: i64) -> usize {
        let id = self.connections.len();
        self.connections
            .push(Connection::new(a, b, t_ns, self.bin_ns));
        self.index.insert(key, id);
        id
    }
}
