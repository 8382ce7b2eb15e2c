//! Behaviour of whole pipes under virtual time.

use nestbed_pipe::{
    DelayParams, Delivery, DropCause, EnqueueOutcome, Instant, JitterDistribution, LossModel,
    Packet, Pipe, PipeParams, QueueLimit, RedParams,
};

const MBPS: u64 = 1_000_000;
const MS: u64 = 1_000_000;
const US: u64 = 1_000;

fn packet(len: u32) -> Packet {
    Packet::new(vec![0xa5; len as usize])
}

fn shaped(rate_bps: u64, delay_ns: u64, limit: QueueLimit) -> PipeParams {
    let mut p = PipeParams::default();
    p.bandwidth.rate_bps = rate_bps;
    p.delay.delay_ns = delay_ns;
    p.queue.limit = Some(limit);
    p
}

/// Runs the pipe to empty, waking only when `next_wakeup` says, and checks
/// every delivery comes out exactly when due (no lateness).
fn drain(pipe: &mut Pipe) -> Vec<Delivery> {
    let mut out = Vec::new();
    let mut steps = 0;
    while let Some(t) = pipe.next_wakeup() {
        for d in pipe.dequeue_ready(t) {
            assert_eq!(d.due, t, "packet {} handed out late", d.ordinal);
            out.push(d);
        }
        steps += 1;
        assert!(steps < 10_000_000, "pipe does not drain");
    }
    assert_eq!(pipe.counters().queue_packets, 0);
    assert_eq!(pipe.counters().delay_line_packets, 0);
    out
}

/// Feeds `arrivals` (in time order) to the pipe, handing out packets at
/// every wake-up in between, then drains it. Every delivery is checked to
/// come out exactly when due.
fn simulate(
    pipe: &mut Pipe,
    arrivals: impl IntoIterator<Item = (Instant, Packet)>,
) -> (Vec<EnqueueOutcome>, Vec<Delivery>) {
    let mut outcomes = Vec::new();
    let mut out = Vec::new();
    for (t, p) in arrivals {
        while let Some(w) = pipe.next_wakeup().filter(|&w| w <= t) {
            for d in pipe.dequeue_ready(w) {
                assert_eq!(d.due, w, "packet {} handed out late", d.ordinal);
                out.push(d);
            }
        }
        outcomes.push(pipe.enqueue(t, p));
    }
    out.extend(drain(pipe));
    (outcomes, out)
}

#[test]
fn throughput_matches_the_rate_exactly() {
    // 1000-byte frames + 24 bytes of Ethernet overhead = 8192 bits:
    // 819.2 µs each at 10 Mb/s. (Without the inter-frame gap and preamble
    // it would be 800 µs; 817.6 µs would be 22 bytes of overhead.)
    let n = 5_000u64;
    let mut pipe = Pipe::new(shaped(10 * MBPS, 0, QueueLimit::Packets(10_000)), 1).unwrap();
    for _ in 0..n {
        assert!(pipe.enqueue(Instant::ZERO, packet(1000)).is_accepted());
    }
    let out = drain(&mut pipe);
    assert_eq!(out.len() as u64, n);
    for (k, d) in out.iter().enumerate() {
        let k = k as u64 + 1;
        assert_eq!(d.ordinal, k);
        assert_eq!(d.transmitted.as_nanos(), k * 819_200);
        assert_eq!(d.due, d.transmitted);
    }
    // n frames in exactly n × 8192 bits / 10 Mb/s.
    assert_eq!(out.last().unwrap().due.as_nanos(), 4_096_000_000);
}

#[test]
fn throughput_has_no_drift_at_awkward_rates() {
    // 64-byte frames on a T1 (1.544 Mb/s): 704 bits = 455 958.549… ns each.
    let n = 20_000u128;
    let mut pipe = Pipe::new(shaped(1_544_000, 3 * MS, QueueLimit::Packets(100_000)), 1).unwrap();
    for _ in 0..n {
        pipe.enqueue(Instant::ZERO, packet(64));
    }
    let out = drain(&mut pipe);
    for (k, d) in out.iter().enumerate() {
        let k = k as u128 + 1;
        let exact = (k * 704 * 1_000_000_000).div_ceil(1_544_000);
        assert_eq!(u128::from(d.transmitted.as_nanos()), exact);
        assert_eq!(d.due.as_nanos(), d.transmitted.as_nanos() + 3 * MS);
    }
}

