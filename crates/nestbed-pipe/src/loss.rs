//! Loss stage: random loss models and drop-by-ordinal.
//!
//! Runs first in the pipe, on every packet entering it, before the queue.
//! The random model is evaluated for *every* packet, even one also listed
//! for an ordinal drop, so the random stream (and the Gilbert-Elliott
//! state) does not depend on the ordinal list.

use std::collections::BTreeSet;

use rand::RngExt;
use rand_pcg::Pcg64;
use serde::{Deserialize, Serialize};

use crate::counters::DropCause;
use crate::error::Problems;

/// The random loss model of a pipe.
///
/// JSON: `{"model": "bernoulli", "p": 0.001}`,
/// `{"model": "gilbert_elliott", "p": 0.01, "r": 0.3, "loss_in_bad": 1.0, "loss_in_good": 0.0}`,
/// `{"model": "gilbert_burst", "loss_rate": 0.02, "mean_burst_len": 3.0}` or
/// `{"model": "none"}`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "model", rename_all = "snake_case", deny_unknown_fields)]
pub enum LossModel {
    /// No random loss.
    #[default]
    None,
    /// Each packet is lost independently with probability `p` in [0, 1]
    /// (any real value: 0.001 for 0.1 % is fine).
    Bernoulli {
        /// Loss probability per packet.
        p: f64,
    },
    /// Gilbert-Elliott two-state Markov model in its four-parameter form.
    GilbertElliott {
        /// P(good → bad), evaluated once per packet in the good state.
        p: f64,
        /// P(bad → good), evaluated once per packet in the bad state.
        r: f64,
        /// Loss probability in the bad state (1 − h in the literature).
        loss_in_bad: f64,
        /// Loss probability in the good state (1 − k in the literature).
        loss_in_good: f64,
    },
    /// Simple Gilbert model given by its loss rate and mean burst length,
    /// converted with [`GilbertElliott::from_loss_and_burst`].
    GilbertBurst {
        /// Long-run fraction of packets lost, in [0, 1).
        loss_rate: f64,
        /// Mean number of consecutive losses, at least 1.
        mean_burst_len: f64,
    },
}

/// The four Gilbert-Elliott probabilities actually used by the pipe.
///
/// Per packet: the packet is lost with the current state's loss
/// probability, then the state moves (good → bad with `p`, bad → good with
/// `r`). The chain starts in the good state.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GilbertElliott {
    /// P(good → bad).
    pub p: f64,
    /// P(bad → good).
    pub r: f64,
    /// Loss probability in the bad state (1 − h).
    pub loss_in_bad: f64,
    /// Loss probability in the good state (1 − k).
    pub loss_in_good: f64,
}

impl GilbertElliott {
    /// The simple Gilbert model with the given long-run loss rate (PLR) and
    /// mean burst length (ABL): r = 1/ABL, p = PLR·r/(1 − PLR), every packet
    /// in the bad state lost, none in the good state.
    ///
    /// A loss rate too high for the burst length gives p > 1, which
    /// [`PipeParams::validate`](crate::PipeParams::validate) rejects.
    pub fn from_loss_and_burst(loss_rate: f64, mean_burst_len: f64) -> Self {
        let r = 1.0 / mean_burst_len;
        GilbertElliott {
            p: loss_rate * r / (1.0 - loss_rate),
            r,
            loss_in_bad: 1.0,
            loss_in_good: 0.0,
        }
    }

    /// Long-run loss rate: π_bad·(1−h) + π_good·(1−k), π_bad = p/(p+r).
    pub fn stationary_loss_rate(&self) -> f64 {
        if self.p + self.r == 0.0 {
            return self.loss_in_good; // stays in the good state forever
        }
        let bad = self.p / (self.p + self.r);
        bad * self.loss_in_bad + (1.0 - bad) * self.loss_in_good
    }
}

impl LossModel {
    /// The Gilbert-Elliott probabilities this model runs with, if it is one
    /// of the Gilbert models (so the caller can announce p and r).
    pub fn gilbert_elliott(&self) -> Option<GilbertElliott> {
        match *self {
            LossModel::GilbertElliott {
                p,
                r,
                loss_in_bad,
                loss_in_good,
            } => Some(GilbertElliott {
                p,
                r,
                loss_in_bad,
                loss_in_good,
            }),
            LossModel::GilbertBurst {
                loss_rate,
                mean_burst_len,
            } => Some(GilbertElliott::from_loss_and_burst(
                loss_rate,
                mean_burst_len,
            )),
            LossModel::None | LossModel::Bernoulli { .. } => None,
        }
    }

