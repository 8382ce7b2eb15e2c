//! Bandwidth stage: the server that serializes frames onto the link.
//!
//! A frame of `L` bytes takes exactly `(L + overhead_bytes) × 8 / rate_bps`
//! seconds. Times are kept as exact rationals (nanoseconds × `rate_bps`),
//! so a million back-to-back frames end exactly where the arithmetic says,
//! with no drift from rounding each frame; a frame is handed to the delay
//! stage at the first whole nanosecond at or after its last bit.
//!
//! Without a burst the server is a plain serializer. With `burst_bytes`
//! it is a token bucket of that depth filled at `rate_bps` (as a
//! generic-cell-rate algorithm): an idle link may send up to `burst_bytes`
//! back to back, then falls back to the rate. The bucket starts full.

use serde::{Deserialize, Serialize};

use crate::error::Problems;
use crate::time::Instant;

/// Ethernet's per-frame cost on the wire beyond the frame itself:
/// preamble and start-of-frame delimiter (8), FCS (4) and the minimum
/// inter-frame gap (12), in bytes.
pub const ETHERNET_OVERHEAD_BYTES: u32 = 24;

/// Highest accepted rate: 10 Tb/s (keeps the exact arithmetic in `u128`).
pub const MAX_RATE_BPS: u64 = 10_000_000_000_000;

/// Parameters of the bandwidth stage.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BandwidthParams {
    /// Link rate in bits per second; 0 means unlimited (no serialization
    /// delay at all).
    #[serde(default)]
    pub rate_bps: u64,
    /// Token-bucket depth in bytes (frame plus overhead bytes); 0, the
    /// default, means no burst: every frame waits its full serialization
    /// time. A non-zero burst should be at least one full frame (1538).
    #[serde(default)]
    pub burst_bytes: u64,
    /// Bytes added to every frame's length for serialization; defaults to
    /// [`ETHERNET_OVERHEAD_BYTES`]. Set 0 to shape frame bytes only.
    #[serde(default = "default_overhead")]
    pub overhead_bytes: u32,
}

fn default_overhead() -> u32 {
    ETHERNET_OVERHEAD_BYTES
}

impl Default for BandwidthParams {
    fn default() -> Self {
        BandwidthParams {
            rate_bps: 0,
            burst_bytes: 0,
            overhead_bytes: ETHERNET_OVERHEAD_BYTES,
        }
    }
}

impl BandwidthParams {
    pub(crate) fn check(&self, problems: &mut Problems) {
        problems.at_most("bandwidth.rate_bps", self.rate_bps, MAX_RATE_BPS);
        problems.at_most("bandwidth.burst_bytes", self.burst_bytes, 1 << 40);
        problems.at_most(
            "bandwidth.overhead_bytes",
            self.overhead_bytes.into(),
            1 << 16,
        );
    }
}

const NS_PER_S: u128 = 1_000_000_000;

/// The bandwidth server's state.
///
/// Exact times are kept in units of 1/`rate_bps` nanoseconds ("scaled").
#[derive(Debug)]
pub(crate) struct Server {
    params: BandwidthParams,
    /// Theoretical arrival time of the token bucket (GCRA), scaled: the
    /// exact instant the last bit of the previous frame would have left
    /// at the configured rate.
    tat: u128,
    /// Exact time the previous frame left, scaled.
    last_scaled: u128,
    /// The same, rounded up to whole nanoseconds.
    last_ns: u64,
    /// Time spent serializing, ns: each frame counts from the later of
    /// its arrival and the previous frame's end to its own end. Within a
    /// busy period the sum telescopes to its end less its start, so the
    /// rounding of each frame to whole nanoseconds does not add up.
    busy_ns: u64,
}

impl Server {
    pub(crate) fn new(params: &BandwidthParams) -> Self {
        Server {
            params: params.clone(),
            tat: 0,
            last_scaled: 0,
            last_ns: 0,
            busy_ns: 0,
        }
    }

    /// Applies new parameters. A frame already in service keeps the time
    /// it was given; the next one is served at the new rate. On a rate
    /// change the exact times are rounded up to whole nanoseconds once.
    pub(crate) fn set_params(&mut self, params: &BandwidthParams) {
        let old = u128::from(self.params.rate_bps);
        let new = u128::from(params.rate_bps);
        if old != new {
            self.tat = if old == 0 {
                0 // the bucket starts full
            } else {
                self.tat.div_ceil(old) * new
            };
            self.last_scaled = u128::from(self.last_ns) * new;
        }
        self.params = params.clone();
    }

