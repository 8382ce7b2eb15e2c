//! Summaries of samples: count, min, mean, percentiles, max (seconds in, seconds out).

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
    /// Median (nearest rank).
    pub p50_s: Option<f64>,
    /// 90th percentile (nearest rank).
    pub p90_s: Option<f64>,
    /// 99th percentile (nearest rank).
    pub p99_s: Option<f64>,
    /// Largest sample.
    pub max_s: Option<f64>,
    /// Sum of the samples.
    pub total_s: f64,
}

/// Nearest-rank percentile of sorted, non-empty `v`.
fn rank(v: &[i64], p: f64) -> f64 {
    let i = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[i.clamp(1, v.len()) - 1] as f64 / 1e9
}

impl Stats {
    /// Summarizes durations given in nanoseconds.
    pub fn of_ns(samples: impl Iterator<Item = i64>) -> Stats {
        let mut v: Vec<i64> = samples.collect();
        if v.is_empty() {
            return Stats::default();
        }
        v.sort_unstable();
        let total: i128 = v.iter().map(|&x| i128::from(x)).sum();
        Stats {
            count: v.len(),
            min_s: Some(v[0] as f64 / 1e9),
            mean_s: Some(total as f64 / v.len() as f64 / 1e9),
            p50_s: Some(rank(&v, 50.0)),
            p90_s: Some(rank(&v, 90.0)),
            p99_s: Some(rank(&v, 99.0)),
            max_s: Some(v[v.len() - 1] as f64 / 1e9),
            total_s: total as f64 / 1e9,
        }
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
}