    pub(crate) fn check(&self, field: &str, problems: &mut Problems) {
        match *self {
            LossModel::None => {}
            LossModel::Bernoulli { p } => problems.probability(&format!("{field}.p"), p),
            LossModel::GilbertElliott {
                p,
                r,
                loss_in_bad,
                loss_in_good,
            } => {
                problems.probability(&format!("{field}.p"), p);
                problems.probability(&format!("{field}.r"), r);
                problems.probability(&format!("{field}.loss_in_bad"), loss_in_bad);
                problems.probability(&format!("{field}.loss_in_good"), loss_in_good);
            }
            LossModel::GilbertBurst {
                loss_rate,
                mean_burst_len,
            } => {
                let mut ok = true;
                if !(0.0..1.0).contains(&loss_rate) {
                    problems.push(
                        format!("{field}.loss_rate"),
                        format!("must be in [0, 1), got {loss_rate}"),
                    );
                    ok = false;
                }
                if !(mean_burst_len >= 1.0 && mean_burst_len.is_finite()) {
                    problems.push(
                        format!("{field}.mean_burst_len"),
                        format!("must be a finite number of packets >= 1, got {mean_burst_len}"),
                    );
                    ok = false;
                }
                if ok {
                    let ge = GilbertElliott::from_loss_and_burst(loss_rate, mean_burst_len);
                    if ge.p > 1.0 {
                        problems.push(
                            format!("{field}.loss_rate"),
                            format!(
                                "loss rate {loss_rate} is unreachable with mean burst length \
                                 {mean_burst_len}: it needs P(good→bad) = {} > 1; \
                                 lower the loss rate or raise the burst length",
                                ge.p
                            ),
                        );
                    }
                }
            }
        }
    }
}

/// State of the loss stage.
#[derive(Debug)]
pub(crate) struct LossStage {
    model: Option<Resolved>,
    ordinals: BTreeSet<u64>,
    in_bad_state: bool,
    rng: Pcg64,
}

#[derive(Clone, Copy, Debug)]
enum Resolved {
    Bernoulli(f64),
    Gilbert(GilbertElliott),
}

fn resolve(model: &LossModel) -> Option<Resolved> {
    match *model {
        LossModel::None => None,
        LossModel::Bernoulli { p } => Some(Resolved::Bernoulli(p)),
        _ => model.gilbert_elliott().map(Resolved::Gilbert),
    }
}

impl LossStage {
    pub(crate) fn new(model: &LossModel, drop_ordinals: &[u64], rng: Pcg64) -> Self {
        LossStage {
            model: resolve(model),
            ordinals: drop_ordinals.iter().copied().collect(),
            in_bad_state: false,
            rng,
        }
    }

    /// Applies new parameters; the Gilbert-Elliott state and the random
    /// stream carry on.
    pub(crate) fn set_params(&mut self, model: &LossModel, drop_ordinals: &[u64]) {
        self.model = resolve(model);
        self.ordinals = drop_ordinals.iter().copied().collect();
    }

