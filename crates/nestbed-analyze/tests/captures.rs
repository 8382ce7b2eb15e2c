//! Whole-file tests: captures written byte by byte in every supported format, link type and
//! IP version, analyzed end to end.

mod common;

use std::fs;

use common::*;
use etherparse::PacketBuilder;
use nestbed_analyze::report::{Report, TransferSummary};
use nestbed_analyze::{analyze, AnalyzeError};

fn clean_shape() -> Shape {
    Shape {
        segments: 200,
        mss: 1000,
        window_segments: 10,
        rtt_ns: 20 * MS,
        react_ns: 10 * US,
        stalls: vec![],
    }
}

fn only_transfer(r: &Report) -> &TransferSummary {
    assert_eq!(r.transfers.len(), 1, "transfers: {:?}", r.transfers);
    &r.transfers[0]
}

fn close(a: Option<f64>, b: f64, tol: f64) -> bool {
    a.is_some_and(|a| (a - b).abs() <= tol)
}

#[test]
fn every_link_type_ip_version_and_format_gives_the_same_transfer() {
    let dir = folder("formats");
    let segs = transfer(&clean_shape());
    for link in [Link::Ethernet, Link::Sll, Link::Sll2, Link::Raw] {
        for v6 in [false, true] {
            for ng in [false, true] {
                let recs = records(link, v6, &segs);
                let path = dir.join(format!("{link:?}-{v6}-{ng}.cap"));
                if ng {
                    write_pcapng(&path, link.linktype(), 65535, &recs, 9);
                } else {
                    write_pcap(&path, link.linktype(), 65535, &recs, false);
                }
                let r = analyze(std::slice::from_ref(&path), 1.0, None).unwrap();
                let what = format!("{link:?} v6={v6} pcapng={ng}");
                let c = &r.captures[0];
                assert_eq!(c.format, if ng { "pcapng" } else { "pcap" }, "{what}");
                assert_eq!(c.unusable_total, 0, "{what}: {:?}", c.unusable);
                assert_eq!(c.tcp_segments as usize, segs.len(), "{what}");
                let t = only_transfer(&r);
                assert_eq!(t.ip_version, if v6 { 6 } else { 4 }, "{what}");
                assert_eq!((t.sport, t.dport), (PORT_A, PORT_B), "{what}");
                assert_eq!(t.unique_bytes, 200_000, "{what}");
                assert_eq!(t.acked_bytes, 200_000, "{what}");
                assert_eq!(t.retransmitted_segments, 0, "{what}");
                assert_eq!(t.rtt.count, 200, "{what}");
                assert!(
                    close(t.rtt.min_s, 0.020, 1e-9) && close(t.rtt.max_s, 0.020, 1e-9),
                    "{what}: {:?}",
                    t.rtt
                );
                assert!(
                    t.window.scale_known && t.window.receiver_scale == Some(2),
                    "{what}"
                );
                assert_eq!(t.window.max_bytes, Some(10_000), "{what}");
                assert_eq!(
                    (t.mss_bytes, t.packet_bytes),
                    (1000, if v6 { 1060 } else { 1040 }),
                    "{what}"
                );
                // Every ACK but the last window's lets the sender send; it answers in 10 µs.
                assert_eq!(t.spacing.count, 190, "{what}");
                assert!(
                    close(t.spacing.max_s, 10e-6, 1e-9),
                    "{what}: {:?}",
                    t.spacing
                );
                let ideal = 10_000.0 / 0.020;
                let got = t.throughput_bytes_per_s.unwrap();
                assert!(
                    got > 0.95 * ideal && got <= ideal,
                    "{what}: {got} vs {ideal}"
                );
                assert!(
                    close(Some(t.start_unix_s), START_NS as f64 / 1e9, 1e-6),
                    "{what}"
                );
            }
        }
    }
}

