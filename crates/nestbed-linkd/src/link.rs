//! One emulated link without I/O: its ports' pipes, its switch, its state
//! and its trace. The worker hands it received frames with
//! [`Link::receive`] and collects the frames due with [`Link::poll`]; time
//! is a parameter, so the forwarding path is tested with virtual time.
//!
//! A frame from port A passes A's egress pipe, then the switch picks the
//! destination ports, then each copy passes that port's ingress pipe (it
//! enters at the egress pipe's due time, not at the time the worker got
//! round to it), and is handed out for sending on that port.

use std::collections::HashMap;

use nestbed_pipe::{Delivery, EnqueueOutcome, Instant, Packet, Pipe, PipeParams};
use serde_json::{json, Value};

use crate::dispatch::LinkState;
use crate::offload;
use crate::protocol::AddLink;
use crate::seed::{pipe_seed, Direction};
use crate::segment;
use crate::switch::Switch;
use crate::trace::{packet_type, Event, Line, Trace};

/// A frame ready to be sent out of a port.
#[derive(Debug)]
pub struct Outgoing {
    /// Port index.
    pub port: usize,
    /// The frame.
    pub frame: Vec<u8>,
    /// Its offload metadata ([`crate::offload`]; 0 for a plain frame).
    pub meta: u64,
    /// When it was due to leave.
    pub due: Instant,
}

/// Port counters kept outside the pipes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Frames read from the interface.
    pub received: u64,
    /// Frames read truncated (larger than the buffer; offloads on?).
    pub truncated: u64,
    /// Frames dropped because the link was blackholed.
    pub blackholed: u64,
    /// Frames dropped because the link was admin down.
    pub admin_down: u64,
    /// Frames handed to the kernel for sending.
    pub sent: u64,
    /// Bytes handed to the kernel for sending.
    pub sent_bytes: u64,
    /// Frames the kernel refused (interface down, buffer full).
    pub send_failed: u64,
    /// Frames out of the egress pipe that the switch sent nowhere.
    pub no_destination: u64,
    /// Super-frames cut into their wire frames before one of this port's
    /// pipes, which would have treated the frames otherwise ([`pieces`]).
    pub segmented: u64,
}

/// One member port.
#[derive(Debug)]
pub struct Port {
    /// Port name.
    pub name: String,
    /// Host-side interface.
    pub ifname: String,
    /// Member → link.
    pub egress: Pipe,
    /// Link → member.
    pub ingress: Pipe,
    /// Counters outside the pipes.
    pub stats: PortStats,
}

impl Port {
    /// The pipe of `direction`.
    pub fn pipe_mut(&mut self, direction: Direction) -> &mut Pipe {
        match direction {
            Direction::Egress => &mut self.egress,
            Direction::Ingress => &mut self.ingress,
        }
    }
}

/// What a trace needs to name the origin of an ingress packet.
#[derive(Clone, Copy, Debug)]
struct Origin {
    port: usize,
    id: u64,
}

/// An emulated link.
#[derive(Debug)]
pub struct Link {
    name: String,
    ports: Vec<Port>,
    switch: Switch,
    state: LinkState,
    trace: Option<Trace>,
    /// While tracing: origin of packets in each ingress pipe, by ordinal.
    origins: Vec<HashMap<u64, Origin>>,
    /// Last origin removed per ingress pipe (for a duplicate that follows).
    last_origin: Vec<Option<(u64, Origin)>>,
    scratch: Vec<Delivery>,
    arrivals: Vec<(usize, Delivery)>,
    targets: Vec<usize>,
}

fn pipe(params: &PipeParams, seed: u64, field: &str) -> Result<Pipe, String> {
    Pipe::new(params.clone(), seed).map_err(|e| format!("field `{field}`: {e}"))
}

impl Link {
    /// A link as described by a validated `add_link` request.
    pub fn new(spec: &AddLink) -> Result<Link, String> {
        let mut ports = Vec::with_capacity(spec.ports.len());
        for (i, p) in spec.ports.iter().enumerate() {
            ports.push(Port {
                name: p.port.clone(),
                ifname: p.ifname.clone(),
                egress: pipe(
                    &p.egress,
                    pipe_seed(spec.seed, i, Direction::Egress),
                    &format!("ports[{i}].egress"),
                )?,
                ingress: pipe(
                    &p.ingress,
                    pipe_seed(spec.seed, i, Direction::Ingress),
                    &format!("ports[{i}].ingress"),
                )?,
                stats: PortStats::default(),
            });
        }
        let n = ports.len();
        Ok(Link {
            name: spec.link.clone(),
            switch: Switch::new(n, spec.is_lan()),
            ports,
            state: LinkState::Up,
            trace: None,
            origins: vec![HashMap::new(); n],
            last_origin: vec![None; n],
            scratch: Vec::new(),
            arrivals: Vec::new(),
            targets: Vec::new(),
        })
    }

