//! Summaries of samples: count, min, mean, percentiles, max (nanoseconds in, seconds out),
//! kept in bounded memory so that a capture of any length can be summarized as it streams.
//!
//! Count, min, max and the sum (hence the mean) are exact. Percentiles are exact (nearest
//! rank) while a distribution holds at most [`EXACT`] samples; past that the samples move
//! into a log-bucketed histogram in the manner of HdrHistogram: every power of two is split
//! into [`SUB`] equal buckets, so a bucket is at most 1/512 of its lower bound wide, and
//! reporting its middle is within 1/1024 (< 0.1 %) of any sample in it. Buckets are allocated
//! one octave (2 KiB) at a time, only for the octaves that occur.

use serde::Serialize;

/// A distribution of durations, in seconds. Empty samples give a count of 0 and no values.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Stats {
    /// Number of samples.
    pub count: usize,
    /// Smallest sample.
    pub min_s: Option<f64>,
    /// Arithmetic mean.
    pub mean_s: Option<f64>,
    /// Median (nearest rank; within 0.1 % past [`EXACT`] samples).
    pub p50_s: Option<f64>,
    /// 90th percentile (nearest rank; within 0.1 % past [`EXACT`] samples).
    pub p90_s: Option<f64>,
    /// 99th percentile (nearest rank; within 0.1 % past [`EXACT`] samples).
    pub p99_s: Option<f64>,
    /// Largest sample.
    pub max_s: Option<f64>,
    /// Sum of the samples.
    pub total_s: f64,
}

/// Samples kept as they are before switching to the histogram: small transfers (most of a
/// busy capture's connections) get exact percentiles for at most 2 KiB each.
pub const EXACT: usize = 256;

/// Sub-bucket bits: `1 << SUB_BITS` buckets per power of two.
const SUB_BITS: u32 = 9;
/// Buckets per power of two (and per chunk).
pub const SUB: usize = 1 << SUB_BITS;

type Chunk = Box<[u32; SUB]>;

/// The accumulating form of [`Stats`]: exact count, min, max and sum; percentiles from the
/// exact samples or, past [`EXACT`] of them, from the histogram.
#[derive(Clone, Debug, Default)]
pub struct Dist {
    count: u64,
    min: i64,
    max: i64,
    sum: i128,
    exact: Vec<i64>,
    /// Chunk 0 counts the values 0..SUB one by one; chunk `k ≥ 1` the octave
    /// `[2^(k+SUB_BITS-1), 2^(k+SUB_BITS))` in SUB buckets of width `2^(k-1)`. `None` for the
    /// octaves no sample fell in. Empty while the samples are still exact.
    chunks: Vec<Option<Chunk>>,
}

/// Chunk and bucket of a non-negative value.
fn bucket(v: i64) -> (usize, usize) {
    let v = v.max(0) as u64;
    if v < SUB as u64 {
        return (0, v as usize);
    }
    let e = 63 - v.leading_zeros(); // ≥ SUB_BITS
    let shift = e - SUB_BITS;
    let k = (shift + 1) as usize;
    (k, ((v >> shift) as usize) - SUB)
}

/// The value a bucket stands for: its middle (its only value for chunks 0 and 1).
fn middle(k: usize, i: usize) -> i64 {
    if k == 0 {
        return i as i64;
    }
    let shift = (k - 1) as u32;
    let lower = ((SUB + i) as i64) << shift;
    lower + ((1i64 << shift) - 1) / 2
}

impl Dist {
    /// Adds one sample, in nanoseconds (negative ones count as 0 in the histogram).
    pub fn add(&mut self, v: i64) {
        if self.count == 0 {
            self.min = v;
            self.max = v;
        } else {
            self.min = self.min.min(v);
            self.max = self.max.max(v);
        }
        self.count += 1;
        self.sum += i128::from(v);
        if self.chunks.is_empty() {
            self.exact.push(v);
            if self.exact.len() > EXACT {
                for x in std::mem::take(&mut self.exact) {
                    self.count_in_histogram(x);
                }
            }
        } else {
            self.count_in_histogram(v);
        }
    }

    fn count_in_histogram(&mut self, v: i64) {
        let (k, i) = bucket(v);
        if self.chunks.len() <= k {
            self.chunks.resize_with(k + 1, || None);
        }
        let chunk = self.chunks[k].get_or_insert_with(|| Box::new([0; SUB]));
        chunk[i] += 1;
    }