    /// Decides the fate of the packet with 1-based `ordinal`.
    pub(crate) fn decide(&mut self, ordinal: u64) -> Option<DropCause> {
        let random_loss = match self.model {
            None => false,
            Some(Resolved::Bernoulli(p)) => self.rng.random_bool(p),
            Some(Resolved::Gilbert(ge)) => {
                let (loss, leave) = if self.in_bad_state {
                    (ge.loss_in_bad, ge.r)
                } else {
                    (ge.loss_in_good, ge.p)
                };
                let lost = self.rng.random_bool(loss);
                if self.rng.random_bool(leave) {
                    self.in_bad_state = !self.in_bad_state;
                }
                lost
            }
        };
        if self.ordinals.contains(&ordinal) {
            Some(DropCause::Ordinal)
        } else if random_loss {
            Some(DropCause::Loss)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::stage_rng;

    fn run(model: LossModel, n: u64, seed: u64) -> Vec<bool> {
        let mut stage = LossStage::new(&model, &[], stage_rng(seed, 1));
        (1..=n).map(|i| stage.decide(i).is_some()).collect()
    }

    /// (loss rate, mean length of runs of consecutive losses)
    fn stats(lost: &[bool]) -> (f64, f64) {
        let losses = lost.iter().filter(|&&l| l).count();
        let bursts = lost
            .iter()
            .enumerate()
            .filter(|&(i, &l)| l && (i == 0 || !lost[i - 1]))
            .count();
        (
            losses as f64 / lost.len() as f64,
            losses as f64 / bursts as f64,
        )
    }

    #[test]
    fn bernoulli_rate_is_within_binomial_bound() {
        for &(p, seed) in &[(0.001, 1u64), (0.008, 2), (0.025, 3), (0.12, 4)] {
            let n = 1_000_000u64;
            let lost = run(LossModel::Bernoulli { p }, n, seed);
            let k = lost.iter().filter(|&&l| l).count() as f64;
            let mean = n as f64 * p;
            let sd = (n as f64 * p * (1.0 - p)).sqrt();
            // 4.4 standard deviations: a false alarm about once in 100 000 runs.
            assert!(
                (k - mean).abs() <= 4.4 * sd,
                "p={p}: expected {mean}±{}, got {k}",
                4.4 * sd
            );
        }
    }

    #[test]
    fn bernoulli_is_deterministic_per_seed() {
        let a = run(LossModel::Bernoulli { p: 0.1 }, 10_000, 42);
        let b = run(LossModel::Bernoulli { p: 0.1 }, 10_000, 42);
        let c = run(LossModel::Bernoulli { p: 0.1 }, 10_000, 43);
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn gilbert_burst_conversion_matches_formula() {
        let ge = GilbertElliott::from_loss_and_burst(0.02, 4.0);
        assert_eq!(ge.r, 0.25);
        assert!((ge.p - 0.02 * 0.25 / 0.98).abs() < 1e-15);
        assert_eq!((ge.loss_in_bad, ge.loss_in_good), (1.0, 0.0));
        assert!((ge.stationary_loss_rate() - 0.02).abs() < 1e-12);
    }

    #[test]
    fn gilbert_burst_statistics_over_a_million_packets() {
        for &(plr, abl, seed) in &[(0.02, 3.0, 7u64), (0.05, 1.5, 8), (0.12, 6.0, 9)] {
            let lost = run(
                LossModel::GilbertBurst {
                    loss_rate: plr,
                    mean_burst_len: abl,
                },
                1_000_000,
                seed,
            );
            let (rate, burst) = stats(&lost);
            let rate_err = (rate - plr).abs() / plr;
            let burst_err = (burst - abl).abs() / abl;
            assert!(
                rate_err < 0.03,
                "PLR {plr}: measured {rate} ({rate_err:.4} off)"
            );
            assert!(
                burst_err < 0.03,
                "ABL {abl}: measured {burst} ({burst_err:.4} off)"
            );
        }
    }

    #[test]
    fn gilbert_elliott_four_parameter_statistics() {
        // With loss in both states bursts are not simply 1/r, so check the
        // loss rate against the stationary value and the time spent in the
        // bad state through a model with loss_in_bad = 1, loss_in_good = 0.
        let model = LossModel::GilbertElliott {
            p: 0.01,
            r: 0.2,
            loss_in_bad: 0.7,
            loss_in_good: 0.005,
        };
        let expected = model.gilbert_elliott().unwrap().stationary_loss_rate();
        let (rate, _) = stats(&run(model, 1_000_000, 11));
        assert!(
            (rate - expected).abs() / expected < 0.03,
            "expected {expected}, got {rate}"
        );

        let pure = LossModel::GilbertElliott {
            p: 0.01,
            r: 0.2,
            loss_in_bad: 1.0,
            loss_in_good: 0.0,
        };
        let (rate, burst) = stats(&run(pure, 1_000_000, 12));
        assert!((rate - 0.01 / 0.21).abs() / (0.01 / 0.21) < 0.03, "{rate}");
        assert!((burst - 5.0).abs() / 5.0 < 0.03, "{burst}");
    }

    #[test]
    fn ordinals_drop_exactly_the_listed_packets() {
        let mut stage = LossStage::new(&LossModel::None, &[1, 5, 1000], stage_rng(0, 1));
        let dropped: Vec<u64> = (1..=2000)
            .filter(|&i| stage.decide(i) == Some(DropCause::Ordinal))
            .collect();
        assert_eq!(dropped, vec![1, 5, 1000]);
    }

    #[test]
    fn validation_names_fields() {
        let mut problems = Problems::default();
        LossModel::Bernoulli { p: 1.5 }.check("loss", &mut problems);
        LossModel::GilbertBurst {
            loss_rate: 0.6,
            mean_burst_len: 1.0,
        }
        .check("loss", &mut problems);
        LossModel::Bernoulli { p: f64::NAN }.check("loss", &mut problems);
        let errors = problems.into_result().unwrap_err();
        let fields: Vec<&str> = errors.errors().iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, vec!["loss.p", "loss.loss_rate", "loss.p"]);
    }
}
