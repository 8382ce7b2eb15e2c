//! Delay stage: constant delay plus jitter, duplication and corruption.
//!
//! A packet's due time is `transmitted + delay_ns + jitter`, never earlier
//! than `transmitted`. By default the line is order-preserving: a packet is
//! never due before the one ahead of it (its due time is raised to its
//! predecessor's), which skews the jitter distribution upwards when jitter
//! is large compared to packet spacing. With `reorder` each packet keeps its
//! own due time and packets may overtake each other.
//!
//! Jitter distributions are the closed forms of netem's tables (iproute2
//! `netem/*.c`, scaled by `jitter_ns` as netem's `tabledist` does), and are
//! clipped like the tables to ±4·`jitter_ns` (a table entry is an `i16`
//! over `NETEM_DIST_SCALE` = 8192):
//! - `uniform`: uniform on [−jitter, +jitter] (netem's default with no
//!   table);
//! - `normal`: N(0, jitter²);
//! - `pareto`: jitter·(4/3)·(U^(−1/3) − 3/2), a Pareto of shape 3 and scale
//!   1 shifted to mean 0 (netem's `pareto.c`);
//! - `paretonormal`: jitter·(Φ⁻¹(q)/4 + (3/4)·(4/3)·((1−q)^(−1/3) − 3/2))
//!   with one uniform q for both parts, as netem's `paretonormal.c` mixes the
//!   two quantile functions at the same point (not a sum of independent
//!   draws).
//!
//! Netem's jitter correlation is not supported.
//!
//! Duplication and corruption are decided when a packet reaches the head
//! of the queue. A duplicate costs no queue space nor bandwidth (it is made
//! after the bottleneck) and gets its own jitter; corruption flips one
//! random bit of the original, never of the duplicate.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rand::RngExt;
use rand_distr::{Distribution, Normal, Pareto};
use rand_pcg::Pcg64;
use serde::{Deserialize, Serialize};

use crate::error::Problems;
use crate::packet::Packet;
use crate::time::Instant;

/// Longest accepted delay or jitter: one hour.
pub const MAX_DELAY_NS: u64 = 3_600_000_000_000;

/// Clip of the table-based distributions, in units of `jitter_ns`.
const TABLE_CLIP: f64 = 4.0;

/// Shape of the jitter distribution (see the module docs for the formulas).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JitterDistribution {
    /// Uniform on [−jitter, +jitter].
    #[default]
    Uniform,
    /// Normal with standard deviation `jitter_ns`.
    Normal,
    /// netem's Pareto table.
    Pareto,
    /// netem's paretonormal table (¼ normal + ¾ Pareto quantiles).
    Paretonormal,
}

/// Parameters of the delay stage.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DelayParams {
    /// Constant one-way delay in nanoseconds.
    #[serde(default)]
    pub delay_ns: u64,
    /// Jitter scale in nanoseconds (the half-width for `uniform`, the
    /// standard deviation parameter σ for the others); 0 means none.
    #[serde(default)]
    pub jitter_ns: u64,
    /// Shape of the jitter.
    #[serde(default)]
    pub distribution: JitterDistribution,
    /// Let packets overtake each other when jitter says so. Off by default.
    #[serde(default)]
    pub reorder: bool,
    /// Probability in [0, 1] that a packet is delivered twice.
    #[serde(default)]
    pub duplicate: f64,
    /// Probability in [0, 1] that a packet has one bit flipped.
    #[serde(default)]
    pub corrupt: f64,
}

impl DelayParams {
    pub(crate) fn check(&self, problems: &mut Problems) {
        problems.at_most("delay.delay_ns", self.delay_ns, MAX_DELAY_NS);
        problems.at_most("delay.jitter_ns", self.jitter_ns, MAX_DELAY_NS);
        problems.probability("delay.duplicate", self.duplicate);
        problems.probability("delay.corrupt", self.corrupt);
    }