#[test]
fn paced_arrivals_below_the_rate_see_only_serialization_and_delay() {
    let mut pipe = Pipe::new(shaped(100 * MBPS, 10 * MS, QueueLimit::Packets(10)), 1).unwrap();
    let arrivals = (0..1_000).map(|k| (Instant::from_nanos(k * 200 * US + 37), packet(1500)));
    let (outcomes, out) = simulate(&mut pipe, arrivals);
    assert!(outcomes.iter().all(EnqueueOutcome::is_accepted));
    assert_eq!(out.len(), 1_000);
    for d in &out {
        // (1500 + 24) × 8 / 100 Mb/s = 121.92 µs, then exactly 10 ms.
        assert_eq!(d.transmitted.nanos_since(d.arrived), 121_920);
        assert_eq!(d.due.nanos_since(d.arrived), 121_920 + 10 * MS);
    }
    assert_eq!(pipe.counters().queue_peak_packets, 1);
}

#[test]
fn unlimited_rate_delay_is_exact() {
    let mut params = PipeParams::default();
    params.delay.delay_ns = 50 * MS;
    let mut pipe = Pipe::new(params, 1).unwrap();
    for k in 0..100u64 {
        pipe.enqueue(Instant::from_nanos(k * 12_345), packet(100));
    }
    let out = drain(&mut pipe);
    assert_eq!(out.len(), 100);
    for d in &out {
        assert_eq!(d.transmitted, d.arrived);
        assert_eq!(d.due.nanos_since(d.arrived), 50 * MS);
    }
}

#[test]
fn no_shaping_passes_packets_at_once() {
    let mut pipe = Pipe::new(PipeParams::default(), 1).unwrap();
    let t = Instant::from_millis(3);
    pipe.enqueue(t, packet(60));
    assert_eq!(pipe.next_wakeup(), Some(t));
    let out = pipe.dequeue_ready(t);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].packet.data(), &[0xa5; 60][..]);
    assert_eq!(pipe.next_wakeup(), None);
}

#[test]
fn droptail_limit_in_packets() {
    let mut pipe = Pipe::new(shaped(10 * MBPS, 0, QueueLimit::Packets(10)), 1).unwrap();
    let outcomes: Vec<_> = (0..100)
        .map(|_| pipe.enqueue(Instant::ZERO, packet(1000)))
        .collect();
    assert!(outcomes[..10].iter().all(|o| o.is_accepted()));
    assert!(outcomes[10..]
        .iter()
        .all(|o| o.drop_cause() == Some(DropCause::QueueFull)));
    let c = pipe.counters();
    assert_eq!((c.packets_in, c.drops.queue_full), (100, 90));
    assert_eq!((c.queue_packets, c.queue_peak_packets), (10, 10));
    assert_eq!((c.queue_bytes, c.queue_peak_bytes), (10_000, 10_000));

    // Once the first frame has left (819.2 µs), there is room for one more.
    let t = Instant::from_nanos(819_200);
    assert!(pipe.enqueue(t, packet(1000)).is_accepted());
    assert_eq!(
        pipe.enqueue(t, packet(1000)).drop_cause(),
        Some(DropCause::QueueFull)
    );
    assert_eq!(drain(&mut pipe).len(), 11);
}

#[test]
fn a_super_frame_is_shaped_and_queued_as_its_wire_segments() {
    // Three 1000-byte wire frames in one packet take what three frames
    // take (overhead paid per frame: 3 × 819.2 µs at 10 Mb/s) and fill
    // three of the queue's four places.
    let mut pipe = Pipe::new(shaped(10 * MBPS, 0, QueueLimit::Packets(4)), 1).unwrap();
    let superframe = Packet::with_segments(vec![0; 2900], 3000, 3, 42);
    assert!(pipe.enqueue(Instant::ZERO, superframe).is_accepted());
    assert_eq!(pipe.counters().queue_packets, 3);
    assert!(pipe
        .enqueue(
            Instant::ZERO,
            Packet::with_segments(vec![0; 100], 2000, 2, 0)
        )
        .drop_cause()
        .is_some_and(|c| c == DropCause::QueueFull));
    assert!(pipe.enqueue(Instant::ZERO, packet(1000)).is_accepted());
    let out = drain(&mut pipe);
    assert_eq!(out[0].due, Instant::from_nanos(3 * 819_200));
    assert_eq!(out[0].packet.meta(), 42);
    assert_eq!(out[1].due, Instant::from_nanos(4 * 819_200));
}