    /// Serves `segments` frames of `wire_len` bytes in all (each frame
    /// pays the overhead) that entered the queue at `arrived`, after every
    /// frame served before them; returns when they have left the link
    /// entirely (rounded up to a whole nanosecond).
    pub(crate) fn serve(&mut self, arrived: Instant, wire_len: u32, segments: u32) -> Instant {
        let start = self.last_ns.max(arrived.as_nanos());
        let rate = u128::from(self.params.rate_bps);
        if rate == 0 {
            self.last_ns = start;
            return Instant::from_nanos(self.last_ns);
        }
        // It reaches the head of the queue when it arrives or when the
        // frame ahead of it has left, whichever is later.
        let head = (u128::from(arrived.as_nanos()) * rate).max(self.last_scaled);
        let overhead = u128::from(self.params.overhead_bytes) * u128::from(segments);
        let bits = (u128::from(wire_len) + overhead) * 8;
        self.tat = self.tat.max(head) + bits * NS_PER_S;
        let tolerance = u128::from(self.params.burst_bytes) * 8 * NS_PER_S;
        self.last_scaled = head.max(self.tat.saturating_sub(tolerance));
        self.last_ns = u64::try_from(self.last_scaled.div_ceil(rate)).unwrap_or(u64::MAX);
        // last_ns never falls below the previous frame's end nor this one's arrival.
        debug_assert!(self.last_ns >= start);
        self.busy_ns = self
            .busy_ns
            .saturating_add(self.last_ns.saturating_sub(start));
        Instant::from_nanos(self.last_ns)
    }

    /// Time spent serializing so far, ns (none without a rate).
    pub(crate) fn busy_ns(&self) -> u64 {
        self.busy_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(rate_bps: u64, burst_bytes: u64) -> Server {
        Server::new(&BandwidthParams {
            rate_bps,
            burst_bytes,
            overhead_bytes: ETHERNET_OVERHEAD_BYTES,
        })
    }

    #[test]
    fn back_to_back_frames_take_exact_serialization_time() {
        // 1000-byte frames + 24 bytes overhead = 8192 bits at 10 Mb/s = 819.2 µs.
        let mut s = server(10_000_000, 0);
        for n in 1..=10_000u64 {
            assert_eq!(s.serve(Instant::ZERO, 1000, 1).as_nanos(), n * 819_200);
        }
    }

    #[test]
    fn fractional_times_do_not_drift() {
        // 64-byte frames at 56 kb/s: 704 bits = 12 571 428.571… ns each.
        let mut s = server(56_000, 0);
        let mut last = 0;
        for n in 1..=100_000u128 {
            let exact_ceil = (n * 704 * NS_PER_S).div_ceil(56_000);
            last = s.serve(Instant::ZERO, 64, 1).as_nanos();
            assert_eq!(u128::from(last), exact_ceil);
        }
        assert_eq!(last, 1_257_142_857_143); // 100 000 × 704 / 56 000 s, rounded up
    }

    #[test]
    fn idle_link_starts_at_arrival() {
        let mut s = server(8_000_000, 0); // 1 byte per µs
        assert_eq!(
            s.serve(Instant::from_micros(100), 976, 1).as_nanos(),
            1_100_000
        );
        // Arrives long after the link went idle: no credit is carried over.
        assert_eq!(
            s.serve(Instant::from_micros(5_000), 976, 1).as_nanos(),
            6_000_000
        );
    }

    #[test]
    fn unlimited_rate_is_instant() {
        let mut s = server(0, 0);
        assert_eq!(
            s.serve(Instant::from_nanos(7), 1500, 1),
            Instant::from_nanos(7)
        );
    }

    #[test]
    fn burst_lets_a_full_bucket_through_then_paces() {
        // 1 byte/µs, bucket of 4 frames of 1000 bytes (976 + 24).
        let mut s = server(8_000_000, 4_000);
        let times: Vec<u64> = (0..7)
            .map(|_| s.serve(Instant::ZERO, 976, 1).as_nanos() / 1000)
            .collect();
        assert_eq!(times, vec![0, 0, 0, 0, 1000, 2000, 3000]);
        // The bucket emptied at 3 ms; by 5.5 ms it holds 2.5 frames: two
        // go at once, the third when half a frame more has accrued.
        let t = Instant::from_micros(5_500);
        let times: Vec<u64> = (0..4)
            .map(|_| s.serve(t, 976, 1).as_nanos() / 1000)
            .collect();
        assert_eq!(times, vec![5_500, 5_500, 6_000, 7_000]);
    }

    #[test]
    fn rate_change_applies_to_the_next_frame() {
        let mut s = server(8_000_000, 0);
        assert_eq!(s.serve(Instant::ZERO, 976, 1).as_nanos(), 1_000_000);
        s.set_params(&BandwidthParams {
            rate_bps: 16_000_000,
            ..BandwidthParams::default()
        });
        assert_eq!(s.serve(Instant::ZERO, 976, 1).as_nanos(), 1_500_000);
    }
}
