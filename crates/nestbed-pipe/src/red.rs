//! RED and gentle RED, as in Floyd & Jacobson (1993) and ns-2's `red.cc`.
//!
//! Parameters are Emulab's (which are ns-2's `Queue/RED` variables):
//! `thresh_`, `maxthresh_`, `q_weight_`, `linterm_` (max_p = 1/linterm),
//! `gentle_`, `queue-in-bytes_`, `bytes_`, `mean_pktsize_`, `wait_`.
//!
//! On every arrival that reached the queue:
//! 1. The average is updated, `avg ← (1−w)·avg + w·q`, where q is the
//!    instantaneous queue (packets, or bytes with `queue_in_bytes`). If the
//!    queue was empty, the average first decays as if m = ⌊ptc · idle⌋
//!    small packets had arrived to an empty queue, ptc = rate/(8·mean_pktsize)
//!    (ns-2's "packet time constant"); an unlimited rate decays it to 0.
//! 2. With min ≤ avg and an instantaneous queue above 1 (ns-2's
//!    `qlen > 1`, in bytes with `queue_in_bytes`): avg ≥ max (≥ 2·max with gentle) is a *forced* drop;
//!    the first arrival after crossing min only starts the count; otherwise
//!    the packet is dropped early with probability
//!    p_b = max_p·(avg − min)/(max − min) (gentle above max:
//!    max_p + (1 − max_p)·(avg − max)/max), made uniform over the count c of
//!    packets since the last drop: p_a = p_b/(1 − c·p_b), or with `wait`
//!    (ns-2's default) 0 while c·p_b < 1, then p_b/(2 − c·p_b).
//!    With `bytes`, c counts mean-sized packets' worth of bytes and p_a is
//!    scaled by size/mean_pktsize.
//! 3. Any drop, forced, early or for the hard limit, restarts the count.
//!
//! Thresholds are in packets; with `queue_in_bytes` they are multiplied by
//! `mean_pktsize`, as ns-2 does. The only deliberate difference from ns-2
//! is what "queue length" means (see [`crate::queue`]).

use rand::RngExt;
use rand_pcg::Pcg64;
use serde::{Deserialize, Serialize};

use crate::error::Problems;

/// RED parameters, named as in ns-2/Emulab; defaults are Emulab's
/// documented defaults (`q_weight_` 0.002, `linterm_` 10, `mean_pktsize_`
/// 500, not gentle, queue in packets) and ns-2's `wait_ true`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedParams {
    /// Minimum threshold of the average queue, in packets (`thresh_`).
    pub thresh: f64,
    /// Maximum threshold of the average queue, in packets (`maxthresh_`).
    pub maxthresh: f64,
    /// Weight of the exponential average, in (0, 1] (`q_weight_`).
    #[serde(default = "default_q_weight")]
    pub q_weight: f64,
    /// Inverse of max_p, the drop probability at maxthresh (`linterm_`), ≥ 1.
    #[serde(default = "default_linterm")]
    pub linterm: f64,
    /// Gentle RED: between maxthresh and twice it, the probability rises
    /// linearly from max_p to 1 instead of jumping to 1 (`gentle_`).
    #[serde(default)]
    pub gentle: bool,
    /// Average the queue in bytes rather than packets (`queue-in-bytes_`).
    #[serde(default)]
    pub queue_in_bytes: bool,
    /// Byte mode for the drop probability: large packets are more likely
    /// to be dropped (`bytes_`).
    #[serde(default)]
    pub bytes: bool,
    /// Mean packet size in bytes, for byte mode and idle decay (`mean_pktsize_`).
    #[serde(default = "default_mean_pktsize")]
    pub mean_pktsize: u32,
    /// Wait between drops (ns-2's `wait_`, true by default there).
    #[serde(default = "default_wait")]
    pub wait: bool,
}

fn default_q_weight() -> f64 {
    0.002
}
fn default_linterm() -> f64 {
    10.0
}
fn default_mean_pktsize() -> u32 {
    500
}
fn default_wait() -> bool {
    true
}

impl RedParams {
    /// Emulab's defaults: thresh 5, maxthresh 15, q_weight 0.002,
    /// linterm 10, mean packet 500 bytes, queue in packets, not gentle,
    /// with ns-2's `wait_ true`.
    pub fn emulab_defaults() -> Self {
        RedParams {
            thresh: 5.0,
            maxthresh: 15.0,
            q_weight: default_q_weight(),
            linterm: default_linterm(),
            gentle: false,
            queue_in_bytes: false,
            bytes: false,
            mean_pktsize: default_mean_pktsize(),
            wait: default_wait(),
        }
    }

