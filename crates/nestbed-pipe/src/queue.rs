//! Queue stage: where packets wait for the bandwidth server.
//!
//! The queue holds every packet that passed the loss stage and has not yet
//! left the bandwidth stage, *including the frame being serialized*, as in
//! Dummynet (which Emulab's delay nodes ran). ns-2 counts only the packets
//! waiting behind the one on the wire, so an ns-2 `limit_` of N corresponds
//! roughly to N + 1 here.
//!
//! Admission is DropTail against a hard limit in packets or bytes, with
//! optional RED in front of it (see [`crate::red`]). A packet that would
//! exceed the limit is dropped; queued packets are never dropped, not even
//! when a new, smaller limit is set at run time (the queue then drains
//! below it before admitting again).

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::bandwidth::ETHERNET_OVERHEAD_BYTES;
use crate::error::Problems;
use crate::packet::Packet;
use crate::red::RedParams;
use crate::time::Instant;

/// Smallest queue limit [`bdp_queue_limit`] ever returns, in packets.
pub const MIN_DEFAULT_QUEUE_PACKETS: u32 = 50;

/// Length of a full-sized Ethernet frame for a 1500-byte MTU, without
/// preamble, FCS and inter-frame gap.
pub const FULL_FRAME_BYTES: u32 = 1514;

/// Wire size of a full-sized Ethernet frame: [`FULL_FRAME_BYTES`] plus
/// [`ETHERNET_OVERHEAD_BYTES`].
pub const FULL_FRAME_WIRE_BYTES: u32 = FULL_FRAME_BYTES + ETHERNET_OVERHEAD_BYTES;

/// A hard queue limit. JSON: `{"packets": 50}` or `{"bytes": 75000}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QueueLimit {
    /// At most this many packets in the queue.
    Packets(u32),
    /// At most this many bytes (sum of wire lengths) in the queue.
    Bytes(u64),
}

/// Parameters of the queue stage.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueParams {
    /// Hard limit. `None` (the default) means the bandwidth-delay-product
    /// limit computed by [`crate::PipeParams::default_queue_limit`]; the
    /// value in force is reported by [`crate::Pipe::queue_limit`] so the
    /// caller can announce it.
    #[serde(default)]
    pub limit: Option<QueueLimit>,
    /// RED (or gentle RED) ahead of the hard limit; `None` is plain DropTail.
    #[serde(default)]
    pub red: Option<RedParams>,
}

impl QueueParams {
    pub(crate) fn check(&self, problems: &mut Problems) {
        match self.limit {
            Some(QueueLimit::Packets(0)) => {
                problems.push("queue.limit.packets", "must be at least 1 packet")
            }
            Some(QueueLimit::Bytes(0)) => {
                problems.push("queue.limit.bytes", "must be at least 1 byte")
            }
            _ => {}
        }
        if let Some(red) = &self.red {
            red.check("queue.red", problems);
        }
    }
}

/// Queue limit in packets for a path of `rate_bps` and round-trip time
/// `rtt_ns`: the bandwidth-delay product in packets of `packet_wire_bytes`
/// (rounded up), but never less than [`MIN_DEFAULT_QUEUE_PACKETS`].
/// An unlimited rate (0) gives the minimum.
///
/// ```
/// # use nestbed_pipe::{bdp_queue_limit, FULL_FRAME_WIRE_BYTES};
/// // 100 Mb/s × 100 ms = 1.25 MB = 812.7 full-size frames on the wire.
/// assert_eq!(bdp_queue_limit(100_000_000, 100_000_000, FULL_FRAME_WIRE_BYTES), 813);
/// assert_eq!(bdp_queue_limit(10_000_000, 10_000_000, FULL_FRAME_WIRE_BYTES), 50);
/// ```
pub fn bdp_queue_limit(rate_bps: u64, rtt_ns: u64, packet_wire_bytes: u32) -> u32 {
    if rate_bps == 0 || packet_wire_bytes == 0 {
        return MIN_DEFAULT_QUEUE_PACKETS;
    }
    let bit_ns = u128::from(rate_bps) * u128::from(rtt_ns);
    let per_packet = u128::from(packet_wire_bytes) * 8 * 1_000_000_000;
    let packets = u32::try_from(bit_ns.div_ceil(per_packet)).unwrap_or(u32::MAX);
    packets.max(MIN_DEFAULT_QUEUE_PACKETS)
}