    /// One jitter sample in nanoseconds (may be negative).
    pub(crate) fn sample_jitter(&self, rng: &mut Pcg64) -> i64 {
        if self.jitter_ns == 0 {
            return 0;
        }
        let sigma = self.jitter_ns as f64;
        let unit = match self.distribution {
            JitterDistribution::Uniform => {
                let j = self.jitter_ns as i64;
                return rng.random_range(-j..=j);
            }
            JitterDistribution::Normal => {
                let normal = Normal::new(0.0, 1.0).unwrap_or_else(|_| unreachable!());
                normal.sample(rng)
            }
            JitterDistribution::Pareto => {
                let pareto = Pareto::new(1.0, 3.0).unwrap_or_else(|_| unreachable!());
                let x: f64 = pareto.sample(rng);
                (x - 1.5) * 4.0 / 3.0
            }
            JitterDistribution::Paretonormal => {
                // q in (0, 1): both quantile functions are finite.
                let q: f64 = (rng.random::<u64>() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
                    + 0.5 / (1u64 << 53) as f64;
                let pareto = ((1.0 - q).powf(-1.0 / 3.0) - 1.5) * 4.0 / 3.0;
                0.25 * inverse_normal_cdf(q) + 0.75 * pareto
            }
        };
        (unit.clamp(-TABLE_CLIP, TABLE_CLIP) * sigma).round() as i64
    }
}

/// Φ⁻¹, the standard normal quantile function, for `p` in (0, 1)
/// (Acklam's rational approximation, relative error below 1.2·10⁻⁹).
pub fn inverse_normal_cdf(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    const LOW: f64 = 0.024_25;
    if p <= 0.0 {
        return f64::NEG_INFINITY;
    }
    if p >= 1.0 {
        return f64::INFINITY;
    }
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    if p < LOW {
        tail((-2.0 * p.ln()).sqrt())
    } else if p > 1.0 - LOW {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}

/// A packet that has left the pipe, with its history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// The frame (with a flipped bit if `corrupted`).
    pub packet: Packet,
    /// 1-based ordinal of the packet when it entered the pipe (a duplicate
    /// has its original's ordinal).
    pub ordinal: u64,
    /// When it entered the pipe.
    pub arrived: Instant,
    /// When its last bit left the bandwidth stage.
    pub transmitted: Instant,
    /// When it was due to leave the pipe; the caller sends it at the `now`
    /// it got it at, so `now − due` is the caller's timer lateness.
    pub due: Instant,
    /// This is the extra copy made by duplication.
    pub duplicate: bool,
    /// A bit of this copy was flipped.
    pub corrupted: bool,
}

struct Slot {
    due: Instant,
    seq: u64,
    delivery: Delivery,
}

impl PartialEq for Slot {
    fn eq(&self, other: &Self) -> bool {
        (self.due, self.seq) == (other.due, other.seq)
    }
}
impl Eq for Slot {}
impl PartialOrd for Slot {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Slot {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.due, self.seq).cmp(&(other.due, other.seq))
    }
}

/// Packets waiting out their delay, released in (due, arrival order).
#[derive(Default)]
pub(crate) struct DelayLine {
    heap: BinaryHeap<Reverse<Slot>>,
    seq: u64,
    /// Latest due time handed out so far (for order preservation).
    last_due: Instant,
}

impl std::fmt::Debug for DelayLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DelayLine")
            .field("len", &self.heap.len())
            .field("last_due", &self.last_due)
            .finish()
    }
}

impl DelayLine {
    /// The due time of a packet transmitted at `transmitted`; draws jitter.
    pub(crate) fn due_for(
        &mut self,
        transmitted: Instant,
        params: &DelayParams,
        rng: &mut Pcg64,
    ) -> Instant {
        let base = i128::from(transmitted.as_nanos()) + i128::from(params.delay_ns);
        let jittered =
            (base + i128::from(params.sample_jitter(rng))).max(i128::from(transmitted.as_nanos()));
        let mut due = Instant::from_nanos(u64::try_from(jittered).unwrap_or(u64::MAX));
        if !params.reorder {
            due = due.max(self.last_due);
        }
        self.last_due = self.last_due.max(due);
        due
    }

    pub(crate) fn push(&mut self, delivery: Delivery) {
        self.seq += 1;
        self.heap.push(Reverse(Slot {
            due: delivery.due,
            seq: self.seq,
            delivery,
        }));
    }