#[test]
fn a_sender_stall_shows_as_spacing_and_idle_time() {
    let dir = folder("stall");
    let shape = Shape {
        stalls: vec![(50, 30 * MS)],
        ..clean_shape()
    };
    let path = dir.join("stall.pcap");
    write_pcap(
        &path,
        1,
        65535,
        &records(Link::Ethernet, false, &transfer(&shape)),
        true,
    );
    let r = analyze(&[path], 1.0, None).unwrap();
    let t = only_transfer(&r);
    // The ten ACKs that arrived during the stall each give a sample; the longest is the stall.
    assert!(close(t.spacing.max_s, 0.030_010, 1e-9), "{:?}", t.spacing);
    assert!(close(t.idle.max_s, 0.030_010, 1e-9), "{:?}", t.idle);
    assert!((t.idle.total_s - (0.030_010 + (t.idle.count - 1) as f64 * 10e-6)).abs() < 1e-9);
    // RTT is unchanged by the stall.
    assert!(close(t.rtt.max_s, 0.020, 1e-9));
}

#[test]
fn snaplen_cut_records_keep_their_payload_lengths() {
    let dir = folder("snaplen");
    let segs = transfer(&clean_shape());
    let path = dir.join("cut.pcap");
    write_pcap(&path, 1, 64, &records(Link::Ethernet, false, &segs), false);
    let r = analyze(std::slice::from_ref(&path), 1.0, None).unwrap();
    assert_eq!(r.captures[0].truncated_payloads, 200);
    assert_eq!(r.captures[0].unusable_total, 0);
    assert_eq!(only_transfer(&r).unique_bytes, 200_000);
    // Cut inside the TCP header: nothing is usable, and that is said.
    write_pcap(&path, 1, 40, &records(Link::Ethernet, false, &segs), false);
    let r = analyze(&[path], 1.0, None).unwrap();
    assert_eq!(r.transfers.len(), 0);
    assert_eq!(
        r.captures[0].unusable.get("truncated_tcp_header"),
        Some(&(segs.len() as u64))
    );
}

#[test]
fn unusable_records_are_counted_by_reason() {
    let dir = folder("reasons");
    let t = |i: i64| START_NS + i * MS;
    let mut udp = Vec::new();
    PacketBuilder::ethernet2([1; 6], [2; 6])
        .ipv4(A4, B4, 64)
        .udp(53, 53)
        .write(&mut udp, b"query")
        .unwrap();
    let tcp = Link::Ethernet.frame(&ip_packet(
        false,
        &Tcp {
            from_a: true,
            len: 100,
            ..Tcp::default()
        },
    ));
    let mut arp = tcp.clone();
    arp[12..14].copy_from_slice(&[0x08, 0x06]);
    let mut fragment = tcp.clone();
    fragment[14 + 6] = 0x20; // more fragments
    let mut version = tcp.clone();
    version[14] = 0x55;
    let recs = vec![
        (t(0), tcp.clone()),
        (t(1), udp),
        (t(2), arp),
        (t(3), fragment),
        (t(4), version),
        (t(5), tcp[..10].to_vec()),
        (t(6), tcp.clone()),
    ];
    let path = dir.join("mixed.pcap");
    write_pcap(&path, 1, 65535, &recs, false);
    // Cut the file inside the last record.
    let bytes = fs::read(&path).unwrap();
    fs::write(&path, &bytes[..bytes.len() - 30]).unwrap();
    let r = analyze(&[path], 1.0, None).unwrap();
    let c = &r.captures[0];
    let expect = [
        ("not_tcp", 1),
        ("not_ip", 1),
        ("ip_fragment", 1),
        ("bad_ip_header", 1),
        ("truncated_link_header", 1),
        ("truncated_record", 1),
    ];
    assert_eq!(c.unusable.len(), expect.len(), "{:?}", c.unusable);
    for (reason, n) in expect {
        assert_eq!(
            c.unusable.get(reason),
            Some(&n),
            "{reason}: {:?}",
            c.unusable
        );
    }
    assert_eq!(c.tcp_segments, 1);
    assert_eq!(c.records, 6);

    let other = dir.join("wifi.pcap");
    write_pcap(
        &other,
        105,
        65535,
        &[(t(0), vec![0; 60]), (t(1), vec![0; 60])],
        false,
    );
    let r = analyze(&[other], 1.0, None).unwrap();
    assert_eq!(
        r.captures[0].unusable.get("unsupported_link_type"),
        Some(&2)
    );
}