    /// The link's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The ports.
    pub fn ports(&self) -> &[Port] {
        &self.ports
    }

    /// A port, mutably.
    pub fn port_mut(&mut self, index: usize) -> Option<&mut Port> {
        self.ports.get_mut(index)
    }

    /// Sets the state (frames already in the pipes keep going).
    pub fn set_state(&mut self, state: LinkState) {
        self.state = state;
    }

    /// The state.
    pub fn state(&self) -> LinkState {
        self.state
    }

    /// Starts tracing into `trace` (replacing any trace, which is returned).
    pub fn start_trace(&mut self, trace: Trace) -> Option<Trace> {
        self.trace.replace(trace)
    }

    /// Stops tracing, returning the trace to finish.
    pub fn stop_trace(&mut self) -> Option<Trace> {
        for m in &mut self.origins {
            m.clear();
        }
        self.last_origin.iter_mut().for_each(|o| *o = None);
        self.trace.take()
    }

    /// Name of the far side of port `i`'s egress pipe.
    fn egress_to(&self, i: usize) -> &str {
        if self.switch.is_lan() || self.ports.len() != 2 {
            &self.name
        } else {
            &self.ports[1 - i].name
        }
    }

    /// Offers a frame read from port `port`'s interface at `now`.
    pub fn receive(&mut self, now: Instant, port: usize, packet: Packet, truncated: bool) {
        let n = self.ports.len() as u64;
        let Some(p) = self.ports.get_mut(port) else {
            return;
        };
        p.stats.received += 1;
        if truncated {
            p.stats.truncated += 1;
        }
        let kind = if self.trace.is_some() {
            packet_type(packet.data())
        } else {
            ""
        };
        let size = packet.wire_len();
        match self.state {
            LinkState::Up => {}
            LinkState::Blackhole | LinkState::AdminDown => {
                if self.state == LinkState::Blackhole {
                    p.stats.blackholed += 1;
                } else {
                    p.stats.admin_down += 1;
                }
                if self.trace.is_some() {
                    let to = self.egress_to(port).to_string();
                    let from = &self.ports[port].name;
                    let line = Line {
                        from,
                        to: &to,
                        src: from,
                        kind,
                        size,
                        seq: 0,
                        id: 0,
                    };
                    if let Some(t) = self.trace.as_mut() {
                        t.write(Event::Drop, now, &line);
                    }
                }
                return;
            }
        }
        for packet in pieces(&mut p.egress, now, packet, &mut p.stats) {
            let size = packet.wire_len();
            let outcome = self.ports[port].egress.enqueue(now, packet);
            if self.trace.is_none() {
                continue;
            }
            let seq = outcome.ordinal();
            let id = (seq - 1) * n + port as u64;
            let to = self.egress_to(port).to_string();
            let from = &self.ports[port].name;
            let line = Line {
                from,
                to: &to,
                src: from,
                kind,
                size,
                seq,
                id,
            };
            if let Some(t) = self.trace.as_mut() {
                t.write(Event::Enqueue, now, &line);
                if !outcome.is_accepted() {
                    t.write(Event::Drop, now, &line);
                }
            }
        }
    }