#[test]
fn a_super_frame_is_taken_whole_only_where_its_frames_would_all_meet_the_same_fate() {
    let superframe = || Packet::with_segments(vec![0; 2900], 3000, 3, 42);
    // Rate, delay and a queue with room: whole (the fast path).
    let mut pipe = Pipe::new(shaped(10 * MBPS, MS, QueueLimit::Packets(4)), 1).unwrap();
    assert!(pipe.takes_whole(Instant::ZERO, &superframe()));
    assert!(pipe.enqueue(Instant::ZERO, superframe()).is_accepted());
    // One place left: its frames one by one (the first fits).
    assert!(!pipe.takes_whole(Instant::ZERO, &superframe()));
    assert!(pipe.takes_whole(Instant::ZERO, &packet(1000)));
    // Once the first has left the queue, there is room again.
    assert!(pipe.takes_whole(Instant::from_nanos(3 * 819_200), &superframe()));
    // Any stage that decides per packet: never whole.
    let per_packet: [fn(&mut PipeParams); 7] = [
        |p| p.loss = LossModel::Bernoulli { p: 0.01 },
        |p| {
            p.loss = LossModel::GilbertBurst {
                loss_rate: 0.01,
                mean_burst_len: 2.0,
            }
        },
        |p| p.drop_ordinals = vec![5],
        |p| p.queue.red = Some(RedParams::emulab_defaults()),
        |p| p.delay.jitter_ns = 1000,
        |p| p.delay.duplicate = 0.01,
        |p| p.delay.corrupt = 0.01,
    ];
    for (i, set) in per_packet.iter().enumerate() {
        let mut params = shaped(10 * MBPS, MS, QueueLimit::Packets(100));
        set(&mut params);
        assert!(params.acts_per_packet(), "case {i}");
        let mut pipe = Pipe::new(params, 1).unwrap();
        assert!(!pipe.takes_whole(Instant::ZERO, &superframe()), "case {i}");
        assert!(pipe.takes_whole(Instant::ZERO, &packet(1000)), "case {i}");
    }
    let mut params = shaped(10 * MBPS, MS, QueueLimit::Packets(100));
    params.loss = LossModel::Bernoulli { p: 0.0 };
    assert!(!params.acts_per_packet());
}

#[test]
fn droptail_limit_in_bytes() {
    let mut pipe = Pipe::new(shaped(10 * MBPS, 0, QueueLimit::Bytes(5_000)), 1).unwrap();
    let sizes = [1000, 1000, 1000, 1000, 1500, 1000, 1];
    let accepted: Vec<bool> = sizes
        .iter()
        .map(|&s| pipe.enqueue(Instant::ZERO, packet(s)).is_accepted())
        .collect();
    assert_eq!(accepted, vec![true, true, true, true, false, true, false]);
    let c = pipe.counters();
    assert_eq!(
        (c.queue_bytes, c.queue_packets, c.drops.queue_full),
        (5_000, 5, 2)
    );
}

/// Constant-rate arrivals of 1000-byte (on the wire) frames at `factor` ×
/// `rate_bps` for `seconds`.
fn overload(rate_bps: u64, factor: f64, seconds: u64) -> impl Iterator<Item = (Instant, Packet)> {
    let gap_ns = (1000.0 * 8.0 * 1e9 / (rate_bps as f64 * factor)) as u64;
    let n = seconds * 1_000 * MS / gap_ns;
    (0..n).map(move |k| (Instant::from_nanos(k * gap_ns), packet(976)))
}

