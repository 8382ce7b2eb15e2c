//! Summary statistics, pure and I/O-free: distributions of nanosecond samples (delay,
//! lateness) and what a sequence of received sequence numbers says about loss, duplication
//! and reordering.

use std::collections::HashSet;

use serde::Serialize;

/// Distribution of a set of nanosecond samples. Percentiles use the nearest-rank method
/// (the median of an even count is the lower middle sample); `stdev` is the population
/// standard deviation. All fields are `None` when there are no samples.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Distribution {
    /// Number of samples.
    pub count: u64,
    /// Smallest sample.
    pub min_ns: Option<u64>,
    /// Arithmetic mean.
    pub mean_ns: Option<f64>,
    /// 50th percentile.
    pub median_ns: Option<u64>,
    /// 99th percentile.
    pub p99_ns: Option<u64>,
    /// Largest sample.
    pub max_ns: Option<u64>,
    /// Population standard deviation.
    pub stdev_ns: Option<f64>,
}

/// Nearest-rank percentile (`p` in (0, 1]) of sorted, non-empty samples.
fn nearest_rank(sorted: &[u64], p: f64) -> u64 {
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

impl Distribution {
    /// The distribution of `samples` (sorted in place).
    pub fn of(samples: &mut [u64]) -> Distribution {
        if samples.is_empty() {
            return Distribution::default();
        }
        samples.sort_unstable();
        let n = samples.len() as f64;
        let mean = samples.iter().map(|&x| x as f64).sum::<f64>() / n;
        let var = samples
            .iter()
            .map(|&x| (x as f64 - mean).powi(2))
            .sum::<f64>()
            / n;
        Distribution {
            count: samples.len() as u64,
            min_ns: Some(samples[0]),
            mean_ns: Some(mean),
            median_ns: Some(nearest_rank(samples, 0.5)),
            p99_ns: Some(nearest_rank(samples, 0.99)),
            max_ns: Some(samples[samples.len() - 1]),
            stdev_ns: Some(var.sqrt()),
        }
    }
}

/// What the received sequence numbers say, in arrival order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SequenceStats {
    /// Distinct sequence numbers received.
    pub unique: u64,
    /// Datagrams whose sequence number had already arrived.
    pub duplicates: u64,
    /// Datagrams that arrived after one with a higher sequence number (duplicates excluded).
    pub reordered: u64,
    /// Missing sequence numbers: `expected − unique`, never negative.
    pub lost: u64,
    /// How many datagrams were expected: `--expect`, or highest sequence seen + 1 (the sender
    /// starts at 0), or 0 when nothing arrived.
    pub expected: u64,
    /// Highest sequence number seen.
    pub highest_seq: Option<u32>,
}

/// Loss, duplicates and reordering from sequence numbers in arrival order. With `expect`
/// the loss is counted against that many datagrams (sequence numbers 0..expect), which also
/// sees losses after the highest one that arrived; otherwise against the highest seen.
pub fn sequence_stats(seqs: impl IntoIterator<Item = u32>, expect: Option<u64>) -> SequenceStats {
    let mut seen = HashSet::new();
    let mut st = SequenceStats::default();
    for seq in seqs {
        if !seen.insert(seq) {
            st.duplicates += 1;
            continue;
        }
        match st.highest_seq {
            Some(h) if seq < h => st.reordered += 1,
            _ => st.highest_seq = Some(seq),
        }
    }
    st.unique = seen.len() as u64;
    st.expected = match (expect, st.highest_seq) {
        (Some(n), _) => n,
        (None, Some(h)) => u64::from(h) + 1,
        (None, None) => 0,
    };
    st.lost = st.expected.saturating_sub(st.unique);
    st
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distribution_of_known_samples() {
        let mut s: Vec<u64> = (1..=100).rev().collect();
        let d = Distribution::of(&mut s);
        assert_eq!(d.count, 100);
        assert_eq!(d.min_ns, Some(1));
        assert_eq!(d.max_ns, Some(100));
        assert_eq!(d.median_ns, Some(50));
        assert_eq!(d.p99_ns, Some(99));
        assert_eq!(d.mean_ns, Some(50.5));
        let sd = d.stdev_ns.unwrap();
        assert!((sd - 28.866_070_047_722_12).abs() < 1e-9, "{sd}");
    }

    #[test]
    fn distribution_of_one_and_none() {
        let d = Distribution::of(&mut [7]);
        assert_eq!(
            (d.min_ns, d.median_ns, d.p99_ns, d.max_ns),
            (Some(7), Some(7), Some(7), Some(7))
        );
        assert_eq!(d.stdev_ns, Some(0.0));
        assert_eq!(Distribution::of(&mut []), Distribution::default());
    }

    #[test]
    fn in_order_without_loss() {
        let st = sequence_stats(0..1000, None);
        assert_eq!(
            (st.unique, st.lost, st.duplicates, st.reordered),
            (1000, 0, 0, 0)
        );
        assert_eq!(st.expected, 1000);
        assert_eq!(st.highest_seq, Some(999));
    }

    #[test]
    fn gaps_are_losses() {
        let st = sequence_stats([0, 1, 3, 4, 7], None);
        assert_eq!((st.unique, st.expected, st.lost), (5, 8, 3));
        assert_eq!((st.duplicates, st.reordered), (0, 0));
    }

    #[test]
    fn expect_counts_tail_losses() {
        let st = sequence_stats([0, 1, 2], Some(10));
        assert_eq!((st.expected, st.lost), (10, 7));
    }

    #[test]
    fn duplicates_and_reordering() {
        // 2 arrives after 3 (reordered), 3 arrives twice (duplicate), 0 arrives last (reordered).
        let st = sequence_stats([1, 3, 2, 3, 4, 0], None);
        assert_eq!(st.unique, 5);
        assert_eq!(st.duplicates, 1);
        assert_eq!(st.reordered, 2);
        assert_eq!(st.lost, 0);
    }

    #[test]
    fn a_late_duplicate_is_not_also_reordered() {
        let st = sequence_stats([0, 1, 2, 1], None);
        assert_eq!((st.duplicates, st.reordered), (1, 0));
    }

    #[test]
    fn nothing_received() {
        let st = sequence_stats(std::iter::empty(), None);
        assert_eq!(st, SequenceStats::default());
        let st = sequence_stats(std::iter::empty(), Some(5));
        assert_eq!((st.expected, st.lost), (5, 5));
    }
}
