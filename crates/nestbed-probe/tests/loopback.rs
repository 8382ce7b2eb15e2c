//! End-to-end tests of the `nestbed-probe` binary over loopback (127.0.0.1, ephemeral ports
//! only): a receiver process and a sender process, their JSON summaries and CSV logs, echoes,
//! bursts, and the exit code of usage errors.

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_nestbed-probe");

/// A receiver process and the port it reported on stderr.
struct Recv {
    child: Child,
    port: u16,
}

fn start_recv(args: &[&str]) -> Recv {
    let mut child = Command::new(BIN)
        .args(["recv", "--bind", "127.0.0.1:0"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start receiver");
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    let port = line
        .trim()
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in receiver's first line {line:?}"));
    // Keep draining stderr so the receiver never blocks on a full pipe.
    std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = stderr.read_to_string(&mut rest);
    });
    Recv { child, port }
}

fn finish(child: Child) -> Value {
    let out = child.wait_with_output().unwrap();
    json_of(&out)
}

fn json_of(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout.clone()).unwrap();
    assert_eq!(
        stdout.lines().count(),
        1,
        "stdout must be one JSON object: {stdout}"
    );
    serde_json::from_str(&stdout).unwrap()
}

fn send(port: u16, args: &[&str]) -> Value {
    let to = format!("127.0.0.1:{port}");
    let out = Command::new(BIN)
        .args(["send", "--to", &to, "--bind", "127.0.0.1"])
        .args(args)
        .output()
        .unwrap();
    json_of(&out)
}

fn u(v: &Value, path: &str) -> u64 {
    path.split('.')
        .fold(v, |v, key| &v[key])
        .as_u64()
        .unwrap_or_else(|| panic!("{path} is not a number in {v}"))
}

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("nestbed-probe-{}-{name}", std::process::id()))
}

/// Delays on one host must be small and positive; a "negative" delay wraps to ~2^48 ns.
fn assert_sane_delay(dist: &Value) {
    let (min, max) = (u(dist, "min_ns"), u(dist, "max_ns"));
    assert!(min > 0 && max < 2_000_000_000, "delay min {min} max {max}");
}

#[test]
fn two_thousand_packets_arrive_in_order_with_positive_delays() {
    let rlog = tmp("recv.csv");
    let slog = tmp("send.csv");
    let r = start_recv(&[
        "--count",
        "2000",
        "--idle",
        "5",
        "--expect",
        "2000",
        "--log",
        rlog.to_str().unwrap(),
    ]);
    let s = send(
        r.port,
        &[
            "--size",
            "100",
            "--pps",
            "20000",
            "--count",
            "2000",
            "--log",
            slog.to_str().unwrap(),
        ],
    );
    let rv = finish(r.child);

    assert_eq!(u(&s, "packets_attempted"), 2000);
    assert_eq!(u(&s, "packets_sent"), 2000);
    assert_eq!(u(&s, "send_errors"), 0);
    assert_eq!(u(&s, "wire_bytes"), 166);
    assert_eq!(u(&s, "lateness.count"), 2000);

    assert_eq!(rv["stopped_by"], "count");
    assert_eq!(u(&rv, "packets"), 2000);
    assert_eq!(u(&rv, "unique"), 2000);
    assert_eq!(u(&rv, "bytes"), 200_000);
    assert_eq!(u(&rv, "lost"), 0);
    assert_eq!(u(&rv, "duplicates"), 0);
    assert_eq!(u(&rv, "reordered"), 0, "loopback does not reorder");
    assert_eq!(u(&rv, "highest_seq"), 1999);
    assert_eq!(u(&rv, "delay.count"), 2000);
    assert_sane_delay(&rv["delay"]);
    assert!(u(&rv, "last_recv_ns") > u(&rv, "first_recv_ns"));
    assert!(u(&rv, "rcvbuf_granted") > 0);

    let recv_csv = std::fs::read_to_string(&rlog).unwrap();
    let mut lines = recv_csv.lines();
    assert_eq!(
        lines.next(),
        Some("seq,burst,send_ns,recv_ns,size,delay_ns")
    );
    let rows: Vec<Vec<u64>> = lines
        .map(|l| l.split(',').map(|f| f.parse().unwrap()).collect())
        .collect();
    assert_eq!(rows.len(), 2000);
    assert_eq!(rows[0][0], 0);
    assert_eq!(rows[1999][0], 1999);
    assert!(rows.iter().all(|r| r[4] == 100 && r[5] < 2_000_000_000));

    let send_csv = std::fs::read_to_string(&slog).unwrap();
    assert_eq!(send_csv.lines().count(), 2001);
    // The sender's send_ns is the timestamp the receiver read from the header.
    let second: Vec<&str> = send_csv.lines().nth(1).unwrap().split(',').collect();
    assert_eq!(second[3].parse::<u64>().unwrap(), rows[0][2]);

    let _ = std::fs::remove_file(rlog);
    let _ = std::fs::remove_file(slog);
}