#[test]
fn red_drops_early_and_keeps_the_average_between_thresholds() {
    let mut params = shaped(10 * MBPS, 0, QueueLimit::Packets(50));
    params.queue.red = Some(RedParams::emulab_defaults()); // 5..15 packets
    let mut pipe = Pipe::new(params, 3).unwrap();
    // 5 % overload for 20 s: RED must drop 1/21 of the packets, which with
    // max_p 0.1 and wait it does at p_b ≈ 0.071, an average of ≈ 12.
    let (_, out) = simulate(&mut pipe, overload(10 * MBPS, 1.05, 20));
    // The average as of the last arrival, still under load.
    let avg = pipe.red_average().unwrap();
    assert!((10.0..14.0).contains(&avg), "average {avg}");
    let c = pipe.counters().clone();
    assert!(c.drops.red_early > 1_000, "{c:?}");
    assert_eq!(c.drops.queue_full, 0, "{c:?}");
    // Forced drops only while the slow average overshoots at the start.
    assert!(c.drops.red_forced < 50, "{c:?}");
    // The link stays busy: 20 s at capacity, 1250 frames a second.
    assert!((out.len() as f64 - 25_000.0).abs() < 20.0, "{}", out.len());
    let drop_share = c.drops.total() as f64 / c.packets_in as f64;
    assert!((drop_share - 1.0 / 21.0).abs() < 0.001, "{drop_share}");
    // A DropTail queue would sit at its limit of 50; RED keeps it shorter.
    assert!(c.queue_peak_packets < 50, "{c:?}");
}

#[test]
fn gentle_red_drops_less_abruptly_than_red_above_maxthresh() {
    // Thresholds 2..4 under heavy overload push the average past maxthresh.
    let red = RedParams {
        thresh: 2.0,
        maxthresh: 4.0,
        q_weight: 0.02,
        ..RedParams::emulab_defaults()
    };
    let run = |gentle: bool| {
        let mut params = shaped(10 * MBPS, 0, QueueLimit::Packets(100));
        params.queue.red = Some(RedParams {
            gentle,
            ..red.clone()
        });
        let mut pipe = Pipe::new(params, 4).unwrap();
        simulate(&mut pipe, overload(10 * MBPS, 2.0, 5));
        pipe.counters().drops.clone()
    };
    let plain = run(false);
    let gentle = run(true);
    assert!(plain.red_forced > 0, "{plain:?}");
    assert!(
        gentle.red_forced < plain.red_forced,
        "{plain:?} vs {gentle:?}"
    );
    assert!(
        gentle.red_early > plain.red_early,
        "{plain:?} vs {gentle:?}"
    );
}

#[test]
fn red_average_decays_over_idle_time() {
    let mut params = shaped(10 * MBPS, 0, QueueLimit::Packets(100));
    params.queue.red = Some(RedParams {
        thresh: 50.0,
        maxthresh: 90.0,
        ..RedParams::emulab_defaults()
    });
    let mut pipe = Pipe::new(params, 5).unwrap();
    for _ in 0..60 {
        pipe.enqueue(Instant::ZERO, packet(976));
    }
    let busy_avg = pipe.red_average().unwrap();
    assert!(busy_avg > 2.0);
    drain(&mut pipe); // the queue empties at 60 ms
                      // 10 Mb/s, 500-byte mean packets: 2500 packets/s; 1 s idle ≈ 2500
                      // packets' worth of decay, 0.998^2500 < 1 %.
    pipe.enqueue(Instant::from_millis(1_060), packet(976));
    let idle_avg = pipe.red_average().unwrap();
    assert!(idle_avg < busy_avg * 0.01, "{busy_avg} → {idle_avg}");
}

#[test]
fn bernoulli_tenth_of_a_percent_is_within_binomial_bound() {
    let params = PipeParams {
        loss: LossModel::Bernoulli { p: 0.001 },
        ..PipeParams::default()
    };
    let mut pipe = Pipe::new(params, 6).unwrap();
    let n = 1_000_000u64;
    for k in 0..n {
        pipe.enqueue(
            Instant::from_nanos(k),
            Packet::with_wire_len(Vec::new(), 64),
        );
    }
    let lost = pipe.counters().drops.loss as f64;
    let sd = (n as f64 * 0.001 * 0.999).sqrt();
    assert!((lost - 1000.0).abs() < 4.4 * sd, "{lost}");
    assert_eq!(pipe.counters().packets_out, 0);
    assert_eq!(
        pipe.dequeue_ready(Instant::from_nanos(n)).len() as f64,
        n as f64 - lost
    );
}