#[test]
fn a_file_that_is_no_capture_is_a_usage_error() {
    let dir = folder("notcap");
    let path = dir.join("notes.txt");
    fs::write(&path, "hello, this is text").unwrap();
    match analyze(&[path], 1.0, None) {
        Err(e @ AnalyzeError::Usage(_)) => {
            assert_eq!(e.exit_code(), 2);
            assert!(
                e.to_string().contains("not a pcap or pcapng capture"),
                "{e}"
            );
        }
        other => panic!("expected a usage error, got {other:?}"),
    }
}

#[test]
fn pcapng_microsecond_default_and_nanosecond_resolution_agree() {
    let dir = folder("tsresol");
    let recs = records(Link::Ethernet, false, &transfer(&clean_shape()));
    let (us, ns) = (dir.join("us.pcapng"), dir.join("ns.pcapng"));
    write_pcapng(&us, 1, 65535, &recs, 6);
    write_pcapng(&ns, 1, 65535, &recs, 9);
    let r = analyze(&[us, ns], 1.0, None).unwrap();
    assert_eq!(r.transfers.len(), 2);
    for t in &r.transfers {
        assert!(close(Some(t.start_unix_s), START_NS as f64 / 1e9, 1e-6));
        assert!(close(t.rtt.p50_s, 0.020, 1e-9), "{:?}", t.rtt);
    }
    assert_eq!(r.transfers[0].first_seq, r.transfers[1].first_seq);
}

#[test]
fn a_new_syn_on_a_used_four_tuple_is_a_new_connection() {
    let dir = folder("reuse");
    let mut segs = transfer(&clean_shape());
    let later: Vec<_> = transfer(&clean_shape())
        .into_iter()
        .map(|(t, mut s)| {
            if s.from_a {
                s.seq = s.seq.wrapping_add(1_000_000);
            } else {
                s.ack = s.ack.map(|a| a.wrapping_add(1_000_000));
            }
            (t + 10_000 * MS, s)
        })
        .collect();
    segs.extend(later);
    let path = dir.join("reuse.pcap");
    write_pcap(
        &path,
        1,
        65535,
        &records(Link::Ethernet, false, &segs),
        false,
    );
    let r = analyze(&[path], 1.0, None).unwrap();
    assert_eq!(r.captures[0].connections, 2);
    assert_eq!(r.transfers.len(), 2);
    for t in &r.transfers {
        assert_eq!(t.unique_bytes, 200_000);
        assert_eq!(t.retransmitted_segments, 0);
    }
}