    /// Number of samples so far.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Nearest-rank percentile `p` of the samples, ns (`None` when empty).
    fn percentile(&self, p: f64, sorted: &[i64]) -> Option<i64> {
        if self.count == 0 {
            return None;
        }
        let rank = (((p / 100.0) * self.count as f64).ceil() as u64).clamp(1, self.count);
        if self.chunks.is_empty() {
            return Some(sorted[rank as usize - 1]);
        }
        let mut seen = 0u64;
        for (k, chunk) in self.chunks.iter().enumerate() {
            let Some(chunk) = chunk else { continue };
            for (i, &n) in chunk.iter().enumerate() {
                seen += u64::from(n);
                if seen >= rank {
                    return Some(middle(k, i).clamp(self.min, self.max));
                }
            }
        }
        Some(self.max)
    }

    /// The summary, in seconds.
    pub fn stats(&self) -> Stats {
        if self.count == 0 {
            return Stats::default();
        }
        let mut sorted = self.exact.clone();
        sorted.sort_unstable();
        let s = |v: Option<i64>| v.map(|v| v as f64 / 1e9);
        Stats {
            count: self.count as usize,
            min_s: s(Some(self.min)),
            mean_s: Some(self.sum as f64 / self.count as f64 / 1e9),
            p50_s: s(self.percentile(50.0, &sorted)),
            p90_s: s(self.percentile(90.0, &sorted)),
            p99_s: s(self.percentile(99.0, &sorted)),
            max_s: s(Some(self.max)),
            total_s: self.sum as f64 / 1e9,
        }
    }
}

impl Stats {
    /// Summarizes durations given in nanoseconds.
    pub fn of_ns(samples: impl Iterator<Item = i64>) -> Stats {
        let mut d = Dist::default();
        samples.for_each(|v| d.add(v));
        d.stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_nearest_rank() {
        let s = Stats::of_ns((1..=100).map(|i| i * 1_000_000));
        assert_eq!(s.count, 100);
        assert_eq!(s.min_s, Some(0.001));
        assert_eq!(s.p50_s, Some(0.050));
        assert_eq!(s.p90_s, Some(0.090));
        assert_eq!(s.p99_s, Some(0.099));
        assert_eq!(s.max_s, Some(0.100));
        assert!((s.mean_s.unwrap() - 0.0505).abs() < 1e-12);
        assert!((s.total_s - 5.05).abs() < 1e-9);
    }

    #[test]
    fn no_samples_no_values() {
        let s = Stats::of_ns(std::iter::empty());
        assert_eq!(s.count, 0);
        assert_eq!(s.mean_s, None);
    }

    #[test]
    fn buckets_cover_values_in_order() {
        let mut last = (0, 0);
        for v in (0..5000).chain([1 << 20, (1 << 20) + 1, i64::MAX / 2, i64::MAX]) {
            let b = bucket(v);
            assert!(b >= last, "{v}: {b:?} before {last:?}");
            last = b;
            let m = middle(b.0, b.1);
            assert!((m - v).abs() as f64 <= v as f64 / 1024.0 + 0.5, "{v} → {m}");
        }
        assert_eq!(bucket(511), (0, 511));
        assert_eq!(bucket(512), (1, 0));
        assert_eq!(bucket(1024), (2, 0));
        assert_eq!(bucket(1025), (2, 0));
    }

    /// The histogram's percentiles agree with the exact ones (sorted samples, nearest rank)
    /// within 0.1 % on samples spread over nine decades, heavy-tailed like spacing.
    #[test]
    fn histogram_percentiles_within_a_thousandth() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut samples = Vec::new();
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let u = (x >> 11) as f64 / (1u64 << 53) as f64;
            samples.push((10f64.powf(1.0 + 9.0 * u * u)) as i64);
        }
        let mut d = Dist::default();
        samples.iter().for_each(|&v| d.add(v));
        samples.sort_unstable();
        let exact = |p: f64| {
            let i = ((p / 100.0) * samples.len() as f64).ceil() as usize;
            samples[i.clamp(1, samples.len()) - 1] as f64 / 1e9
        };
        let s = d.stats();
        let sum: i128 = samples.iter().map(|&v| i128::from(v)).sum();
        assert_eq!(s.count, samples.len());
        assert_eq!(s.min_s, Some(samples[0] as f64 / 1e9));
        assert_eq!(s.max_s, Some(*samples.last().unwrap() as f64 / 1e9));
        assert_eq!(s.total_s, sum as f64 / 1e9);
        for (p, got) in [(50.0, s.p50_s), (90.0, s.p90_s), (99.0, s.p99_s)] {
            let (got, want) = (got.unwrap(), exact(p));
            assert!(
                (got - want).abs() <= 1e-3 * want,
                "p{p}: {got} against {want}"
            );
        }
        // Every percentile, not only the three reported.
        for p in 1..=100 {
            let got = d.percentile(f64::from(p), &[]).unwrap() as f64 / 1e9;
            let want = exact(f64::from(p));
            assert!((got - want).abs() <= 1e-3 * want, "p{p}: {got} vs {want}");
        }
    }
}