#[test]
fn gilbert_burst_through_a_pipe() {
    let params = PipeParams {
        loss: LossModel::GilbertBurst {
            loss_rate: 0.025,
            mean_burst_len: 2.5,
        },
        ..PipeParams::default()
    };
    let mut pipe = Pipe::new(params, 7).unwrap();
    let (mut losses, mut bursts, mut prev_lost) = (0u64, 0u64, false);
    for k in 0..1_000_000u64 {
        let lost = !pipe
            .enqueue(
                Instant::from_nanos(k),
                Packet::with_wire_len(Vec::new(), 64),
            )
            .is_accepted();
        losses += u64::from(lost);
        bursts += u64::from(lost && !prev_lost);
        prev_lost = lost;
    }
    let rate = losses as f64 / 1e6;
    let burst = losses as f64 / bursts as f64;
    assert!((rate - 0.025).abs() / 0.025 < 0.03, "loss rate {rate}");
    assert!((burst - 2.5).abs() / 2.5 < 0.03, "mean burst {burst}");
    assert_eq!(pipe.counters().drops.loss, losses);
}

#[test]
fn drop_by_ordinal_is_exact() {
    let mut params = shaped(100 * MBPS, MS, QueueLimit::Packets(1000));
    params.drop_ordinals = vec![1, 3, 500];
    let mut pipe = Pipe::new(params, 8).unwrap();
    let arrivals = (0..600).map(|k| (Instant::from_micros(k * 200), packet(100)));
    let (outcomes, out) = simulate(&mut pipe, arrivals);
    let dropped: Vec<u64> = outcomes
        .iter()
        .filter(|o| o.drop_cause() == Some(DropCause::Ordinal))
        .map(|o| o.ordinal())
        .collect();
    assert_eq!(dropped, vec![1, 3, 500]);
    let delivered: Vec<u64> = out.iter().map(|d| d.ordinal).collect();
    assert_eq!(delivered.len(), 597);
    assert!(!delivered.contains(&1) && !delivered.contains(&3) && !delivered.contains(&500));
    assert_eq!(pipe.counters().drops.ordinal, 3);
}

fn jittered(reorder: bool, distribution: JitterDistribution) -> Vec<Delivery> {
    let mut params = shaped(100 * MBPS, 10 * MS, QueueLimit::Packets(1000));
    params.delay = DelayParams {
        delay_ns: 10 * MS,
        jitter_ns: 2 * MS,
        distribution,
        reorder,
        ..DelayParams::default()
    };
    let mut pipe = Pipe::new(params, 9).unwrap();
    let arrivals = (0..5_000).map(|k| (Instant::from_micros(k * 100), packet(200)));
    let (_, out) = simulate(&mut pipe, arrivals);
    assert_eq!(out.len(), 5_000);
    out
}

fn inversions(out: &[Delivery]) -> usize {
    out.windows(2)
        .filter(|w| w[1].ordinal < w[0].ordinal)
        .count()
}

#[test]
fn jitter_preserves_order_by_default() {
    for distribution in [
        JitterDistribution::Uniform,
        JitterDistribution::Normal,
        JitterDistribution::Pareto,
        JitterDistribution::Paretonormal,
    ] {
        let out = jittered(false, distribution);
        assert_eq!(inversions(&out), 0, "{distribution:?}");
        assert!(out.windows(2).all(|w| w[0].due <= w[1].due));
        let delays: Vec<u64> = out
            .iter()
            .map(|d| d.due.nanos_since(d.transmitted))
            .collect();
        assert!(
            delays.iter().any(|&d| d != 10 * MS),
            "{distribution:?}: no jitter"
        );
    }
}