#[test]
fn echoes_give_round_trip_times() {
    let r = start_recv(&["--echo", "--count", "500", "--idle", "5"]);
    let s = send(
        r.port,
        &[
            "--size",
            "64",
            "--pps",
            "10000",
            "--count",
            "500",
            "--echo-wait",
            "1",
        ],
    );
    let rv = finish(r.child);
    assert_eq!(u(&rv, "echoed"), 500);
    assert_eq!(u(&s, "echo.received"), 500);
    assert_eq!(u(&s, "echo.lost"), 0);
    assert_sane_delay(&s["echo"]["rtt"]);
}

#[test]
fn bursts_carry_their_ids() {
    let r = start_recv(&["--count", "300", "--idle", "5"]);
    let s = send(
        r.port,
        &[
            "--size", "12", "--burst", "100", "--gap", "0.01", "--count", "300",
        ],
    );
    let rv = finish(r.child);
    assert_eq!(u(&s, "planned.burst_packets"), 100);
    assert_eq!(u(&s, "planned.burst_gap_ns"), 10_000_000);
    assert_eq!(u(&s, "wire_bytes"), 84);
    assert_eq!(u(&rv, "packets"), 300);
    assert_eq!(u(&rv, "bursts"), 3);
    assert_eq!(u(&rv, "lost"), 0);
}

#[test]
fn idle_receiver_stops_and_reports_nothing_received() {
    let r = start_recv(&["--idle", "0.2"]);
    let rv = finish(r.child);
    assert_eq!(rv["stopped_by"], "idle");
    assert_eq!(u(&rv, "packets"), 0);
    assert!(rv["delay"]["min_ns"].is_null());
}

fn usage_error(args: &[&str]) -> String {
    let out = Command::new(BIN).args(args).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "args {args:?}");
    assert!(out.stdout.is_empty());
    String::from_utf8(out.stderr).unwrap()
}

#[test]
fn user_errors_exit_2_with_one_sentence() {
    let base = ["send", "--to", "127.0.0.1:9", "--count", "1"];
    let err = usage_error(&[&base[..], &["--size", "11", "--pps", "10"]].concat());
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("--size 11 is below the 12-byte probe header"),
        "{err}"
    );

    let err = usage_error(&[&base[..], &["--size", "100", "--rate", "0"]].concat());
    assert!(err.contains("--rate 0 must be a positive"), "{err}");

    let err = usage_error(&[&base[..], &["--size", "100"]].concat());
    assert!(
        err.contains("give one of --rate, --pps or --interval"),
        "{err}"
    );

    let err = usage_error(&[
        "send", "--to", "nowhere", "--size", "100", "--pps", "1", "--count", "1",
    ]);
    assert!(err.contains("--to"), "{err}");

    let err = usage_error(&[
        "recv",
        "--bind",
        "127.0.0.1:0",
        "--group",
        "127.0.0.1",
        "--idle",
        "1",
    ]);
    assert!(err.contains("not a multicast address"), "{err}");

    // The packet rings: what they cannot do, and an interface that is not there.
    let ring = [
        "--size",
        "18",
        "--pps",
        "10",
        "--ring",
        "lo",
        "--dst-mac",
        "02:00:00:00:00:01",
    ];
    let err = usage_error(&[&base[..], &ring[..], &["--echo-wait", "1"]].concat());
    assert!(err.contains("--echo-wait needs the UDP socket"), "{err}");
    let err = usage_error(&[&base[..], &["--size", "18", "--pps", "10", "--ring", "lo"]].concat());
    assert!(err.contains("--dst-mac"), "{err}");
    let err = usage_error(
        &[
            &base[..],
            &[
                "--size",
                "18",
                "--pps",
                "10",
                "--ring",
                "nosuch0",
                "--dst-mac",
                "02:00:00:00:00:01",
            ],
        ]
        .concat(),
    );
    // After the plan's line, one sentence.
    let last = err.lines().last().unwrap_or_default();
    assert!(last.contains("nosuch0: no such interface"), "{err}");
    let err = usage_error(&["recv", "--bind", "127.0.0.1:5001", "--ring", "lo", "--echo"]);
    assert!(err.contains("--echo needs the UDP socket"), "{err}");
    let err = usage_error(&[
        "recv",
        "--bind",
        "127.0.0.1:5001",
        "--ring",
        "nosuch0",
        "--idle",
        "1",
    ]);
    assert!(err.contains("nosuch0: no such interface"), "{err}");
}

