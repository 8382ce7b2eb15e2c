//! The binary: lines per interval, a clean stop after --duration and on SIGTERM.

use std::process::{Command, Stdio};
use std::thread::sleep;
use std::time::Duration;

use nestbed_cpumon::CSV_HEADER;

const BIN: &str = env!("CARGO_BIN_EXE_nestbed-cpumon");

fn rows(stdout: &[u8]) -> Vec<Vec<String>> {
    let text = String::from_utf8(stdout.to_vec()).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some(CSV_HEADER));
    lines
        .map(|l| l.split(',').map(str::to_owned).collect())
        .collect()
}

#[test]
fn prints_one_row_per_interval_until_the_duration() {
    let out = Command::new(BIN)
        .args(["--interval", "0.2", "--duration", "0.6", "--duty", "0.25"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let rows = rows(&out.stdout);
    assert_eq!(rows.len(), 3, "{rows:?}");
    for r in &rows {
        let available: f64 = r[3].parse().unwrap();
        let looped: f64 = r[6].parse().unwrap();
        assert!((0.0..=1.0).contains(&available), "{r:?}");
        // Exactly a quarter of each 0.2 s interval is looped: the stretch is accounted from
        // the interval's start to the end of the loop, however late its readings came.
        assert!((looped - 0.05).abs() < 1e-5, "{r:?}");
    }
    let last_t: f64 = rows[2][0].parse().unwrap();
    assert!((last_t - 0.6).abs() < 0.1, "{last_t}");
}

#[test]
fn sigterm_stops_it_cleanly_with_the_last_interval_printed() {
    let child = Command::new(BIN)
        .args(["--interval", "10", "--duty", "0.01", "--format", "jsonl"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    sleep(Duration::from_millis(300));
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{:?}", out.status);
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<_> = text.lines().collect();
    assert_eq!(lines.len(), 1, "{text}");
    let v: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    let interval = v["interval_s"].as_f64().unwrap();
    assert!(interval > 0.2 && interval < 2.0, "{v}");
    assert!(v["unix_s"].as_f64().unwrap() > 1.6e9);
}
