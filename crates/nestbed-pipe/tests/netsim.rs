//! A simulated bottleneck in virtual time, in the style of smoltcp's
//! `tests/netsim.rs`: seeded Poisson traffic of mixed frame sizes goes
//! through one pipe per configuration, and the results table (offered,
//! delivered, drops by cause, delay) is compared with the checked-in
//! snapshot `tests/snapshots/netsim.txt`.
//!
//! After an intended change, regenerate it with
//! `NESTBED_UPDATE_SNAPSHOTS=1 cargo test -p nestbed-pipe --test netsim`
//! and review the diff.

use std::fmt::Write as _;
use std::path::Path;

use nestbed_pipe::{
    DelayParams, Instant, JitterDistribution, LossModel, Packet, Pipe, PipeParams, QueueLimit,
    RedParams,
};
use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, Exp};
use rand_pcg::Pcg64;

const MBPS: u64 = 1_000_000;
const MS: u64 = 1_000_000;

/// Frame lengths (without Ethernet overhead) and their shares of packets.
const SIZES: [(u32, f64); 3] = [(64, 0.4), (576, 0.2), (1514, 0.4)];

struct Config {
    name: &'static str,
    params: PipeParams,
    /// Offered load as a fraction of `rate_bps` (on-the-wire bytes).
    load: f64,
    seconds: u64,
}

fn base(rate_bps: u64, delay_ns: u64, limit: Option<QueueLimit>) -> PipeParams {
    let mut p = PipeParams::default();
    p.bandwidth.rate_bps = rate_bps;
    p.delay.delay_ns = delay_ns;
    p.queue.limit = limit;
    p
}

fn configs() -> Vec<Config> {
    let ten = |delay_ms: u64| base(10 * MBPS, delay_ms * MS, Some(QueueLimit::Packets(50)));
    let with = |mut p: PipeParams, f: &dyn Fn(&mut PipeParams)| {
        f(&mut p);
        p
    };
    let red = RedParams::emulab_defaults();
    vec![
        Config {
            name: "droptail-50p load0.8",
            params: ten(10),
            load: 0.8,
            seconds: 5,
        },
        Config {
            name: "droptail-50p load1.2",
            params: ten(10),
            load: 1.2,
            seconds: 5,
        },
        Config {
            name: "droptail-64KB load1.2",
            params: base(10 * MBPS, 10 * MS, Some(QueueLimit::Bytes(64_000))),
            load: 1.2,
            seconds: 5,
        },
        Config {
            name: "bdp-default load1.2",
            params: base(10 * MBPS, 50 * MS, None),
            load: 1.2,
            seconds: 5,
        },
        Config {
            name: "red load1.2",
            params: with(ten(10), &|p| p.queue.red = Some(red.clone())),
            load: 1.2,
            seconds: 5,
        },
        Config {
            name: "gentle-red load1.5",
            params: with(ten(10), &|p| {
                p.queue.red = Some(RedParams {
                    gentle: true,
                    ..red.clone()
                })
            }),
            load: 1.5,
            seconds: 5,
        },
        Config {
            name: "red-bytes load1.2",
            params: with(ten(10), &|p| {
                p.queue.limit = Some(QueueLimit::Bytes(75_000));
                p.queue.red = Some(RedParams {
                    queue_in_bytes: true,
                    bytes: true,
                    mean_pktsize: 770,
                    ..red.clone()
                })
            }),
            load: 1.2,
            seconds: 5,
        },
        Config {
            name: "bernoulli1% load0.5",
            params: with(ten(20), &|p| p.loss = LossModel::Bernoulli { p: 0.01 }),
            load: 0.5,
            seconds: 5,
        },
        Config {
            name: "gilbert2%/3 load0.5",
            params: with(ten(20), &|p| {
                p.loss = LossModel::GilbertBurst {
                    loss_rate: 0.02,
                    mean_burst_len: 3.0,
                }
            }),
            load: 0.5,
            seconds: 5,
        },
        Config {
            name: "gilbert-elliott load0.5",
            params: with(ten(20), &|p| {
                p.loss = LossModel::GilbertElliott {
                    p: 0.005,
                    r: 0.1,
                    loss_in_bad: 0.5,
                    loss_in_good: 0.001,
                }
            }),
            load: 0.5,
            seconds: 5,
        },
        Config {
            name: "normal-jitter ordered",
            params: with(ten(20), &|p| {
                p.delay = DelayParams {
                    delay_ns: 20 * MS,
                    jitter_ns: 5 * MS,
                    distribution: JitterDistribution::Normal,
                    ..DelayParams::default()
                }
            }),
            load: 0.5,
            seconds: 5,
        },
        Config {
            name: "pareto-jitter reorder",
            params: with(ten(20), &|p| {
                p.delay = DelayParams {
                    delay_ns: 20 * MS,
                    jitter_ns: 5 * MS,
                    distribution: JitterDistribution::Pareto,
                    reorder: true,
                    ..DelayParams::default()
                }
            }),
            load: 0.5,
            seconds: 5,
        },
        Config {
            name: "ordinals+dup+corrupt",
            params: with(ten(5), &|p| {
                p.drop_ordinals = vec![1, 10, 100, 1000];
                p.delay.duplicate = 0.01;
                p.delay.corrupt = 0.01;
            }),
            load: 0.5,
            seconds: 5,
        },
        Config {
            name: "burst15KB 1Mb/s load0.9",
            params: with(base(MBPS, 0, Some(QueueLimit::Packets(50))), &|p| {
                p.bandwidth.burst_bytes = 15_000
            }),
            load: 0.9,
            seconds: 20,
        },
        Config {
            name: "56kb/s load1.1 300ms",
            params: base(56_000, 300 * MS, Some(QueueLimit::Packets(10))),
            load: 1.1,
            seconds: 60,
        },
    ]
}