#[test]
fn jitter_reorders_only_when_allowed() {
    let out = jittered(true, JitterDistribution::Uniform);
    let n = inversions(&out);
    assert!(n > 1_000, "only {n} inversions");
    // Each packet keeps its own delay: uniform on 10 ± 2 ms, mean 10 ms.
    let delays: Vec<i64> = out
        .iter()
        .map(|d| d.due.nanos_since(d.transmitted) as i64)
        .collect();
    assert!(delays
        .iter()
        .all(|&d| (8 * MS as i64..=12 * MS as i64).contains(&d)));
    let mean = delays.iter().sum::<i64>() as f64 / delays.len() as f64;
    assert!((mean - 10e6).abs() < 50e3, "{mean}");
}

#[test]
fn duplication_and_corruption() {
    let mut params = shaped(10 * MBPS, MS, QueueLimit::Packets(1000));
    params.delay.duplicate = 1.0;
    params.delay.corrupt = 1.0;
    let mut pipe = Pipe::new(params, 10).unwrap();
    let arrivals = (0..100).map(|k| (Instant::from_millis(k), packet(300)));
    let (_, out) = simulate(&mut pipe, arrivals);
    assert_eq!(out.len(), 200);
    let original = packet(300);
    for pair in out.chunks(2) {
        let (a, b) = (&pair[0], &pair[1]);
        assert_eq!(a.ordinal, b.ordinal);
        assert!(!a.duplicate && a.corrupted);
        assert!(b.duplicate && !b.corrupted);
        assert_eq!(b.packet, original);
        let flipped: u32 = a
            .packet
            .data()
            .iter()
            .zip(original.data())
            .map(|(x, y)| (x ^ y).count_ones())
            .sum();
        assert_eq!(flipped, 1);
    }
    let c = pipe.counters();
    assert_eq!((c.duplicates, c.corrupted), (100, 100));
    assert_eq!((c.packets_in, c.packets_out), (100, 200));
    assert_eq!((c.bytes_in, c.bytes_out), (30_000, 60_000));
}

#[test]
fn runtime_change_keeps_queue_and_counters() {
    // 8 Mb/s: 976 + 24 bytes take exactly 1 ms.
    let params = shaped(8 * MBPS, 0, QueueLimit::Packets(100));
    let mut pipe = Pipe::new(params.clone(), 11).unwrap();
    for _ in 0..20 {
        pipe.enqueue(Instant::ZERO, packet(976));
    }
    let first = pipe.dequeue_ready(Instant::from_micros(4_500));
    assert_eq!(first.len(), 4);
    let before = pipe.counters().clone();
    assert_eq!(before.queue_packets, 16);

    let mut faster = params.clone();
    faster.bandwidth.rate_bps = 16 * MBPS; // 0.5 ms per frame
    faster.delay.delay_ns = 2 * MS;
    faster.queue.limit = Some(QueueLimit::Packets(5)); // below the queue: drops nothing queued
    pipe.set_params(Instant::from_micros(4_500), faster)
        .unwrap();
    assert_eq!(
        pipe.counters(),
        &before,
        "set_params must not touch counters"
    );

    // The frame on the wire (4 → 5 ms) keeps its times; the rest go at the
    // new rate, with the new delay.
    let rest = drain(&mut pipe);
    assert_eq!(rest.len(), 16);
    assert_eq!(rest[0].transmitted.as_nanos(), 5 * MS);
    assert_eq!(rest[0].due.as_nanos(), 5 * MS); // planned before the change
    for (k, d) in rest.iter().enumerate().skip(1) {
        assert_eq!(d.transmitted.as_nanos(), 5 * MS + k as u64 * 500 * US);
        assert_eq!(d.due.as_nanos(), d.transmitted.as_nanos() + 2 * MS);
    }
    let c = pipe.counters();
    assert_eq!((c.packets_in, c.packets_out), (20, 20));
    assert_eq!(c.queue_peak_packets, 20);
    assert_eq!(pipe.queue_limit(), QueueLimit::Packets(5));
}

