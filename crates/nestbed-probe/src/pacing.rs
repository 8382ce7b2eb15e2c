//! When to send: the sender's absolute schedule and the wait that meets it.
//!
//! Sans-I/O: [`Schedule`] is pure arithmetic (packet *k* is due at `start + offset(k)`, computed
//! from *k* every time, so rounding and late sends never accumulate into drift), and
//! [`wait_until`] takes its clock as a parameter ([`Clock`]), so both are tested with a fake
//! clock. The real clock is [`crate::os::MonotonicClock`].
//!
//! Bursts: `packets` datagrams spaced by the interval (back to back when the interval is 0),
//! then `gap_ns` of silence after the last one's planned time before the next burst starts.
//! A sender that falls behind sends late packets at once, without skipping any.

use std::sync::atomic::{AtomicBool, Ordering};

/// Bursts of `packets` datagrams separated by `gap_ns` of silence.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Burst {
    /// Datagrams per burst, at least 1.
    pub packets: u32,
    /// Silence from the planned time of a burst's last datagram to the next burst's first.
    pub gap_ns: u64,
}

/// When the sender stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// After this many datagrams.
    Count(u64),
    /// With the last datagram planned before this many ns after the start.
    Duration(u64),
}

/// One planned send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// Planned time after the start of the run, in ns.
    pub offset_ns: u64,
    /// Burst id to put in the header (0 without bursts).
    pub burst: u16,
}

/// The sender's plan: packet *k* is due `offset(k)` ns after the start.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Schedule {
    /// Spacing of consecutive datagrams (inside a burst, when bursting), in ns; may be
    /// fractional so that e.g. a rate giving 672.8 ns is met on average, not rounded each time.
    pub interval_ns: f64,
    /// Burst structure, or `None` for a constant rate.
    pub burst: Option<Burst>,
    /// When to stop.
    pub limit: Limit,
}

impl Schedule {
    /// The `k`-th planned send (from 0), or `None` once the limit is reached.
    pub fn slot(&self, k: u64) -> Option<Slot> {
        let (offset, burst) = match self.burst {
            None => ((k as f64 * self.interval_ns).round() as u64, 0u16),
            Some(b) => {
                let n = u64::from(b.packets.max(1));
                let (index, within) = (k / n, k % n);
                let period = (n - 1) as f64 * self.interval_ns + b.gap_ns as f64;
                let offset = index as f64 * period + within as f64 * self.interval_ns;
                (offset.round() as u64, index as u16)
            }
        };
        let within_limit = match self.limit {
            Limit::Count(n) => k < n,
            Limit::Duration(d) => offset < d,
        };
        within_limit.then_some(Slot {
            offset_ns: offset,
            burst,
        })
    }
}

/// A monotonic nanosecond clock that can sleep.
pub trait Clock {
    /// Current time in ns.
    fn now_ns(&mut self) -> u64;
    /// Sleeps until about `deadline_ns` (may wake early or late).
    fn sleep_until_ns(&mut self, deadline_ns: u64);
}