/// Poisson arrivals of mixed-size frames offering `load` × `rate_bps`.
fn traffic(seed: u64, rate_bps: u64, load: f64, seconds: u64) -> Vec<(Instant, Packet)> {
    let mut rng = Pcg64::seed_from_u64(seed);
    let mean_wire_bytes: f64 = SIZES
        .iter()
        .map(|&(len, share)| f64::from(len + 24) * share)
        .sum();
    let packets_per_s = rate_bps as f64 * load / (8.0 * mean_wire_bytes);
    let gaps = Exp::new(packets_per_s).unwrap();
    let end = seconds as f64;
    let mut t = 0.0;
    let mut out = Vec::new();
    loop {
        t += gaps.sample(&mut rng);
        if t >= end {
            return out;
        }
        let pick: f64 = rng.random();
        let mut acc = 0.0;
        let len = SIZES
            .iter()
            .find(|&&(_, share)| {
                acc += share;
                pick < acc
            })
            .map_or(SIZES[SIZES.len() - 1].0, |&(len, _)| len);
        out.push((
            Instant::from_nanos((t * 1e9) as u64),
            Packet::new(vec![0; len as usize]),
        ));
    }
}

struct Row {
    offered: u64,
    delivered: u64,
    loss: u64,
    ordinal: u64,
    queue_full: u64,
    red_early: u64,
    red_forced: u64,
    duplicates: u64,
    corrupted: u64,
    reordered: u64,
    mean_delay_ns: u64,
    max_delay_ns: u64,
    peak_queue: u64,
    late: u64,
}