#[test]
fn default_queue_limit_is_the_bandwidth_delay_product() {
    let mut params = PipeParams::default();
    params.bandwidth.rate_bps = 10 * MBPS;
    params.delay.delay_ns = 100 * MS;
    // RTT 200 ms × 10 Mb/s = 250 000 bytes = 162.5 frames of 1538 → 163.
    assert_eq!(params.default_queue_limit(), QueueLimit::Packets(163));
    let mut pipe = Pipe::new(params, 12).unwrap();
    assert_eq!(pipe.queue_limit(), QueueLimit::Packets(163));
    let accepted = (0..200)
        .filter(|_| pipe.enqueue(Instant::ZERO, packet(1514)).is_accepted())
        .count();
    assert_eq!(accepted, 163);

    // A short or unshaped path gets the floor of 50 packets.
    assert_eq!(
        PipeParams::default().default_queue_limit(),
        QueueLimit::Packets(50)
    );
    // An explicit limit wins.
    let mut explicit = PipeParams::default();
    explicit.queue.limit = Some(QueueLimit::Bytes(9_000));
    assert_eq!(explicit.queue_limit(), QueueLimit::Bytes(9_000));
}

#[test]
fn same_seed_same_run_different_seed_different_run() {
    let run = |seed: u64| {
        let mut params = shaped(10 * MBPS, 5 * MS, QueueLimit::Packets(20));
        params.loss = LossModel::Bernoulli { p: 0.05 };
        params.delay.jitter_ns = MS;
        params.delay.reorder = true;
        let mut pipe = Pipe::new(params, seed).unwrap();
        assert_eq!(pipe.seed(), seed);
        let arrivals = (0..2_000).map(|k| (Instant::from_micros(k * 700), packet(800)));
        simulate(&mut pipe, arrivals)
            .1
            .iter()
            .map(|d| (d.ordinal, d.due))
            .collect::<Vec<_>>()
    };
    assert_eq!(run(1), run(1));
    assert_ne!(run(1), run(2));
}

#[test]
fn time_going_backwards_is_clamped() {
    let mut pipe = Pipe::new(shaped(0, 10 * MS, QueueLimit::Packets(10)), 13).unwrap();
    pipe.enqueue(Instant::from_millis(100), packet(10));
    pipe.enqueue(Instant::from_millis(50), packet(10)); // treated as 100 ms
    let out = pipe.dequeue_ready(Instant::from_millis(110));
    assert_eq!(out.len(), 2);
    assert!(out.iter().all(|d| d.arrived == Instant::from_millis(100)));
}