/// When and how a packet leaves: fixed as soon as it reaches the head of
/// the queue (so a packet in service keeps its times across parameter
/// changes).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Plan {
    /// When its last bit leaves the bandwidth stage.
    pub(crate) transmitted: Instant,
    /// When it leaves the delay stage.
    pub(crate) due: Instant,
    /// When its duplicate leaves, if it is duplicated.
    pub(crate) duplicate_due: Option<Instant>,
    /// The bit to flip, if it is corrupted.
    pub(crate) corrupt_bit: Option<usize>,
}

/// A packet waiting in (or being served from) the queue.
#[derive(Debug)]
pub(crate) struct Queued {
    pub(crate) packet: Packet,
    pub(crate) ordinal: u64,
    pub(crate) arrived: Instant,
    pub(crate) plan: Option<Plan>,
}

/// The FIFO with its byte and wire-frame counts.
#[derive(Debug, Default)]
pub(crate) struct Fifo {
    entries: VecDeque<Queued>,
    bytes: u64,
    frames: u64,
}

impl Fifo {
    pub(crate) fn len(&self) -> u64 {
        self.entries.len() as u64
    }

    /// Frames on the wire queued: the packets, a super-frame counting its
    /// segments.
    pub(crate) fn frames(&self) -> u64 {
        self.frames
    }

    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether a packet of `wire_len` bytes in `segments` wire frames would
    /// exceed `limit`.
    pub(crate) fn would_overflow(&self, limit: QueueLimit, wire_len: u32, segments: u32) -> bool {
        match limit {
            QueueLimit::Packets(n) => self.frames + u64::from(segments) > u64::from(n),
            QueueLimit::Bytes(b) => self.bytes + u64::from(wire_len) > b,
        }
    }

    pub(crate) fn push(&mut self, entry: Queued) {
        self.bytes += u64::from(entry.packet.wire_len());
        self.frames += u64::from(entry.packet.segments());
        self.entries.push_back(entry);
    }

    pub(crate) fn front(&self) -> Option<&Queued> {
        self.entries.front()
    }

    pub(crate) fn front_mut(&mut self) -> Option<&mut Queued> {
        self.entries.front_mut()
    }

    pub(crate) fn pop(&mut self) -> Option<Queued> {
        let entry = self.entries.pop_front()?;
        self.bytes -= u64::from(entry.packet.wire_len());
        self.frames -= u64::from(entry.packet.segments());
        Some(entry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bdp_limit_rounds_up_and_has_a_floor() {
        // 1 Gb/s × 10 ms = 1.25 MB / 1538 B = 812.74 → 813
        assert_eq!(bdp_queue_limit(1_000_000_000, 10_000_000, 1538), 813);
        // exactly 100 packets of 1000 bytes
        assert_eq!(bdp_queue_limit(8_000_000, 100_000_000, 1000), 100);
        assert_eq!(bdp_queue_limit(8_000_000, 100_000_001, 1000), 101);
        assert_eq!(bdp_queue_limit(56_000, 600_000_000, 1538), 50);
        assert_eq!(bdp_queue_limit(0, 1_000_000_000, 1538), 50);
        assert_eq!(bdp_queue_limit(u64::MAX, u64::MAX, 1), u32::MAX);
    }

    #[test]
    fn fifo_limits_in_packets_and_bytes() {
        let mut q = Fifo::default();
        for i in 0..3 {
            q.push(Queued {
                packet: Packet::with_wire_len(Vec::new(), 100),
                ordinal: i,
                arrived: Instant::ZERO,
                plan: None,
            });
        }
        assert_eq!((q.len(), q.bytes()), (3, 300));
        assert!(q.would_overflow(QueueLimit::Packets(3), 1, 1));
        assert!(!q.would_overflow(QueueLimit::Packets(4), 1, 1));
        assert!(q.would_overflow(QueueLimit::Packets(4), 1, 2));
        assert!(!q.would_overflow(QueueLimit::Bytes(400), 100, 1));
        assert!(q.would_overflow(QueueLimit::Bytes(400), 101, 1));
        assert_eq!(q.pop().map(|e| e.ordinal), Some(0));
        assert_eq!((q.len(), q.bytes()), (2, 200));
    }
}
