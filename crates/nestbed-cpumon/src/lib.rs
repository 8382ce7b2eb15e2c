//! nestbed-cpumon: the CPU-availability monitor of the anomaly paper (Lee et al. 2011, §4.2
//! and §6.2), for a nestbed node.
//!
//! A loop reads the monotonic clock as fast as it can. While the thread runs, consecutive
//! readings are tens of nanoseconds apart; a gap longer than a threshold means the thread did
//! not run in between (it was descheduled, or the whole virtual machine was). Each interval
//! (one second by default) gives one [`Sample`]: the fraction of the looped time that was not
//! lost in gaps (`available`), the longest gap, and, from `/proc/thread-self/schedstat`, the
//! fractions of the interval the thread spent on a CPU and waiting on a run queue.
//!
//! With `duty` below 1 the loop runs only for that fraction of each interval and sleeps for
//! the rest, so the monitor itself takes less CPU from the experiment; `available` is then
//! measured over the looped part only.
//!
//! [`Gaps`] is the sans-I/O core (timestamps in, gaps out), tested on made-up clocks; the
//! binary drives it with the real clock.
#![deny(unsafe_code)]
#![warn(missing_docs)]

use serde::Serialize;

/// Gap accounting over consecutive clock readings.
#[derive(Clone, Debug, Default)]
pub struct Gaps {
    threshold_ns: u64,
    last_ns: Option<u64>,
    looped_ns: u64,
    lost_ns: u64,
    longest_ns: u64,
    count: u64,
}

impl Gaps {
    /// Counts a gap when two readings are more than `threshold_ns` apart.
    pub fn new(threshold_ns: u64) -> Gaps {
        Gaps {
            threshold_ns,
            ..Gaps::default()
        }
    }

    /// One clock reading, in nanoseconds.
    pub fn observe(&mut self, now_ns: u64) {
        if let Some(last) = self.last_ns {
            let step = now_ns.saturating_sub(last);
            self.looped_ns += step;
            if step > self.threshold_ns {
                self.lost_ns += step;
                self.longest_ns = self.longest_ns.max(step);
                self.count += 1;
            }
        }
        self.last_ns = Some(now_ns);
    }

    /// Ends a stretch of looping (before a sleep): the next reading starts a new stretch, so
    /// the sleep is not counted as a gap.
    pub fn pause(&mut self) {
        self.last_ns = None;
    }

    /// The interval's figures; resets the counters (not the current stretch).
    pub fn take(&mut self) -> GapFigures {
        let f = GapFigures {
            looped_ns: self.looped_ns,
            available: if self.looped_ns == 0 {
                None
            } else {
                Some(1.0 - self.lost_ns as f64 / self.looped_ns as f64)
            },
            longest_gap_ns: self.longest_ns,
            gaps: self.count,
        };
        self.looped_ns = 0;
        self.lost_ns = 0;
        self.longest_ns = 0;
        self.count = 0;
        f
    }
}

/// What [`Gaps::take`] returns.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GapFigures {
    /// Time covered by readings.
    pub looped_ns: u64,
    /// Fraction of `looped_ns` not lost in gaps; `None` when nothing was looped.
    pub available: Option<f64>,
    /// Longest gap.
    pub longest_gap_ns: u64,
    /// Number of gaps.
    pub gaps: u64,
}

/// One line of output: one interval.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Sample {
    /// End of the interval, seconds since the monitor started.
    pub t_s: f64,
    /// End of the interval, seconds since the Unix epoch (to align with captures).
    pub unix_s: f64,
    /// Length of the interval, seconds (the last one may be short).
    pub interval_s: f64,
    /// Fraction of the looped time the thread ran (1.0: never descheduled).
    pub available: Option<f64>,
    /// Longest gap between clock readings, seconds.
    pub longest_gap_s: f64,
    /// Gaps longer than the threshold.
    pub gaps: u64,
    /// Time spent in the timestamp loop, seconds.
    pub looped_s: f64,
    /// Fraction of the interval on a CPU, from schedstat (None where unavailable).
    pub run_fraction: Option<f64>,
    /// Fraction of the interval waiting on a run queue, from schedstat.
    pub wait_fraction: Option<f64>,
    /// CPU seconds the monitor's cgroup had used by the end of the interval (with
    /// `--cgroup-cpu`), read at the same moment as the clock, so a reader that falls behind
    /// still divides each interval's use by its own length.
    pub cgroup_cpu_s: Option<f64>,
}

/// Columns of the CSV output, in order.
pub const CSV_HEADER: &str =
    "t_s,unix_s,interval_s,available,longest_gap_s,gaps,looped_s,run_fraction,wait_fraction,\
cgroup_cpu_s";

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map(|x| format!("{x:.digits$}")).unwrap_or_default()
}