    /// max_p = 1 / linterm.
    pub fn max_p(&self) -> f64 {
        1.0 / self.linterm
    }

    /// (min, max) thresholds in the unit the average is kept in.
    fn thresholds(&self) -> (f64, f64) {
        let scale = if self.queue_in_bytes {
            f64::from(self.mean_pktsize)
        } else {
            1.0
        };
        (self.thresh * scale, self.maxthresh * scale)
    }

    /// The drop probability p_b before count uniformization for an average
    /// queue `avg` (in packets, or bytes with `queue_in_bytes`): ns-2's
    /// `calculate_p_new`. 0 below thresh.
    pub fn base_drop_probability(&self, avg: f64) -> f64 {
        let (min, max) = self.thresholds();
        let max_p = self.max_p();
        let p = if avg < min {
            0.0
        } else if avg >= max {
            if self.gentle {
                max_p + (1.0 - max_p) * (avg - max) / max
            } else {
                1.0
            }
        } else {
            max_p * (avg - min) / (max - min)
        };
        p.clamp(0.0, 1.0)
    }

    /// ns-2's `modify_p`: the probability for the packet after `count`
    /// accepted packets (`count_bytes` bytes) since the last drop.
    fn uniformized(&self, p: f64, count: u64, count_bytes: u64, size: u32) -> f64 {
        let mean = u64::from(self.mean_pktsize);
        let c = if self.bytes {
            (count_bytes / mean) as f64
        } else {
            count as f64
        };
        let mut p = if self.wait {
            if c * p < 1.0 {
                0.0
            } else if c * p < 2.0 {
                p / (2.0 - c * p)
            } else {
                1.0
            }
        } else if c * p < 1.0 {
            p / (1.0 - c * p)
        } else {
            1.0
        };
        if self.bytes && p < 1.0 {
            p = p * f64::from(size) / f64::from(self.mean_pktsize);
        }
        p.min(1.0)
    }

    pub(crate) fn check(&self, field: &str, problems: &mut Problems) {
        if !(self.thresh >= 0.0 && self.thresh.is_finite()) {
            problems.push(
                format!("{field}.thresh"),
                format!(
                    "must be a finite number of packets >= 0, got {}",
                    self.thresh
                ),
            );
        }
        if !(self.maxthresh > self.thresh && self.maxthresh.is_finite()) {
            problems.push(
                format!("{field}.maxthresh"),
                format!(
                    "must be finite and greater than thresh ({}), got {}",
                    self.thresh, self.maxthresh
                ),
            );
        }
        if !(self.q_weight > 0.0 && self.q_weight <= 1.0) {
            problems.push(
                format!("{field}.q_weight"),
                format!("must be in (0, 1], got {}", self.q_weight),
            );
        }
        if !(self.linterm >= 1.0 && self.linterm.is_finite()) {
            problems.push(
                format!("{field}.linterm"),
                format!(
                    "must be a finite number >= 1 (max_p = 1/linterm), got {}",
                    self.linterm
                ),
            );
        }
        if self.mean_pktsize == 0 {
            problems.push(format!("{field}.mean_pktsize"), "must be at least 1 byte");
        }
    }
}

/// RED's verdict on an arriving packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    Accept,
    EarlyDrop,
    ForcedDrop,
}

/// What RED sees of the queue when a packet arrives.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Arrival {
    /// Packets in the queue before this one.
    pub(crate) queue_packets: u64,
    /// Bytes in the queue before this one.
    pub(crate) queue_bytes: u64,
    /// How long the queue has been empty, if it is empty and was busy before.
    pub(crate) idle_ns: Option<u64>,
    /// Wire length of the arriving packet.
    pub(crate) size: u32,
    /// Link rate (0 = unlimited), for the idle decay.
    pub(crate) rate_bps: u64,
}

/// RED's running state.
#[derive(Debug)]
pub(crate) struct Red {
    params: RedParams,
    avg: f64,
    count: u64,
    count_bytes: u64,
    /// ns-2's `old`: avg was already above thresh at the previous arrival.
    old: bool,
}

impl Red {
    pub(crate) fn new(params: &RedParams) -> Self {
        Red {
            params: params.clone(),
            avg: 0.0,
            count: 0,
            count_bytes: 0,
            old: false,
        }
    }