#[test]
fn tables_hold_every_sample() {
    let dir = folder("tables");
    let path = dir.join("t.pcap");
    write_pcap(
        &path,
        Link::Raw.linktype(),
        65535,
        &records(Link::Raw, false, &transfer(&clean_shape())),
        false,
    );
    let out = dir.join("tables");
    let r = analyze(&[path], 0.1, Some(&out)).unwrap();
    let t = only_transfer(&r);
    let lines = |name: &str| fs::read_to_string(out.join(name)).unwrap().lines().count() - 1;
    assert_eq!(lines("rtt.csv"), t.rtt.count);
    assert_eq!(lines("spacing.csv"), t.spacing.count);
    let series = fs::read_to_string(out.join("series.csv")).unwrap();
    let bytes: u64 = series
        .lines()
        .skip(1)
        .map(|l| l.split(',').nth(2).unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(bytes, t.unique_bytes);
}

/// Rows per transfer number in one table.
fn rows_per_transfer(path: &std::path::Path) -> std::collections::BTreeMap<usize, usize> {
    let mut n = std::collections::BTreeMap::new();
    for l in fs::read_to_string(path).unwrap().lines().skip(1) {
        *n.entry(l.split(',').next().unwrap().parse().unwrap())
            .or_insert(0) += 1;
    }
    n
}

#[test]
fn closed_connections_are_dropped_so_memory_does_not_grow_with_their_number() {
    let dir = folder("sequential");
    let shape = Shape {
        segments: 30,
        ..clean_shape()
    };
    let n = 200;
    // One connection every 3 s, longer than a closed connection lingers.
    let mut segs = Vec::new();
    for i in 0..n {
        segs.extend(closed_transfer(
            &shape,
            30000 + i as u16,
            i as i64 * 3000 * MS,
        ));
    }
    let path = dir.join("seq.pcap");
    write_pcap(
        &path,
        1,
        65535,
        &records(Link::Ethernet, false, &segs),
        false,
    );
    let out = dir.join("tables");
    let r = analyze(&[path], 1.0, Some(&out)).unwrap();
    let c = &r.captures[0];
    assert_eq!(c.connections, n);
    assert_eq!(c.late_segments, 0);
    assert!(c.peak_open_connections <= 2, "{}", c.peak_open_connections);
    assert_eq!(r.transfers.len(), n);
    let rtt = rows_per_transfer(&out.join("rtt.csv"));
    for (i, t) in r.transfers.iter().enumerate() {
        assert_eq!(t.transfer, i);
        assert_eq!(t.sport, 30000 + i as u16);
        assert!(t.fin_seen);
        assert_eq!(t.data_segments, 30);
        assert_eq!(rtt[&i], t.rtt.count);
    }
    // The same connections at once: all of them are held.
    let mut overlapped = Vec::new();
    for i in 0..n {
        overlapped.extend(closed_transfer(&shape, 30000 + i as u16, i as i64 * MS));
    }
    overlapped.sort_by_key(|s| s.0);
    let path = dir.join("overlapped.pcap");
    write_pcap(
        &path,
        1,
        65535,
        &records(Link::Ethernet, false, &overlapped),
        false,
    );
    let r = analyze(&[path], 1.0, None).unwrap();
    assert_eq!(r.captures[0].peak_open_connections, n);
}

#[test]
fn tables_are_numbered_by_connection_whatever_sends_first() {
    let dir = folder("renumber");
    let shape = clean_shape();
    // Connection 0 opens first but sends its data 5 s later; connection 1 sends at once.
    let mut segs: Vec<(i64, Tcp)> = closed_transfer(&shape, 31000, 0)
        .into_iter()
        .enumerate()
        .map(|(i, (t, s))| (if i < 3 { t } else { t + 5000 * MS }, s))
        .collect();
    segs.extend(closed_transfer(&shape, 32000, MS));
    segs.sort_by_key(|s| s.0);
    let path = dir.join("two.pcap");
    write_pcap(
        &path,
        1,
        65535,
        &records(Link::Ethernet, false, &segs),
        false,
    );
    let out = dir.join("tables");
    let r = analyze(&[path], 0.1, Some(&out)).unwrap();
    assert_eq!(r.transfers.len(), 2);
    assert_eq!(
        (r.transfers[0].sport, r.transfers[0].connection),
        (31000, 0)
    );
    assert_eq!(
        (r.transfers[1].sport, r.transfers[1].connection),
        (32000, 1)
    );
    let rtt = rows_per_transfer(&out.join("rtt.csv"));
    let series = fs::read_to_string(out.join("series.csv")).unwrap();
    for t in &r.transfers {
        assert_eq!(rtt[&t.transfer], t.rtt.count);
        // Transfer 0 began 5 s into its connection; its series rows say so.
        let first_bin: f64 = series
            .lines()
            .skip(1)
            .find(|l| l.split(',').next() == Some(&t.transfer.to_string()))
            .map(|l| l.split(',').nth(1).unwrap().parse().unwrap())
            .unwrap();
        let want = if t.transfer == 0 { 5.0 } else { 0.0 };
        assert!((first_bin - want).abs() < 0.2, "{first_bin}");
    }
}
