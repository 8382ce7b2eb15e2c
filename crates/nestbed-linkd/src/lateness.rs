//! Timer lateness: how late frames left compared to their due time.
//!
//! Every frame a pipe hands out has a due time; the worker sends it at the
//! time it got it. `sent − due` is the emulator's timing error, measured
//! per worker thread into a fixed histogram and reported by `counters`.

use serde::Serialize;

/// Upper bounds (exclusive) of the buckets in nanoseconds; the last bucket
/// holds everything at or above the last bound.
pub const BOUNDS_NS: [u64; 5] = [1_000, 10_000, 50_000, 100_000, 1_000_000];

/// Bucket labels, in order, for the JSON report.
pub const LABELS: [&str; 6] = [
    "lt_1us", "lt_10us", "lt_50us", "lt_100us", "lt_1ms", "ge_1ms",
];

/// A lateness histogram.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Histogram {
    counts: [u64; 6],
    max_ns: u64,
    total: u64,
    sum_ns: u128,
    sum_sq_ns: u128,
}

/// The JSON form of a [`Histogram`].
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct HistogramReport {
    /// Frames measured.
    pub frames: u64,
    /// Bucket counts by label.
    pub buckets: serde_json::Map<String, serde_json::Value>,
    /// Largest lateness seen, ns.
    pub max_ns: u64,
    /// Mean lateness, ns.
    pub mean_ns: f64,
    /// Sum of the lateness and of its squares, ns and ns²: two reports' difference gives
    /// the mean and standard deviation of the frames between them.
    pub sum_ns: f64,
    /// See `sum_ns`.
    pub sum_sq_ns: f64,
}

impl Histogram {
    /// Records one frame that left `late_ns` after its due time.
    pub fn record(&mut self, late_ns: u64) {
        let i = BOUNDS_NS
            .iter()
            .position(|&b| late_ns < b)
            .unwrap_or(BOUNDS_NS.len());
        self.counts[i] += 1;
        self.max_ns = self.max_ns.max(late_ns);
        self.total += 1;
        self.sum_ns += u128::from(late_ns);
        self.sum_sq_ns += u128::from(late_ns) * u128::from(late_ns);
    }

    /// Bucket counts in the order of [`LABELS`].
    pub fn counts(&self) -> [u64; 6] {
        self.counts
    }

    /// Adds another histogram into this one.
    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(other.counts) {
            *a += b;
        }
        self.max_ns = self.max_ns.max(other.max_ns);
        self.total += other.total;
        self.sum_ns += other.sum_ns;
        self.sum_sq_ns += other.sum_sq_ns;
    }

    /// The JSON form.
    pub fn report(&self) -> HistogramReport {
        HistogramReport {
            frames: self.total,
            buckets: LABELS
                .iter()
                .zip(self.counts)
                .map(|(l, c)| (l.to_string(), c.into()))
                .collect(),
            max_ns: self.max_ns,
            mean_ns: if self.total == 0 {
                0.0
            } else {
                self.sum_ns as f64 / self.total as f64
            },
            sum_ns: self.sum_ns as f64,
            sum_sq_ns: self.sum_sq_ns as f64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_and_max() {
        let samples: [u64; 9] = [
            0, 999, 1_000, 9_999, 49_999, 99_999, 999_999, 1_000_000, 5_000_000,
        ];
        let mut h = Histogram::default();
        for ns in samples {
            h.record(ns);
        }
        assert_eq!(h.counts(), [2, 2, 1, 1, 1, 2]);
        let r = h.report();
        assert_eq!(r.frames, 9);
        assert_eq!(r.max_ns, 5_000_000);
        assert_eq!(r.buckets["ge_1ms"], 2);
        // Exact in f64: every partial sum is an integer below 2^53.
        assert_eq!(r.sum_ns, samples.iter().sum::<u64>() as f64);
        assert_eq!(
            r.sum_sq_ns,
            samples.iter().map(|&n| n * n).sum::<u64>() as f64
        );
        let mut g = Histogram::default();
        g.merge(&h);
        assert_eq!(g, h);
    }
}