    /// New parameters; the average and count carry on.
    pub(crate) fn set_params(&mut self, params: &RedParams) {
        self.params = params.clone();
    }

    /// The current average queue (packets, or bytes with `queue_in_bytes`).
    pub(crate) fn average(&self) -> f64 {
        self.avg
    }

    /// Restarts the count after a drop decided elsewhere (hard limit).
    pub(crate) fn reset_count(&mut self) {
        self.count = 0;
        self.count_bytes = 0;
    }

    pub(crate) fn on_arrival(&mut self, a: Arrival, rng: &mut Pcg64) -> Verdict {
        let p = &self.params;
        let w = p.q_weight;
        let q = if p.queue_in_bytes {
            a.queue_bytes as f64
        } else {
            a.queue_packets as f64
        };
        if let Some(idle_ns) = a.idle_ns {
            let m = if a.rate_bps == 0 {
                f64::INFINITY
            } else {
                let ptc = a.rate_bps as f64 / (8.0 * f64::from(p.mean_pktsize));
                (ptc * idle_ns as f64 / 1e9).floor()
            };
            self.avg *= (1.0 - w).powf(m);
        }
        self.avg = self.avg * (1.0 - w) + w * q;

        self.count += 1;
        self.count_bytes += u64::from(a.size);

        let (min, max) = p.thresholds();
        let forced_above = if p.gentle { 2.0 * max } else { max };
        let verdict = if self.avg >= min && q > 1.0 {
            if self.avg >= forced_above {
                Verdict::ForcedDrop
            } else if !self.old {
                self.count = 1;
                self.count_bytes = u64::from(a.size);
                self.old = true;
                Verdict::Accept
            } else {
                let pb = p.base_drop_probability(self.avg);
                let pa = p.uniformized(pb, self.count, self.count_bytes, a.size);
                let u: f64 = rng.random();
                if u < pa {
                    Verdict::EarlyDrop
                } else {
                    Verdict::Accept
                }
            }
        } else {
            self.old = false;
            Verdict::Accept
        };
        if verdict != Verdict::Accept {
            self.reset_count();
        }
        verdict
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::stage_rng;

    fn arrival(queue_packets: u64) -> Arrival {
        Arrival {
            queue_packets,
            queue_bytes: queue_packets * 1000,
            idle_ns: None,
            size: 1000,
            rate_bps: 10_000_000,
        }
    }

    #[test]
    fn probability_rises_linearly_between_thresholds() {
        let p = RedParams::emulab_defaults(); // 5..15, max_p 0.1
        assert_eq!(p.base_drop_probability(4.99), 0.0);
        assert_eq!(p.base_drop_probability(5.0), 0.0);
        assert!((p.base_drop_probability(10.0) - 0.05).abs() < 1e-12);
        assert!((p.base_drop_probability(14.0) - 0.09).abs() < 1e-12);
        assert_eq!(p.base_drop_probability(15.0), 1.0);
        let mut last = 0.0;
        for i in 50..150 {
            let v = p.base_drop_probability(f64::from(i) / 10.0);
            assert!(v >= last);
            last = v;
        }
    }

    #[test]
    fn gentle_region_rises_from_max_p_to_one() {
        let p = RedParams {
            gentle: true,
            ..RedParams::emulab_defaults()
        };
        assert!((p.base_drop_probability(15.0) - 0.1).abs() < 1e-12);
        assert!((p.base_drop_probability(22.5) - 0.55).abs() < 1e-12);
        assert!((p.base_drop_probability(30.0) - 1.0).abs() < 1e-12);
        assert_eq!(p.base_drop_probability(45.0), 1.0);
    }

    #[test]
    fn thresholds_scale_with_mean_packet_size_in_byte_mode() {
        let p = RedParams {
            queue_in_bytes: true,
            ..RedParams::emulab_defaults()
        };
        assert_eq!(p.thresholds(), (2500.0, 7500.0));
        assert!((p.base_drop_probability(5000.0) - 0.05).abs() < 1e-12);
    }

    #[test]
    fn average_tracks_a_steady_queue() {
        let params = RedParams {
            thresh: 100.0,
            maxthresh: 200.0,
            ..RedParams::emulab_defaults()
        };
        let mut red = Red::new(&params);
        let mut rng = stage_rng(1, 2);
        for n in 1..=3000 {
            red.on_arrival(arrival(20), &mut rng);
            let expected = 20.0 * (1.0 - (1.0 - 0.002f64).powi(n));
            assert!((red.average() - expected).abs() < 1e-9);
        }
    }

    #[test]
    fn idle_time_decays_the_average() {
        let params = RedParams {
            thresh: 100.0,
            maxthresh: 200.0,
            ..RedParams::emulab_defaults()
        };
        let mut red = Red::new(&params);
        let mut rng = stage_rng(1, 2);
        for _ in 0..2000 {
            red.on_arrival(arrival(20), &mut rng);
        }
        let before = red.average();
        // 10 Mb/s, 500-byte mean packets: ptc = 2500/s; 40 ms idle = 100 packets.
        let mut a = arrival(0);
        a.idle_ns = Some(40_000_000);
        red.on_arrival(a, &mut rng);
        let expected = before * 0.998f64.powi(101);
        assert!((red.average() - expected).abs() < 1e-9);
        // An unlimited link decays the average to nothing.
        a.rate_bps = 0;
        red.on_arrival(a, &mut rng);
        assert_eq!(red.average(), 0.0);
    }

    #[test]
    fn forced_drop_at_maxthresh_and_twice_it_when_gentle() {
        for gentle in [false, true] {
            let params = RedParams {
                q_weight: 1.0, // average = instantaneous queue
                gentle,
                ..RedParams::emulab_defaults()
            };
            let mut red = Red::new(&params);
            let mut rng = stage_rng(1, 2);
            assert_eq!(red.on_arrival(arrival(16), &mut rng), {
                if gentle {
                    Verdict::Accept // first crossing of thresh only starts the count
                } else {
                    Verdict::ForcedDrop
                }
            });
            assert_eq!(red.on_arrival(arrival(30), &mut rng), Verdict::ForcedDrop);
            assert_eq!(red.on_arrival(arrival(2), &mut rng), Verdict::Accept);
        }
    }

    fn exact_params(wait: bool) -> RedParams {
        // avg 10 with thresholds 5..15 and max_p 1/8: p_b = 1/16 exactly.
        RedParams {
            q_weight: 1.0, // average = instantaneous queue
            linterm: 8.0,
            wait,
            ..RedParams::emulab_defaults()
        }
    }

    /// Gaps (in arrivals, the dropped one included) between early drops.
    fn gaps(wait: bool, seed: u64, arrivals: u64) -> Vec<u64> {
        let mut red = Red::new(&exact_params(wait));
        let mut rng = stage_rng(seed, 2);
        red.on_arrival(arrival(10), &mut rng); // first crossing starts the count
        let mut gaps = Vec::new();
        let mut since = 0;
        for _ in 0..arrivals {
            since += 1;
            if red.on_arrival(arrival(10), &mut rng) == Verdict::EarlyDrop {
                gaps.push(since);
                since = 0;
            }
        }
        gaps
    }

    /// With the count uniformization (wait = false, Floyd & Jacobson's
    /// p_a = p_b/(1 − c·p_b)), gaps between drops are uniform on
    /// 1..1/p_b − 1 = 1..15, not geometric.
    #[test]
    fn inter_drop_gaps_are_uniform() {
        let gaps = gaps(false, 3, 400_000);
        let mut hist = [0u64; 17];
        for &g in &gaps {
            hist[g.min(16) as usize] += 1;
        }
        assert_eq!(hist[0], 0);
        assert_eq!(hist[16], 0, "no gap may reach 1/p_b = 16");
        let drops = gaps.len() as f64;
        for (gap, &n) in hist.iter().enumerate().take(16).skip(1) {
            let share = n as f64 / drops;
            assert!(
                (share - 1.0 / 15.0).abs() < 0.006,
                "gap {gap}: share {share}"
            );
        }
        let mean = gaps.iter().sum::<u64>() as f64 / drops;
        assert!((mean - 8.0).abs() < 0.1, "mean gap {mean}");
    }

    /// With wait = true (ns-2's default) no drop comes before 1/p_b
    /// arrivals and every gap ends before 2/p_b: uniform on 16..=31.
    #[test]
    fn wait_spaces_drops_between_one_and_two_over_p() {
        let gaps = gaps(true, 4, 100_000);
        assert!(gaps.len() > 3_000);
        assert!(gaps.iter().all(|g| (16..=31).contains(g)), "{gaps:?}");
        let mean = gaps.iter().sum::<u64>() as f64 / gaps.len() as f64;
        assert!((mean - 23.5).abs() < 0.3, "mean gap {mean}");
    }
}
