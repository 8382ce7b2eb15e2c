//! `nestbed-cpumon`: prints one line per interval (CSV with a header, or JSON lines) until
//! `--duration` has passed or SIGINT/SIGTERM arrives; the interval cut short by a signal is
//! printed too. Exit codes: 0 done, 2 a usage error, 1 stdout closed.

use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::{Parser, ValueEnum};
use nestbed_cpumon::{
    parse_cgroup_cpu, parse_schedstat, schedstat_fractions, Gaps, Sample, CSV_HEADER,
};

/// CPU-availability monitor: a timestamp loop that reports, each interval, the fraction of
/// time it actually ran (gaps between clock readings mean it was descheduled) and its longest
/// gap. It keeps one CPU busy while it loops (see --duty).
#[derive(Parser, Debug)]
#[command(name = "nestbed-cpumon", version)]
struct Cli {
    /// Seconds per output line.
    #[arg(long, value_name = "SECONDS", default_value_t = 1.0, value_parser = positive)]
    interval: f64,
    /// Stop after this many seconds (default: run until SIGINT or SIGTERM).
    #[arg(long, value_name = "SECONDS", value_parser = positive)]
    duration: Option<f64>,
    /// A step between clock readings longer than this counts as a gap, microseconds.
    #[arg(long, value_name = "US", default_value_t = 10.0, value_parser = positive)]
    gap_us: f64,
    /// Fraction of each interval spent looping (the rest sleeping), in (0, 1].
    #[arg(long, default_value_t = 1.0, value_parser = duty)]
    duty: f64,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Csv)]
    format: Format,
    /// A cgroup's CPU counter (v1 `cpuacct.usage` or v2 `cpu.stat`), read at the end of each
    /// interval into the `cgroup_cpu_s` column.
    #[arg(long, value_name = "FILE")]
    cgroup_cpu: Option<std::path::PathBuf>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Format {
    /// CSV with a header line.
    Csv,
    /// One JSON object per line.
    Jsonl,
}

fn positive(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("{s:?} is not a positive number")),
    }
}

fn duty(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 1.0 => Ok(v),
        _ => Err(format!("{s:?} is not a fraction in (0, 1]")),
    }
}

fn schedstat() -> Option<(u64, u64)> {
    parse_schedstat(&std::fs::read_to_string("/proc/thread-self/schedstat").ok()?)
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Sleeps until `deadline` in short naps, so a stop signal is seen within 20 ms.
fn sleep_until(deadline: Instant, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if now >= deadline {
            return;
        }
        std::thread::sleep((deadline - now).min(Duration::from_millis(20)));
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        if let Err(e) = signal_hook::flag::register(sig, Arc::clone(&stop)) {
            eprintln!("nestbed-cpumon: installing the signal handler failed: {e}.");
            return ExitCode::from(1);
        }
    }
    let mut out = std::io::stdout().lock();
    if matches!(cli.format, Format::Csv) && writeln!(out, "{CSV_HEADER}").is_err() {
        return ExitCode::from(1);
    }
    let interval = Duration::from_secs_f64(cli.interval);
    let spin = interval.mul_f64(cli.duty);
    let start = Instant::now();
    let end = cli.duration.map(|d| start + Duration::from_secs_f64(d));
    let mut gaps = Gaps::new((cli.gap_us * 1e3) as u64);
    let mut sched = schedstat();
    let mut from = start;
    while !stop.load(Ordering::Relaxed) {
        let mut until = from + interval;
        if let Some(e) = end {
            until = until.min(e);
        }
        let spin_until = (from + spin).min(until);
        // The stretch covers exactly [from, spin_until]: time lost before the loop's first
        // reading (descheduled while printing the last line) counts as a gap, and a gap that
        // runs past the end counts only up to it.
        let at = |t: Instant| t.min(spin_until).duration_since(start).as_nanos() as u64;
        gaps.observe(at(from));
        loop {
            let now = Instant::now();
            gaps.observe(at(now));
            if now >= spin_until || stop.load(Ordering::Relaxed) {
                break;
            }
        }
        gaps.pause();
        sleep_until(until, &stop);
        let now = Instant::now();
        let span = now.duration_since(from);
        let figures = gaps.take();
        let after = schedstat();
        let (run_fraction, wait_fraction) =
            schedstat_fractions(sched, after, span.as_nanos() as u64);
        sched = after;
        let cgroup_cpu_s = cli
            .cgroup_cpu
            .as_ref()
            .and_then(|f| std::fs::read_to_string(f).ok())
            .and_then(|t| parse_cgroup_cpu(&t));
        let sample = Sample {
            t_s: now.duration_since(start).as_secs_f64(),
            unix_s: unix_now(),
            interval_s: span.as_secs_f64(),
            available: figures.available,
            longest_gap_s: figures.longest_gap_ns as f64 / 1e9,
            gaps: figures.gaps,
            looped_s: figures.looped_ns as f64 / 1e9,
            run_fraction,
            wait_fraction,
            cgroup_cpu_s,
        };
        let line = match cli.format {
            Format::Csv => sample.csv(),
            Format::Jsonl => serde_json::to_string(&sample).expect("samples serialize"),
        };
        if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
            return ExitCode::from(1);
        }
        from = now;
        if end.is_some_and(|e| now >= e) {
            break;
        }
    }
    ExitCode::SUCCESS
}