    pub(crate) fn next_due(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse(slot)| slot.due)
    }

    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<Delivery> {
        if self.next_due()? <= now {
            self.heap.pop().map(|Reverse(slot)| slot.delivery)
        } else {
            None
        }
    }

    pub(crate) fn len(&self) -> u64 {
        self.heap.len() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::stage_rng;

    fn samples(distribution: JitterDistribution, n: usize) -> Vec<f64> {
        let params = DelayParams {
            jitter_ns: 1_000_000,
            distribution,
            ..DelayParams::default()
        };
        let mut rng = stage_rng(5, 3);
        (0..n)
            .map(|_| params.sample_jitter(&mut rng) as f64 / 1e6)
            .collect()
    }

    fn mean_sd(x: &[f64]) -> (f64, f64) {
        let n = x.len() as f64;
        let mean = x.iter().sum::<f64>() / n;
        let var = x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
        (mean, var.sqrt())
    }

    #[test]
    fn inverse_normal_cdf_matches_known_quantiles() {
        for &(p, z) in &[
            (0.5, 0.0),
            (0.975, 1.959_963_984_540_054),
            (0.841_344_746_068_542_9, 1.0),
            (0.001, -3.090_232_306_167_813_5),
            (0.999_968_328_758_166_9, 4.0),
        ] {
            assert!((inverse_normal_cdf(p) - z).abs() < 1e-8, "p={p}");
        }
    }

    #[test]
    fn uniform_jitter_moments() {
        let x = samples(JitterDistribution::Uniform, 200_000);
        let (mean, sd) = mean_sd(&x);
        assert!(mean.abs() < 0.01);
        assert!((sd - 1.0 / 3f64.sqrt()).abs() < 0.01);
        assert!(x.iter().all(|v| v.abs() <= 1.0));
    }

    #[test]
    fn normal_jitter_moments() {
        let (mean, sd) = mean_sd(&samples(JitterDistribution::Normal, 200_000));
        assert!(mean.abs() < 0.01 && (sd - 1.0).abs() < 0.01, "{mean} {sd}");
    }

    #[test]
    fn pareto_jitter_matches_netem_table_shape() {
        let x = samples(JitterDistribution::Pareto, 400_000);
        // Lower bound of the table: (1 − 1.5)·4/3 = −2/3; upper clip 4.
        assert!(x.iter().all(|&v| (-0.667..=4.0).contains(&v)));
        // Median of the table: (2^(1/3) − 1.5)·4/3.
        let mut sorted = x.clone();
        sorted.sort_by(f64::total_cmp);
        let median = sorted[sorted.len() / 2];
        let expected = (2f64.powf(1.0 / 3.0) - 1.5) * 4.0 / 3.0;
        assert!((median - expected).abs() < 0.005, "{median} vs {expected}");
        // Mean 0 before clipping; clipping at 4 (X = 4.5) takes away
        // (4/3)·E[(X − 4.5)+] = (4/3)/(2·4.5²) = 0.0329.
        let (mean, _) = mean_sd(&x);
        let expected = -(4.0 / 3.0) / (2.0 * 4.5 * 4.5);
        assert!((mean - expected).abs() < 0.01, "{mean} vs {expected}");
    }

    #[test]
    fn paretonormal_jitter_matches_table_quantiles() {
        let mut x = samples(JitterDistribution::Paretonormal, 400_000);
        x.sort_by(f64::total_cmp);
        for &q in &[0.1, 0.5, 0.9] {
            let expected = 0.25 * inverse_normal_cdf(q)
                + 0.75 * ((1.0 - q).powf(-1.0 / 3.0) - 1.5) * 4.0 / 3.0;
            let got = x[(q * x.len() as f64) as usize];
            assert!((got - expected).abs() < 0.01, "q={q}: {got} vs {expected}");
        }
    }

    #[test]
    fn order_preserving_due_times_never_decrease() {
        let params = DelayParams {
            delay_ns: 1_000_000,
            jitter_ns: 900_000,
            ..DelayParams::default()
        };
        let mut line = DelayLine::default();
        let mut rng = stage_rng(6, 3);
        let mut last = Instant::ZERO;
        for i in 0..10_000u64 {
            let t = Instant::from_micros(i * 10);
            let due = line.due_for(t, &params, &mut rng);
            assert!(due >= last && due >= t);
            last = due;
        }
    }
}