    /// Moves every frame due by `now` through the link and appends the
    /// frames to send to `out`.
    pub fn poll(&mut self, now: Instant, out: &mut Vec<Outgoing>) {
        let n = self.ports.len();
        let mut scratch = std::mem::take(&mut self.scratch);
        let mut targets = std::mem::take(&mut self.targets);
        // All egress deliveries in due-time order (ties by port), so the
        // switch learns and the ingress pipes fill in time order.
        let mut arrivals = std::mem::take(&mut self.arrivals);
        for from in 0..n {
            scratch.clear();
            self.ports[from]
                .egress
                .dequeue_ready_into(now, &mut scratch);
            arrivals.extend(scratch.drain(..).map(|d| (from, d)));
        }
        arrivals.sort_by_key(|(from, d)| (d.due, *from));
        for (from, d) in arrivals.drain(..) {
            if self.trace.is_some() {
                self.trace_delivery(Direction::Egress, from, &d, from);
            }
            targets.clear();
            self.switch.forward(from, d.packet.data(), &mut targets);
            if targets.is_empty() {
                self.ports[from].stats.no_destination += 1;
            }
            let id = (d.ordinal - 1) * n as u64 + from as u64;
            let count = targets.len();
            let mut packet = Some(if d.corrupted {
                uncheck(d.packet)
            } else {
                d.packet
            });
            for (k, &to) in targets.iter().enumerate() {
                let copy = if k + 1 == count {
                    packet.take().unwrap_or_else(|| Packet::new(Vec::new()))
                } else {
                    packet
                        .as_ref()
                        .map_or_else(|| Packet::new(Vec::new()), Clone::clone)
                };
                self.enter_ingress(d.due, from, id, to, copy);
            }
        }
        self.arrivals = arrivals;
        for to in 0..n {
            scratch.clear();
            self.ports[to].ingress.dequeue_ready_into(now, &mut scratch);
            for d in scratch.drain(..) {
                if self.trace.is_some() {
                    let origin = self.take_origin(to, &d);
                    self.trace_delivery(Direction::Ingress, to, &d, origin.port);
                }
                let packet = if d.corrupted {
                    uncheck(d.packet)
                } else {
                    d.packet
                };
                out.push(Outgoing {
                    port: to,
                    meta: packet.meta(),
                    frame: packet.into_data(),
                    due: d.due,
                });
            }
        }
        self.scratch = scratch;
        self.targets = targets;
    }

    fn enter_ingress(&mut self, at: Instant, from: usize, id: u64, to: usize, packet: Packet) {
        let kind = if self.trace.is_some() {
            packet_type(packet.data())
        } else {
            ""
        };
        let p = &mut self.ports[to];
        for packet in pieces(&mut p.ingress, at, packet, &mut p.stats) {
            let size = packet.wire_len();
            let outcome = self.ports[to].ingress.enqueue(at, packet);
            if let Some(t) = self.trace.as_mut() {
                let seq = outcome.ordinal();
                let line = Line {
                    from: &self.ports[from].name,
                    to: &self.ports[to].name,
                    src: &self.ports[from].name,
                    kind,
                    size,
                    seq,
                    id,
                };
                t.write(Event::Enqueue, at, &line);
                match outcome {
                    EnqueueOutcome::Accepted { .. } => {
                        self.origins[to].insert(seq, Origin { port: from, id });
                    }
                    EnqueueOutcome::Dropped { .. } => t.write(Event::Drop, at, &line),
                }
            }
        }
    }

    fn take_origin(&mut self, to: usize, d: &Delivery) -> Origin {
        if let Some(o) = self.origins[to].remove(&d.ordinal) {
            self.last_origin[to] = Some((d.ordinal, o));
            return o;
        }
        match self.last_origin[to] {
            Some((ord, o)) if ord == d.ordinal => o,
            // Entered before the trace started: origin unknown.
            _ => Origin { port: to, id: 0 },
        }
    }

    fn trace_delivery(&mut self, dir: Direction, port: usize, d: &Delivery, origin: usize) {
        let n = self.ports.len() as u64;
        let (from, to) = match dir {
            Direction::Egress => (
                self.ports[port].name.clone(),
                self.egress_to(port).to_string(),
            ),
            Direction::Ingress => (
                self.ports[origin].name.clone(),
                self.ports[port].name.clone(),
            ),
        };
        let id = match dir {
            Direction::Egress => (d.ordinal - 1) * n + port as u64,
            Direction::Ingress => self.last_origin[port]
                .filter(|(ord, _)| *ord == d.ordinal)
                .map_or(0, |(_, o)| o.id),
        };
        let pipe = match dir {
            Direction::Egress => &self.ports[port].egress,
            Direction::Ingress => &self.ports[port].ingress,
        };
        let start = serialization_start(pipe.params(), d);
        let src = self.ports[origin].name.clone();
        let line = Line {
            from: &from,
            to: &to,
            src: &src,
            kind: packet_type(d.packet.data()),
            size: d.packet.wire_len(),
            seq: d.ordinal,
            id,
        };
        if let Some(t) = self.trace.as_mut() {
            if !d.duplicate {
                t.write(Event::Dequeue, start, &line);
            }
            t.write(Event::Deliver, d.due, &line);
        }
    }

