//! `send --ring` and `recv --ring` through a veth pair between two network namespaces this
//! test makes (`nbp<pid><tag>a`, `…b`; root only, skipped with a message otherwise). Nothing
//! is created in the caller's namespace; a Drop guard deletes the namespaces (and so the
//! veths) even when a test panics.

use std::io::Read;
use std::process::{Child, Command, Output, Stdio};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_nestbed-probe");
/// A MAC no interface here has: frames to it reach the receiving namespace's interface
/// (a veth passes every frame) and its IP stack drops them.
const ELSEWHERE: &str = "02:00:00:00:00:01";

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// Whether the test can run (root), saying why not.
fn root() -> bool {
    let root = is_root();
    if !root {
        eprintln!("skipped: needs root (network namespaces)");
    }
    root
}

fn must(argv: &[&str]) -> String {
    let out = Command::new(argv[0]).args(&argv[1..]).output().unwrap();
    assert!(
        out.status.success(),
        "{argv:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Two namespaces joined by a veth pair `veth0` (10.77.0.1, in `a`) – `veth0` (10.77.0.2, in
/// `b`), offloads off as on nestbed's shaped links.
struct Pair {
    a: String,
    b: String,
}

impl Pair {
    fn new(tag: &str) -> Pair {
        let prefix = format!("nbp{}{tag}", std::process::id());
        let pair = Pair {
            a: format!("{prefix}a"),
            b: format!("{prefix}b"),
        };
        for ns in [&pair.a, &pair.b] {
            must(&["ip", "netns", "add", ns]);
            must(&["ip", "-n", ns, "link", "set", "lo", "up"]);
        }
        must(&[
            "ip", "-n", &pair.a, "link", "add", "veth0", "type", "veth", "peer", "name", "peer0",
            "netns", &pair.b,
        ]);
        must(&["ip", "-n", &pair.b, "link", "set", "peer0", "name", "veth0"]);
        for (ns, addr) in [(&pair.a, "10.77.0.1/24"), (&pair.b, "10.77.0.2/24")] {
            must(&["ip", "-n", ns, "addr", "add", addr, "dev", "veth0"]);
            must(&["ip", "-n", ns, "link", "set", "veth0", "up"]);
            let _ = Command::new("ip")
                .args([
                    "netns", "exec", ns, "ethtool", "-K", "veth0", "tso", "off", "gso", "off",
                    "gro", "off", "tx", "off", "rx", "off",
                ])
                .output();
        }
        pair
    }

    fn probe(&self, ns: &str, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns, BIN]).args(args);
        c
    }

    /// A file of `b`'s `veth0` in sysfs (as `b` sees it).
    fn of_b(&self, file: &str) -> String {
        let path = format!("/sys/class/net/veth0/{file}");
        must(&["ip", "netns", "exec", &self.b, "cat", &path])
            .trim()
            .to_string()
    }

    fn rx_packets(&self) -> u64 {
        self.of_b("statistics/rx_packets").parse().unwrap()
    }

    fn mac_of_b(&self) -> String {
        self.of_b("address")
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        for ns in [&self.a, &self.b] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

fn start(mut c: Command) -> Child {
    c.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn json_of(out: Output) -> Value {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn u(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("{key} in {v}"))
}

/// Waits until the receiver said it listens (its first line on stderr).
fn listening(child: &mut Child) {
    let mut err = child.stderr.take().unwrap();
    let mut byte = [0u8; 1];
    while err.read(&mut byte).unwrap() == 1 && byte[0] != b'\n' {}
    std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = err.read_to_string(&mut rest);
    });
}

/// Sends 5 000 datagrams of `size` from a ring in `a` to `dst_mac`, with a ring receiver and
/// a UDP socket receiver in `b`; returns (ring receiver, socket receiver, sender, frames
/// the interface took).
fn flow(pair: &Pair, dst_mac: &str, size: &str) -> (Value, Value, Value, u64) {
    let mut ring = start(pair.probe(
        &pair.b,
        &[
            "recv",
            "--bind",
            "10.77.0.2:5001",
            "--ring",
            "veth0",
            "--idle",
            "1",
        ],
    ));
    let mut socket = start(pair.probe(
        &pair.b,
        &["recv", "--bind", "10.77.0.2:5001", "--idle", "1.5"],
    ));
    listening(&mut ring);
    listening(&mut socket);
    let before = pair.rx_packets();
    let sent = json_of(
        pair.probe(
            &pair.a,
            &[
                "send",
                "--to",
                "10.77.0.2:5001",
                "--size",
                size,
                "--pps",
                "20000",
                "--count",
                "5000",
                "--ring",
                "veth0",
                "--dst-mac",
                dst_mac,
            ],
        )
        .output()
        .unwrap(),
    );
    let got = json_of(ring.wait_with_output().unwrap());
    let stack = json_of(socket.wait_with_output().unwrap());
    (got, stack, sent, pair.rx_packets() - before)
}

#[test]
fn ring_frames_are_counted_by_the_ring_receiver_and_dropped_early_by_another_macs_stack() {
    if !root() {
        return;
    }
    let pair = Pair::new("x");
    let (got, stack, sent, took) = flow(&pair, ELSEWHERE, "18");
    assert_eq!(u(&sent, "packets_sent"), 5000, "{sent}");
    assert_eq!(sent["ring_interface"], "veth0");
    // Every frame crossed the veth, and the ring receiver counted each once, in order.
    assert!(took >= 5000, "the interface took {took}");
    assert_eq!(
        (u(&got, "unique"), u(&got, "lost"), u(&got, "reordered")),
        (5000, 0, 0),
        "{got}"
    );
    assert_eq!(got["ring_interface"], "veth0");
    assert_eq!(u(&got, "kernel_drops"), 0);
    // 64-byte frames counted as the socket path counts them: 84 bytes on the wire each.
    let rate = &got["rate"];
    let per_frame = rate["wire_bps"].as_f64().unwrap() / rate["pps"].as_f64().unwrap() / 8.0;
    assert!((per_frame - 84.0).abs() < 1e-6, "{per_frame}");
    // Frames to another MAC never reach a UDP socket: the stack drops them on arrival.
    assert_eq!(u(&stack, "packets"), 0, "{stack}");
}

#[test]
fn ring_frames_to_the_receivers_mac_are_valid_udp_datagrams() {
    if !root() {
        return;
    }
    let pair = Pair::new("y");
    let mac = pair.mac_of_b();
    // Full-size frames: checksum and lengths right, or the stack would drop them.
    let (got, stack, _, _) = flow(&pair, &mac, "1472");
    assert_eq!(u(&got, "unique"), 5000, "{got}");
    assert_eq!(
        (u(&stack, "unique"), u(&stack, "bytes")),
        (5000, 5000 * 1472),
        "{stack}"
    );
    let per_frame =
        got["rate"]["wire_bps"].as_f64().unwrap() / got["rate"]["pps"].as_f64().unwrap() / 8.0;
    assert!((per_frame - 1538.0).abs() < 1e-6, "{per_frame}");
}