impl Sample {
    /// The sample as one CSV row (no newline), columns as in [`CSV_HEADER`].
    pub fn csv(&self) -> String {
        format!(
            "{:.3},{:.6},{:.6},{},{:.9},{},{:.6},{},{},{}",
            self.t_s,
            self.unix_s,
            self.interval_s,
            opt(self.available, 6),
            self.longest_gap_s,
            self.gaps,
            self.looped_s,
            opt(self.run_fraction, 6),
            opt(self.wait_fraction, 6),
            opt(self.cgroup_cpu_s, 9),
        )
    }
}

/// CPU seconds from a cgroup's counter file: v1's `cpuacct.usage` (nanoseconds) or v2's
/// `cpu.stat` (its `usage_usec` line).
pub fn parse_cgroup_cpu(text: &str) -> Option<f64> {
    if let Some(line) = text.lines().find(|l| l.starts_with("usage_usec ")) {
        return line["usage_usec ".len()..]
            .trim()
            .parse::<u64>()
            .ok()
            .map(|us| us as f64 / 1e6);
    }
    text.trim().parse::<u64>().ok().map(|ns| ns as f64 / 1e9)
}

/// Scheduler statistics of a thread: (ns on a CPU, ns waiting on a run queue), parsed from
/// the text of `/proc/<pid>/task/<tid>/schedstat`.
pub fn parse_schedstat(text: &str) -> Option<(u64, u64)> {
    let mut fields = text.split_whitespace().map(str::parse::<u64>);
    match (fields.next(), fields.next()) {
        (Some(Ok(run)), Some(Ok(wait))) => Some((run, wait)),
        _ => None,
    }
}

/// Fractions of `interval_ns` from two schedstat readings.
pub fn schedstat_fractions(
    before: Option<(u64, u64)>,
    after: Option<(u64, u64)>,
    interval_ns: u64,
) -> (Option<f64>, Option<f64>) {
    match (before, after) {
        (Some((r0, w0)), Some((r1, w1))) if interval_ns > 0 => {
            let d = interval_ns as f64;
            (
                Some(r1.saturating_sub(r0) as f64 / d),
                Some(w1.saturating_sub(w0) as f64 / d),
            )
        }
        _ => (None, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_descheduled_stretch_is_a_gap_and_lowers_availability() {
        let mut g = Gaps::new(10_000);
        // 1 ms of readings every 50 ns, then a 3 ms hole, then 1 ms more.
        let mut t = 0;
        while t < 1_000_000 {
            g.observe(t);
            t += 50;
        }
        t += 3_000_000;
        let end = t + 1_000_000;
        while t <= end {
            g.observe(t);
            t += 50;
        }
        let f = g.take();
        assert_eq!(f.gaps, 1);
        assert_eq!(f.longest_gap_ns, 3_000_050);
        let a = f.available.unwrap();
        assert!((a - 2.0 / 5.0).abs() < 1e-3, "available {a}");
        // Counters reset; the stretch goes on.
        g.observe(end + 100);
        assert_eq!(g.take().available, Some(1.0));
    }

    #[test]
    fn sleeping_between_stretches_is_not_a_gap() {
        let mut g = Gaps::new(10_000);
        g.observe(0);
        g.observe(1_000);
        g.pause();
        g.observe(900_000_000);
        g.observe(900_001_000);
        let f = g.take();
        assert_eq!((f.gaps, f.looped_ns), (0, 2_000));
        assert_eq!(f.available, Some(1.0));
    }

    #[test]
    fn nothing_looped_means_availability_unknown() {
        assert_eq!(Gaps::new(1).take().available, None);
    }

    #[test]
    fn schedstat_parsing_and_fractions() {
        let a = parse_schedstat("1000 200 3\n");
        let b = parse_schedstat("501000 100200 9\n");
        assert_eq!(a, Some((1000, 200)));
        assert_eq!(parse_schedstat("garbage"), None);
        assert_eq!(schedstat_fractions(a, b, 1_000_000), (Some(0.5), Some(0.1)));
        assert_eq!(schedstat_fractions(None, b, 1_000_000), (None, None));
    }

    #[test]
    fn cgroup_cpu_reads_v1_and_v2_counters() {
        assert_eq!(parse_cgroup_cpu("1500000000\n"), Some(1.5));
        let v2 = "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n";
        assert_eq!(parse_cgroup_cpu(v2), Some(2.5));
        assert_eq!(parse_cgroup_cpu("nr_periods 0\n"), None);
    }

    #[test]
    fn csv_row_matches_the_header() {
        let s = Sample {
            t_s: 1.0,
            unix_s: 1_700_000_000.25,
            interval_s: 1.0,
            available: Some(0.5),
            longest_gap_s: 0.25,
            gaps: 2,
            looped_s: 1.0,
            run_fraction: None,
            wait_fraction: None,
            cgroup_cpu_s: Some(2.5),
        };
        let row = s.csv();
        assert!(row.ends_with(",2.500000000"));
        assert_eq!(row.split(',').count(), CSV_HEADER.split(',').count());
        assert!(row.starts_with("1.000,1700000000.250000,1.000000,0.500000,0.250000000,2,"));
    }
}