#[test]
fn echo_log_has_one_round_trip_per_packet_and_bursts_start_where_asked() {
    let rlog = tmp("burst-recv.csv");
    let elog = tmp("burst-echo.csv");
    let r = start_recv(&[
        "--echo",
        "--count",
        "200",
        "--idle",
        "5",
        "--rcvbuf",
        "0",
        "--log",
        rlog.to_str().unwrap(),
    ]);
    let s = send(
        r.port,
        &[
            "--size",
            "50",
            "--burst",
            "100",
            "--gap",
            "0.01",
            "--count",
            "200",
            "--first-burst",
            "7",
            "--echo-wait",
            "1",
            "--echo-log",
            elog.to_str().unwrap(),
        ],
    );
    let rv = finish(r.child);
    assert_eq!(u(&rv, "rcvbuf_requested"), 0);
    assert!(u(&rv, "rcvbuf_granted") > 0, "the kernel's default buffer");
    assert_eq!(u(&s, "echo.received"), 200);

    let recv_csv = std::fs::read_to_string(&rlog).unwrap();
    let bursts: Vec<u64> = recv_csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').nth(1).unwrap().parse().unwrap())
        .collect();
    assert_eq!(bursts.iter().filter(|&&b| b == 7).count(), 100);
    assert_eq!(bursts.iter().filter(|&&b| b == 8).count(), 100);

    let echo_csv = std::fs::read_to_string(&elog).unwrap();
    let mut lines = echo_csv.lines();
    assert_eq!(lines.next(), Some("seq,burst,send_ns,echo_ns,rtt_ns,from"));
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 200);
    let from = format!("127.0.0.1:{}", r.port);
    for row in &rows {
        let (send_ns, echo_ns, rtt): (u64, u64, u64) = (
            row[2].parse().unwrap(),
            row[3].parse().unwrap(),
            row[4].parse().unwrap(),
        );
        assert_eq!(rtt, echo_ns.wrapping_sub(send_ns) & ((1 << 48) - 1));
        assert!(rtt > 0 && rtt < 2_000_000_000, "rtt {rtt}");
        assert_eq!(row[5], from, "the echoing receiver");
    }
    let _ = std::fs::remove_file(rlog);
    let _ = std::fs::remove_file(elog);
}

#[test]
fn echo_log_without_echo_wait_is_a_usage_error() {
    let err = usage_error(&[
        "send",
        "--to",
        "127.0.0.1:9",
        "--count",
        "1",
        "--size",
        "20",
        "--pps",
        "1",
        "--echo-log",
        "/tmp/nowhere.csv",
    ]);
    assert!(err.contains("--echo-log needs --echo-wait"), "{err}");
}

/// Sends 20 datagrams to a receiver held stopped (SIGSTOP) for 300 ms after they were sent,
/// and returns its summary.
fn delays_of_a_receiver_held_while_they_arrive(args: &[&str]) -> Value {
    let r = start_recv(&[&["--count", "20", "--idle", "10"], args].concat());
    // The kernel turns arrival stamps on a moment after a socket asks for them (deferred
    // work); the receiver has asked by the time it says its port.
    std::thread::sleep(std::time::Duration::from_millis(100));
    let pid = r.child.id().to_string();
    let signal = |sig: &str| {
        let status = Command::new("kill").args([sig, &pid]).status().unwrap();
        assert!(status.success(), "kill {sig} {pid}");
    };
    signal("-STOP");
    send(r.port, &["--size", "100", "--count", "20", "--pps", "1000"]);
    std::thread::sleep(std::time::Duration::from_millis(300));
    signal("-CONT");
    finish(r.child)
}

#[test]
fn kernel_times_leave_out_the_wait_for_the_receiver_and_read_times_count_it() {
    // Read times (the default): application to application, so the datagrams waited in the
    // socket for the stopped receiver, every one for at least the 300 ms it was held.
    let read = delays_of_a_receiver_held_while_they_arrive(&[]);
    assert_eq!(read["kernel_receive_times"], false);
    assert!(u(&read, "delay.min_ns") >= 300_000_000, "{read}");
    // Kernel times: when the datagrams reached the host, before the hold ended.
    let kernel = delays_of_a_receiver_held_while_they_arrive(&["--kernel-times"]);
    assert_eq!(kernel["kernel_receive_times"], true);
    assert_eq!(u(&kernel, "packets"), 20, "{kernel}");
    assert_sane_delay(&kernel["delay"]);
    assert!(u(&kernel, "delay.max_ns") < 300_000_000, "{kernel}");
}
