//! Per-pipe counters and drop causes.

use serde::{Deserialize, Serialize};

/// Why a packet was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DropCause {
    /// The random loss model (Bernoulli or Gilbert-Elliott).
    Loss,
    /// Its ordinal was in the drop list.
    Ordinal,
    /// The queue was at its hard limit (packets or bytes).
    QueueFull,
    /// RED's probabilistic ("unforced") early drop.
    RedEarly,
    /// RED's forced drop: average queue at or above maxthresh
    /// (twice maxthresh with gentle RED).
    RedForced,
}

/// Drops by cause.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DropCounters {
    /// Random loss model drops.
    pub loss: u64,
    /// Drop-by-ordinal drops.
    pub ordinal: u64,
    /// Queue hard-limit drops.
    pub queue_full: u64,
    /// RED early (probabilistic) drops.
    pub red_early: u64,
    /// RED forced drops.
    pub red_forced: u64,
}

impl DropCounters {
    /// All drops.
    pub fn total(&self) -> u64 {
        self.loss + self.ordinal + self.queue_full + self.red_early + self.red_forced
    }

    /// The counter for `cause`.
    pub fn get(&self, cause: DropCause) -> u64 {
        match cause {
            DropCause::Loss => self.loss,
            DropCause::Ordinal => self.ordinal,
            DropCause::QueueFull => self.queue_full,
            DropCause::RedEarly => self.red_early,
            DropCause::RedForced => self.red_forced,
        }
    }

    pub(crate) fn count(&mut self, cause: DropCause) {
        let c = match cause {
            DropCause::Loss => &mut self.loss,
            DropCause::Ordinal => &mut self.ordinal,
            DropCause::QueueFull => &mut self.queue_full,
            DropCause::RedEarly => &mut self.red_early,
            DropCause::RedForced => &mut self.red_forced,
        };
        *c += 1;
    }
}

/// Everything a pipe counts. Bytes are wire lengths
/// ([`Packet::wire_len`](crate::Packet::wire_len)), without Ethernet overhead.
///
/// Counters are never reset by [`Pipe::set_params`](crate::Pipe::set_params).
/// The queue figures describe the state at the last `enqueue` or
/// `dequeue_ready` call.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Counters {
    /// Packets offered to the pipe (before any drop).
    pub packets_in: u64,
    /// Bytes offered to the pipe.
    pub bytes_in: u64,
    /// Packets handed out by `dequeue_ready`, duplicates included.
    pub packets_out: u64,
    /// Bytes handed out by `dequeue_ready`, duplicates included.
    pub bytes_out: u64,
    /// Drops by cause.
    pub drops: DropCounters,
    /// Packets in the queue now (waiting or being serialized).
    pub queue_packets: u64,
    /// Bytes in the queue now.
    pub queue_bytes: u64,
    /// Largest `queue_packets` seen.
    pub queue_peak_packets: u64,
    /// Largest `queue_bytes` seen.
    pub queue_peak_bytes: u64,
    /// Packets past the bandwidth stage, waiting out their delay.
    pub delay_line_packets: u64,
    /// Extra copies made by duplication.
    pub duplicates: u64,
    /// Packets that had a bit flipped.
    pub corrupted: u64,
    /// Nanoseconds the bandwidth stage spent serializing: the link's busy
    /// time, whose share of a span says how much of it the link was in use
    /// (0 without a rate; frames a burst lets through count none).
    #[serde(default)]
    pub busy_ns: u64,
}