    /// The earliest time any pipe of the link has something due.
    pub fn next_wakeup(&self) -> Option<Instant> {
        self.ports
            .iter()
            .flat_map(|p| [p.egress.next_wakeup(), p.ingress.next_wakeup()])
            .flatten()
            .min()
    }

    /// The link's counters: per port, per direction, the pipe's counters
    /// and queue limit, plus the port's own counters.
    pub fn counters(&self) -> Value {
        let ports: serde_json::Map<String, Value> = self
            .ports
            .iter()
            .map(|p| {
                let s = &p.stats;
                let pipe = |pipe: &Pipe| {
                    json!({
                        "counters": pipe.counters(),
                        "queue_limit": pipe.queue_limit(),
                        "seed": pipe.seed(),
                    })
                };
                let v = json!({
                    "ifname": p.ifname,
                    "egress": pipe(&p.egress),
                    "ingress": pipe(&p.ingress),
                    "received": s.received,
                    "truncated": s.truncated,
                    "blackholed": s.blackholed,
                    "admin_down": s.admin_down,
                    "sent": s.sent,
                    "sent_bytes": s.sent_bytes,
                    "send_failed": s.send_failed,
                    "no_destination": s.no_destination,
                    "segmented": s.segmented,
                });
                (p.name.clone(), v)
            })
            .collect();
        json!({
            "state": self.state,
            "learned_macs": self.switch.learned(),
            "trace_lines": self.trace.as_ref().map(Trace::lines),
            "ports": ports,
        })
    }
}

/// A packet as it enters a pipe: whole, or as the wire frames it stands for.
enum Pieces {
    Whole(Option<Packet>),
    Frames(std::vec::IntoIter<Vec<u8>>),
}

impl Iterator for Pieces {
    type Item = Packet;

    fn next(&mut self) -> Option<Packet> {
        match self {
            Pieces::Whole(packet) => packet.take(),
            Pieces::Frames(frames) => frames.next().map(Packet::new),
        }
    }
}

/// `packet` as it is to enter `pipe` at `now`: whole where the pipe treats
/// it as it would treat its wire frames one by one (the fast path: rate,
/// delay and a queue with room), else cut into those frames, so that loss,
/// ordinal drops, RED, jitter, duplication, corruption and a full queue
/// act on each frame as with offloads off (counted in `stats.segmented`).
fn pieces(pipe: &mut Pipe, now: Instant, packet: Packet, stats: &mut PortStats) -> Pieces {
    if pipe.takes_whole(now, &packet) {
        return Pieces::Whole(Some(packet));
    }
    match segment::segment(packet.data(), packet.meta()) {
        Some(frames) => {
            stats.segmented += 1;
            Pieces::Frames(frames.into_iter())
        }
        None => Pieces::Whole(Some(packet)),
    }
}

/// A corrupted packet, with its offload metadata made such that the
/// receiver checks its checksum ([`offload::corrupted`]).
fn uncheck(packet: Packet) -> Packet {
    if packet.meta() == 0 {
        return packet;
    }
    let (wire_len, segments, meta) = (packet.wire_len(), packet.segments(), packet.meta());
    Packet::with_segments(
        packet.into_data(),
        wire_len,
        segments,
        offload::corrupted(meta),
    )
}