#[test]
fn parameters_from_json_reject_unknown_fields_and_bad_values() {
    let typo = serde_json::from_str::<PipeParams>(r#"{"delay": {"dealy_ns": 5}}"#);
    assert!(typo.unwrap_err().to_string().contains("dealy_ns"));
    let typo = serde_json::from_str::<PipeParams>(r#"{"loss": {"model": "bernoulli", "q": 0.1}}"#);
    assert!(typo.is_err());
    let typo = serde_json::from_str::<PipeParams>(
        r#"{"queue": {"red": {"thresh": 5, "maxthresh": 15, "qweight": 0.1}}}"#,
    );
    assert!(typo.is_err());

    let params: PipeParams = serde_json::from_str(
        r#"{"loss": {"model": "gilbert_elliott", "p": 0.01, "r": 0.5, "loss_in_bad": 1.0, "loss_in_good": 0.0},
            "queue": {"limit": {"bytes": 64000}, "red": {"thresh": 5, "maxthresh": 15, "gentle": true}},
            "bandwidth": {"rate_bps": 1544000, "burst_bytes": 3076},
            "delay": {"delay_ns": 1, "jitter_ns": 2, "distribution": "paretonormal", "reorder": true}}"#,
    )
    .unwrap();
    assert_eq!(params.bandwidth.overhead_bytes, 24);
    assert_eq!(params.queue.red.as_ref().unwrap().q_weight, 0.002);
    let json = serde_json::to_string(&params).unwrap();
    assert_eq!(serde_json::from_str::<PipeParams>(&json).unwrap(), params);

    let mut bad = PipeParams {
        loss: LossModel::Bernoulli { p: 1.5 },
        drop_ordinals: vec![0],
        ..PipeParams::default()
    };
    bad.delay.duplicate = -0.1;
    bad.queue.red = Some(RedParams {
        maxthresh: 1.0,
        ..RedParams::emulab_defaults()
    });
    let err = Pipe::new(bad.clone(), 0).unwrap_err();
    let fields: Vec<&str> = err.errors().iter().map(|e| e.field.as_str()).collect();
    assert_eq!(
        fields,
        vec![
            "loss.p",
            "drop_ordinals[0]",
            "queue.red.maxthresh",
            "delay.duplicate"
        ]
    );
    assert!(err
        .to_string()
        .contains("loss.p: must be a probability in [0, 1], got 1.5"));

    // Bad parameters at run time change nothing.
    let mut pipe = Pipe::new(PipeParams::default(), 0).unwrap();
    assert!(pipe.set_params(Instant::ZERO, bad).is_err());
    assert_eq!(pipe.params(), &PipeParams::default());
}

#[test]
fn results_do_not_depend_on_how_often_the_caller_polls() {
    let mut params = shaped(10 * MBPS, 2 * MS, QueueLimit::Packets(30));
    params.loss = LossModel::Bernoulli { p: 0.02 };
    params.queue.red = Some(RedParams::emulab_defaults());
    params.delay.jitter_ns = 500 * US;
    params.delay.reorder = true;
    params.delay.duplicate = 0.05;
    let arrivals: Vec<(Instant, u32)> = (0..3_000u64)
        .map(|k| {
            (
                Instant::from_micros(k * 600),
                [64, 1500, 576][k as usize % 3],
            )
        })
        .collect();

    // Polling only at wake-ups...
    let mut a = Pipe::new(params.clone(), 14).unwrap();
    let (_, lazy) = simulate(&mut a, arrivals.iter().map(|&(t, l)| (t, packet(l))));

    // ...or every 10 µs gives the same packets, times and counters.
    let mut b = Pipe::new(params, 14).unwrap();
    let mut eager = Vec::new();
    let mut next = arrivals.iter().peekable();
    let mut t = 0;
    while next.peek().is_some() || b.next_wakeup().is_some() {
        let now = Instant::from_nanos(t);
        eager.extend(b.dequeue_ready(now));
        while let Some(&&(at, len)) = next.peek().filter(|(at, _)| *at <= now) {
            b.enqueue(at.max(now), packet(len));
            next.next();
        }
        t += 10 * US;
    }
    let key = |d: &Delivery| (d.ordinal, d.duplicate, d.transmitted, d.due);
    assert_eq!(
        lazy.iter().map(key).collect::<Vec<_>>(),
        eager.iter().map(key).collect::<Vec<_>>()
    );
    assert_eq!(a.counters(), b.counters());
    assert!(a.counters().duplicates > 50 && a.counters().drops.loss > 20);
}

#[test]
fn busy_time_is_the_serialization_time_of_what_was_sent_and_not_the_gaps() {
    // 1 byte per µs: 976 bytes + 24 of overhead take exactly 1 ms on the link.
    let mut pipe = Pipe::new(shaped(8 * MBPS, 0, QueueLimit::Packets(100)), 1).unwrap();
    let burst = (0..10).map(|_| (Instant::ZERO, packet(976)));
    let late = (Instant::from_nanos(25 * MS), packet(976));
    simulate(&mut pipe, burst.chain(std::iter::once(late)));
    assert_eq!(pipe.counters().busy_ns, 11 * MS);
    // A fractional serialization time (704 bits at 56 kb/s: 12.571… ms) rounds once per busy
    // period, not once per frame.
    let mut slow = Pipe::new(shaped(56_000, 0, QueueLimit::Packets(1000)), 1).unwrap();
    simulate(&mut slow, (0..700).map(|_| (Instant::ZERO, packet(64))));
    assert_eq!(
        slow.counters().busy_ns,
        (700 * 704 * 1_000_000_000u64).div_ceil(56_000)
    );
    // Without a rate the link takes no time.
    let mut free = Pipe::new(shaped(0, 5 * MS, QueueLimit::Packets(100)), 1).unwrap();
    simulate(
        &mut free,
        (0..10).map(|k| (Instant::from_nanos(k * US), packet(976))),
    );
    assert_eq!(free.counters().busy_ns, 0);
}