fn run(config: &Config, seed: u64) -> Row {
    let mut pipe = Pipe::new(config.params.clone(), seed).unwrap();
    let arrivals = traffic(
        seed ^ 0x5eed,
        config.params.bandwidth.rate_bps,
        config.load,
        config.seconds,
    );
    let (mut late, mut delivered, mut sum_delay, mut max_delay) = (0u64, 0u64, 0u128, 0u64);
    let (mut highest, mut reordered) = (0u64, 0u64);
    let mut take = |pipe: &mut Pipe, now: Instant| {
        for d in pipe.dequeue_ready(now) {
            late += u64::from(d.due != now);
            delivered += 1;
            let delay = d.due.nanos_since(d.arrived);
            sum_delay += u128::from(delay);
            max_delay = max_delay.max(delay);
            if !d.duplicate {
                if d.ordinal < highest {
                    reordered += 1;
                }
                highest = highest.max(d.ordinal);
            }
        }
    };
    for (t, packet) in arrivals {
        while let Some(w) = pipe.next_wakeup().filter(|&w| w <= t) {
            take(&mut pipe, w);
        }
        pipe.enqueue(t, packet);
    }
    while let Some(w) = pipe.next_wakeup() {
        take(&mut pipe, w);
    }
    let c = pipe.counters();
    assert_eq!(c.packets_out, delivered);
    assert_eq!(
        c.packets_in + c.duplicates,
        c.packets_out + c.drops.total(),
        "{}: packets must be conserved",
        config.name
    );
    Row {
        offered: c.packets_in,
        delivered,
        loss: c.drops.loss,
        ordinal: c.drops.ordinal,
        queue_full: c.drops.queue_full,
        red_early: c.drops.red_early,
        red_forced: c.drops.red_forced,
        duplicates: c.duplicates,
        corrupted: c.corrupted,
        reordered,
        mean_delay_ns: u64::try_from(sum_delay / u128::from(delivered.max(1))).unwrap(),
        max_delay_ns: max_delay,
        peak_queue: c.queue_peak_packets,
        late,
    }
}

fn micros(ns: u64) -> String {
    format!("{}.{:03}", ns / 1000, ns % 1000)
}

fn table() -> String {
    let mut s = String::new();
    writeln!(
        s,
        "# nestbed-pipe netsim: seeded Poisson traffic (40% 64 B, 20% 576 B, 40% 1514 B) \
         through one pipe, virtual time"
    )
    .unwrap();
    writeln!(
        s,
        "{:<24} {:>7} {:>9} {:>5} {:>4} {:>6} {:>6} {:>6} {:>4} {:>4} {:>5} {:>13} {:>13} {:>5}",
        "config",
        "offered",
        "delivered",
        "loss",
        "ord",
        "qfull",
        "redE",
        "redF",
        "dup",
        "corr",
        "reord",
        "mean_delay_us",
        "max_delay_us",
        "peakq"
    )
    .unwrap();
    for (i, config) in configs().iter().enumerate() {
        let r = run(config, 1000 + i as u64);
        assert_eq!(r.late, 0, "{}: packets handed out late", config.name);
        writeln!(
            s,
            "{:<24} {:>7} {:>9} {:>5} {:>4} {:>6} {:>6} {:>6} {:>4} {:>4} {:>5} {:>13} {:>13} {:>5}",
            config.name,
            r.offered,
            r.delivered,
            r.loss,
            r.ordinal,
            r.queue_full,
            r.red_early,
            r.red_forced,
            r.duplicates,
            r.corrupted,
            r.reordered,
            micros(r.mean_delay_ns),
            micros(r.max_delay_ns),
            r.peak_queue
        )
        .unwrap();
    }
    s
}

/// Compares `actual` with the snapshot file `name`, or rewrites the file
/// when `NESTBED_UPDATE_SNAPSHOTS` is set.
fn assert_snapshot(name: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/snapshots")
        .join(name);
    if std::env::var_os("NESTBED_UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_default();
    if expected != actual {
        let new = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}.new"));
        std::fs::write(&new, actual).unwrap();
        let first_diff = expected
            .lines()
            .zip(actual.lines())
            .position(|(e, a)| e != a)
            .map_or_else(
                || "line count differs".to_string(),
                |i| format!("line {}", i + 1),
            );
        panic!(
            "snapshot {} differs at {first_diff}; the new table is in {}.\n\
             If the change is intended, rerun with NESTBED_UPDATE_SNAPSHOTS=1.\n\
             --- expected\n{expected}--- actual\n{actual}",
            path.display(),
            new.display()
        );
    }
}

#[test]
fn bottleneck_results_match_snapshot() {
    let first = table();
    // Same seeds, same table: the whole simulation is deterministic.
    assert_eq!(first, table());
    assert_snapshot("netsim.txt", &first);
}