/// When the packet started serialization: `transmitted` minus its
/// serialization time at the configured rate, not before it arrived.
/// (With a token-bucket burst this is an estimate.)
fn serialization_start(params: &PipeParams, d: &Delivery) -> Instant {
    let rate = params.bandwidth.rate_bps;
    if rate == 0 {
        return d.transmitted;
    }
    let bits = (u128::from(d.packet.wire_len()) + u128::from(params.bandwidth.overhead_bytes)) * 8;
    let ns = (bits * 1_000_000_000 / u128::from(rate)) as u64;
    Instant::from_nanos(
        d.transmitted
            .as_nanos()
            .saturating_sub(ns)
            .max(d.arrived.as_nanos()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{parse_request, Request};

    fn link(line: &str) -> Link {
        let Request::AddLink(spec) = parse_request(line).unwrap() else {
            panic!()
        };
        Link::new(&spec).unwrap()
    }

    fn frame(dst: u8, src: u8, len: usize) -> Vec<u8> {
        let mut f = vec![0u8; len];
        f[0..6].copy_from_slice(&[2, 0, 0, 0, 0, dst]);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, src]);
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f
    }

    const P2P: &str = r#"{"op":"add_link","link":"l","seed":1,"ports":[
        {"port":"a","ifname":"x0","egress":{"delay":{"delay_ns":1000000}},"ingress":{"delay":{"delay_ns":500000}}},
        {"port":"b","ifname":"x1","egress":{"delay":{"delay_ns":2000000}}}]}"#;

    #[test]
    fn point_to_point_adds_egress_then_ingress_delay() {
        let mut l = link(&P2P.replace('\n', ""));
        l.receive(Instant::ZERO, 0, Packet::new(frame(0xB, 0xA, 100)), false);
        l.receive(Instant::ZERO, 1, Packet::new(frame(0xA, 0xB, 100)), false);
        let mut out = Vec::new();
        assert_eq!(l.next_wakeup(), Some(Instant::from_millis(1)));
        l.poll(Instant::from_nanos(999_999), &mut out);
        assert!(out.is_empty());
        // a → b: 1 ms egress + 0 ingress.
        l.poll(Instant::from_millis(1), &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].port, out[0].due), (1, Instant::from_millis(1)));
        // b → a: 2 ms egress + 0.5 ms ingress of a.
        out.clear();
        l.poll(Instant::from_millis(2), &mut out);
        assert!(out.is_empty());
        assert_eq!(l.next_wakeup(), Some(Instant::from_micros(2500)));
        l.poll(Instant::from_millis(3), &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].port, out[0].due), (0, Instant::from_micros(2500)));
        let c = l.counters();
        assert_eq!(c["ports"]["a"]["egress"]["counters"]["packets_out"], 1);
        assert_eq!(c["ports"]["a"]["ingress"]["counters"]["packets_in"], 1);
        assert_eq!(l.next_wakeup(), None);
    }

    #[test]
    fn lan_floods_then_unicasts_each_copy_through_its_ingress_pipe() {
        let mut l = link(
            r#"{"op":"add_link","link":"lan","ports":[{"port":"a","ifname":"y0"},{"port":"b","ifname":"y1"},{"port":"c","ifname":"y2","ingress":{"delay":{"delay_ns":1000}}}]}"#,
        );
        let mut out = Vec::new();
        l.receive(Instant::ZERO, 0, Packet::new(frame(0xB, 0xA, 60)), false);
        l.poll(Instant::ZERO, &mut out);
        assert_eq!(out.iter().map(|o| o.port).collect::<Vec<_>>(), vec![1]);
        l.poll(Instant::from_nanos(1000), &mut out);
        assert_eq!(out.iter().map(|o| o.port).collect::<Vec<_>>(), vec![1, 2]);
        out.clear();
        // B → A at 2 µs (unicast to the learned A), then A → B at 3 µs
        // (B learned by then, even though port 0 is polled first).
        l.receive(
            Instant::from_nanos(2000),
            1,
            Packet::new(frame(0xA, 0xB, 60)),
            false,
        );
        l.receive(
            Instant::from_nanos(3000),
            0,
            Packet::new(frame(0xB, 0xA, 60)),
            false,
        );
        l.poll(Instant::from_nanos(10_000), &mut out);
        let mut ports: Vec<_> = out.iter().map(|o| o.port).collect();
        ports.sort();
        assert_eq!(ports, vec![0, 1]);
    }

    #[test]
    fn a_corrupted_frame_loses_its_unfinished_checksum_flag() {
        let mut l = link(
            r#"{"op":"add_link","link":"l","ports":[{"port":"a","ifname":"x0","egress":{"delay":{"corrupt":1.0}}},{"port":"b","ifname":"x1"}]}"#,
        );
        // NEEDS_CSUM, no GSO, checksum at 34 + 16.
        let meta = crate::offload::meta_from_header(&[1, 0, 0, 0, 0, 0, 34, 0, 16, 0]);
        let f = frame(0xB, 0xA, 100);
        l.receive(
            Instant::ZERO,
            0,
            Packet::with_segments(f, 100, 1, meta),
            false,
        );
        l.receive(
            Instant::ZERO,
            1,
            Packet::with_segments(frame(0xA, 0xB, 100), 100, 1, meta),
            false,
        );
        let mut out = Vec::new();
        l.poll(Instant::ZERO, &mut out);
        let by_port = |p: usize| out.iter().find(|o| o.port == p).unwrap().meta;
        assert_eq!(by_port(1) >> 56, 0, "corrupted by a's egress");
        assert_eq!(by_port(0), meta, "b's pipes do not corrupt");
    }

    #[test]
    fn a_super_frame_is_cut_into_its_wire_frames_only_before_a_pipe_that_acts_per_frame() {
        use crate::segment::tests::{meta, tcp_superframe, GSO_TCPV4};
        // a's egress drops its third frame; b's pipes only delay.
        let mut l = link(
            r#"{"op":"add_link","link":"l","ports":[{"port":"a","ifname":"x0","egress":{"drop_ordinals":[3]}},{"port":"b","ifname":"x1","egress":{"delay":{"delay_ns":1000}}}]}"#,
        );
        let m = meta(GSO_TCPV4, 1448, 34, 16);
        let superframe = || {
            let f = tcp_superframe(false, 10_000, 1);
            let (wire_len, segments) = offload::wire(&f, m);
            Packet::with_segments(f, wire_len, segments, m)
        };
        l.receive(Instant::ZERO, 0, superframe(), false);
        l.receive(Instant::ZERO, 1, superframe(), false);
        let mut out = Vec::new();
        l.poll(Instant::from_micros(1), &mut out);
        let to_b: Vec<_> = out.iter().filter(|o| o.port == 1).collect();
        let to_a: Vec<_> = out.iter().filter(|o| o.port == 0).collect();
        // a → b: 7 wire frames, the third lost; plain frames, in order.
        assert_eq!(to_b.len(), 6);
        assert!(to_b.iter().all(|o| o.meta == 0 && o.frame.len() <= 1514));
        let seqs: Vec<u32> = to_b
            .iter()
            .map(|o| u32::from_be_bytes(o.frame[38..42].try_into().unwrap()))
            .collect();
        assert_eq!(
            seqs,
            [
                1,
                1 + 1448,
                1 + 3 * 1448,
                1 + 4 * 1448,
                1 + 5 * 1448,
                1 + 6 * 1448
            ]
        );
        // b → a: whole, with its metadata.
        assert_eq!(to_a.len(), 1);
        assert_eq!(to_a[0].meta, m);
        let c = l.counters();
        let a = &c["ports"]["a"];
        assert_eq!(a["segmented"], 1);
        assert_eq!(a["egress"]["counters"]["packets_in"], 7);
        assert_eq!(a["egress"]["counters"]["drops"]["ordinal"], 1);
        assert_eq!(c["ports"]["b"]["segmented"], 0);
        assert_eq!(c["ports"]["b"]["egress"]["counters"]["packets_in"], 1);
    }

    #[test]
    fn blackhole_drops_and_counts_and_trace_is_written() {
        use std::io::Write;
        use std::sync::{Arc, Mutex};
        #[derive(Clone, Default)]
        struct Buf(Arc<Mutex<Vec<u8>>>);
        impl Write for Buf {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut l = link(&P2P.replace('\n', ""));
        let buf = Buf::default();
        l.start_trace(Trace::new(
            Box::new(buf.clone()),
            Instant::ZERO,
            "mem".into(),
        ));
        l.receive(Instant::ZERO, 0, Packet::new(frame(0xB, 0xA, 100)), false);
        let mut out = Vec::new();
        l.poll(Instant::from_millis(5), &mut out);
        l.set_state(LinkState::Blackhole);
        l.receive(
            Instant::from_millis(6),
            0,
            Packet::new(frame(0xB, 0xA, 100)),
            false,
        );
        l.poll(Instant::from_millis(10), &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(l.ports()[0].stats.blackholed, 1);
        assert_eq!(l.stop_trace().unwrap().finish().unwrap(), 7);
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            vec![
                "+ 0.000000 a b ip 100 ------- 0 a b 1 0",
                "- 0.000000 a b ip 100 ------- 0 a b 1 0",
                "r 0.001000 a b ip 100 ------- 0 a b 1 0",
                "+ 0.001000 a b ip 100 ------- 0 a b 1 0",
                "- 0.001000 a b ip 100 ------- 0 a b 1 0",
                "r 0.001000 a b ip 100 ------- 0 a b 1 0",
                "d 0.006000 a b ip 100 ------- 0 a b 0 0",
            ]
        );
    }
}