/// Waits until `target_ns`: sleeps until `spin_ns` before it, then spins on the clock.
/// Returns the clock reading at which the wait ended (≥ `target_ns`), so the caller knows how
/// late it is, or `None` if `stop` was set meanwhile (checked after every sleep, which a
/// signal interrupts).
pub fn wait_until<C: Clock>(
    clock: &mut C,
    target_ns: u64,
    spin_ns: u64,
    stop: &AtomicBool,
) -> Option<u64> {
    loop {
        let now = clock.now_ns();
        if now >= target_ns {
            return Some(now);
        }
        if target_ns - now > spin_ns {
            clock.sleep_until_ns(target_ns - spin_ns);
            if stop.load(Ordering::Relaxed) {
                return None;
            }
        } else {
            std::hint::spin_loop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offsets(s: &Schedule) -> Vec<(u64, u16)> {
        (0..)
            .map_while(|k| s.slot(k))
            .map(|x| (x.offset_ns, x.burst))
            .collect()
    }

    #[test]
    fn constant_rate_by_count() {
        let s = Schedule {
            interval_ns: 1000.0,
            burst: None,
            limit: Limit::Count(4),
        };
        assert_eq!(offsets(&s), vec![(0, 0), (1000, 0), (2000, 0), (3000, 0)]);
    }

    #[test]
    fn fractional_interval_does_not_drift() {
        // 64-byte frames at 1 Gb/s: 84 B * 8 / 1e9 = 672 ns; use a fractional one.
        let s = Schedule {
            interval_ns: 672.8,
            burst: None,
            limit: Limit::Count(u64::MAX),
        };
        assert_eq!(s.slot(1).unwrap().offset_ns, 673);
        assert_eq!(s.slot(10).unwrap().offset_ns, 6728);
        assert_eq!(s.slot(1_000_000).unwrap().offset_ns, 672_800_000);
    }

    #[test]
    fn duration_limit_excludes_the_end() {
        let s = Schedule {
            interval_ns: 250.0,
            burst: None,
            limit: Limit::Duration(1000),
        };
        assert_eq!(offsets(&s).len(), 4); // 0, 250, 500, 750
    }

    #[test]
    fn bursts_back_to_back_then_gap() {
        let s = Schedule {
            interval_ns: 0.0,
            burst: Some(Burst {
                packets: 3,
                gap_ns: 10_000,
            }),
            limit: Limit::Count(7),
        };
        assert_eq!(
            offsets(&s),
            vec![
                (0, 0),
                (0, 0),
                (0, 0),
                (10_000, 1),
                (10_000, 1),
                (10_000, 1),
                (20_000, 2)
            ]
        );
    }

    #[test]
    fn paced_bursts_gap_counts_from_last_packet() {
        let s = Schedule {
            interval_ns: 100.0,
            burst: Some(Burst {
                packets: 2,
                gap_ns: 1000,
            }),
            limit: Limit::Duration(2500),
        };
        assert_eq!(
            offsets(&s),
            vec![(0, 0), (100, 0), (1100, 1), (1200, 1), (2200, 2), (2300, 2)]
        );
    }

    #[test]
    fn burst_id_wraps_at_u16() {
        let s = Schedule {
            interval_ns: 0.0,
            burst: Some(Burst {
                packets: 1,
                gap_ns: 1,
            }),
            limit: Limit::Count(u64::MAX),
        };
        assert_eq!(s.slot(65_535).unwrap().burst, 65_535);
        assert_eq!(s.slot(65_536).unwrap().burst, 0);
    }

    static GO: AtomicBool = AtomicBool::new(false);

    #[test]
    fn wait_gives_up_when_stopped_during_a_sleep() {
        let stop = AtomicBool::new(true);
        let mut c = FakeClock {
            now: 0,
            tick: 1,
            oversleep: 0,
            sleeps: vec![],
        };
        assert_eq!(wait_until(&mut c, 1_000_000, 50_000, &stop), None);
        assert_eq!(c.sleeps.len(), 1);
    }

    /// A fake clock: every reading advances time by `tick`; sleeps overshoot by `oversleep`.
    struct FakeClock {
        now: u64,
        tick: u64,
        oversleep: u64,
        sleeps: Vec<u64>,
    }

    impl Clock for FakeClock {
        fn now_ns(&mut self) -> u64 {
            let t = self.now;
            self.now += self.tick;
            t
        }
        fn sleep_until_ns(&mut self, deadline_ns: u64) {
            self.sleeps.push(deadline_ns);
            self.now = self.now.max(deadline_ns + self.oversleep);
        }
    }

    #[test]
    fn wait_sleeps_to_spin_margin_then_spins() {
        let mut c = FakeClock {
            now: 0,
            tick: 10,
            oversleep: 5,
            sleeps: vec![],
        };
        let woke = wait_until(&mut c, 100_000, 50_000, &GO).unwrap();
        assert_eq!(c.sleeps, vec![50_000]);
        assert!((100_000..100_010).contains(&woke), "woke at {woke}");
    }

    #[test]
    fn wait_returns_at_once_when_late() {
        let mut c = FakeClock {
            now: 5_000,
            tick: 1,
            oversleep: 0,
            sleeps: vec![],
        };
        assert_eq!(wait_until(&mut c, 1_000, 50_000, &GO), Some(5_000));
        assert!(c.sleeps.is_empty());
    }

    #[test]
    fn absolute_schedule_absorbs_a_late_send() {
        // A sleep that overshoots by 3 µs makes packet 1 late; packet 2 is still planned
        // at start + 2 intervals, not at (late send) + interval.
        let s = Schedule {
            interval_ns: 10_000.0,
            burst: None,
            limit: Limit::Count(3),
        };
        let mut c = FakeClock {
            now: 0,
            tick: 1,
            oversleep: 3_000,
            sleeps: vec![],
        };
        let start = 1_000;
        let sent: Vec<u64> = (0..)
            .map_while(|k| s.slot(k))
            .map(|slot| wait_until(&mut c, start + slot.offset_ns, 0, &GO).unwrap())
            .collect();
        assert_eq!(c.sleeps, vec![1_000, 11_000, 21_000]);
        assert_eq!(sent, vec![4_000, 14_000, 24_000]);
    }
}
