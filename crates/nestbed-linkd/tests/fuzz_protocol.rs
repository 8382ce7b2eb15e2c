//! Fuzz-style test of the control protocol: a seeded random mutator over
//! valid requests (byte flips, insertions, deletions, truncation, splicing,
//! and structural JSON mutations of values) feeds `parse_request` and the
//! registry's `plan`/`commit`; neither may panic, and every error must be a
//! one-line sentence. Deterministic: the same seed gives the same cases.

use nestbed_linkd::dispatch::Registry;
use nestbed_linkd::protocol::{error_reply, parse_request};
use serde_json::{json, Value};

/// xorshift64*: small, seeded, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn corpus() -> Vec<String> {
    [
        r#"{"op":"add_link","link":"link0","lan":false,"seed":42,"ports":[{"port":"a","ifname":"nbx0a","egress":{"loss":{"model":"bernoulli","p":0.01},"drop_ordinals":[3],"queue":{"limit":{"packets":100}},"bandwidth":{"rate_bps":10000000},"delay":{"delay_ns":20000000,"jitter_ns":1000,"distribution":"normal"}}},{"port":"b","ifname":"nbx0b","ingress":{"loss":{"model":"gilbert_burst","loss_rate":0.02,"mean_burst_len":3.0}}}]}"#,
        r#"{"op":"add_link","link":"lan0","lan":true,"ports":[{"port":"a","ifname":"x1"},{"port":"b","ifname":"x2"},{"port":"c","ifname":"x3"}]}"#,
        r#"{"op":"remove_link","link":"link0"}"#,
        r#"{"op":"set","link":"link0","port":"a","direction":"egress","params":{"loss":{"model":"gilbert_elliott","p":0.01,"r":0.3,"loss_in_bad":1.0,"loss_in_good":0.0},"queue":{"red":{"thresh":5,"maxthresh":15,"q_weight":0.002,"linterm":10}}}}"#,
        r#"{"op":"set","link":"link0","port":"b","direction":"ingress","params":{}}"#,
        r#"{"op":"up","link":"link0"}"#,
        r#"{"op":"down","link":"link0","mode":"admin"}"#,
        r#"{"op":"down","link":"link0","mode":"blackhole"}"#,
        r#"{"op":"counters"}"#,
        r#"{"op":"counters","link":"link0"}"#,
        r#"{"op":"trace_start","link":"link0","path":"/tmp/x.tr"}"#,
        r#"{"op":"trace_stop","link":"link0"}"#,
        r#"{"op":"status"}"#,
        r#"{"op":"shutdown"}"#,
        r#"{"op":"at","at_ns":5,"requests":[{"op":"set","link":"link0","port":"a","direction":"egress","params":{"delay":{"delay_ns":1000}}},{"op":"down","link":"link0","mode":"blackhole"},{"op":"up","link":"link0"}]}"#,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

const INTERESTING: &[&str] = &[
    "-1",
    "1e308",
    "-0",
    "null",
    "true",
    "\"\"",
    "[]",
    "{}",
    "1.5",
    "18446744073709551616",
    "NaN",
    "\"\\u0000\"",
    "\"egress\"",
    "\"ingress\"",
    "0",
    "\"aaaaaaaaaaaaaaaaaaaa\"",
];

fn mutate_value(v: &mut Value, rng: &mut Rng) {
    match v {
        Value::Object(m) if !m.is_empty() && rng.below(3) > 0 => {
            let keys: Vec<String> = m.keys().cloned().collect();
            let k = &keys[rng.below(keys.len())];
            match rng.below(4) {
                0 => {
                    m.remove(k);
                }
                1 => {
                    m.insert(format!("{k}x"), json!(1));
                }
                _ => mutate_value(m.get_mut(k).unwrap(), rng),
            }
        }
        Value::Array(a) if !a.is_empty() && rng.below(3) > 0 => match rng.below(3) {
            0 => {
                let i = rng.below(a.len());
                a.remove(i);
            }
            1 => {
                let i = rng.below(a.len());
                let c = a[i].clone();
                a.push(c);
            }
            _ => {
                let i = rng.below(a.len());
                mutate_value(&mut a[i], rng);
            }
        },
        _ => {
            let s = INTERESTING[rng.below(INTERESTING.len())];
            *v = serde_json::from_str(s).unwrap_or(Value::Null);
        }
    }
}

fn mutate_text(s: &str, rng: &mut Rng, corpus: &[String]) -> Vec<u8> {
    let mut b = s.as_bytes().to_vec();
    for _ in 0..1 + rng.below(4) {
        let len = b.len().max(1);
        match rng.below(6) {
            0 => {
                let i = rng.below(len).min(b.len().saturating_sub(1));
                if !b.is_empty() {
                    b[i] ^= 1 << rng.below(8);
                }
            }
            1 => {
                let i = rng.below(len + 1).min(b.len());
                let ins = INTERESTING[rng.below(INTERESTING.len())];
                b.splice(i..i, ins.bytes());
            }
            2 => {
                if !b.is_empty() {
                    let i = rng.below(b.len());
                    let j = (i + rng.below(8)).min(b.len());
                    b.drain(i..j);
                }
            }
            3 => b.truncate(rng.below(len)),
            4 => {
                let other = corpus[rng.below(corpus.len())].as_bytes();
                let cut = rng.below(other.len());
                let at = rng.below(len).min(b.len());
                b.truncate(at);
                b.extend_from_slice(&other[cut..]);
            }
            _ => {
                let i = rng.below(len).min(b.len());
                const PUNCT: &[u8] = b"{}[]\",:\\\n\x00\xff";
                b.insert(i, PUNCT[rng.below(PUNCT.len())]);
            }
        }
    }
    b
}

#[test]
fn parser_and_dispatch_never_panic() {
    let corpus = corpus();
    let mut rng = Rng(0x05EE_D0F1_1A4D);
    let mut registry = Registry::new(2);
    let (mut ok, mut rejected) = (0u32, 0u32);
    const CASES: u32 = 20_000;
    for case in 0..CASES {
        let base = &corpus[rng.below(corpus.len())];
        let line: Vec<u8> = if rng.below(5) == 0 {
            // Unmutated, so the registry fills up and later mutants meet
            // existing links, ports and traces.
            base.clone().into_bytes()
        } else if rng.below(2) == 0 {
            let mut v: Value = serde_json::from_str(base).unwrap();
            for _ in 0..1 + rng.below(3) {
                mutate_value(&mut v, &mut rng);
            }
            v.to_string().into_bytes()
        } else {
            mutate_text(base, &mut rng, &corpus)
        };
        let text = String::from_utf8_lossy(&line);
        match parse_request(&text).and_then(|r| registry.plan(r)) {
            Ok(action) => {
                ok += 1;
                // Keep the registry small but exercised.
                if case % 7 != 0 {
                    registry.commit(&action, u64::from(case));
                    registry.commit_applied(&action, u64::from(case));
                }
            }
            Err(e) => {
                rejected += 1;
                assert!(!e.is_empty(), "empty error for {text:?}");
                let reply = error_reply(&e);
                assert!(!reply.contains('\n'), "multi-line reply {reply:?}");
            }
        }
        let _ = registry.status();
    }
    eprintln!("{CASES} cases: {ok} accepted, {rejected} rejected");
    assert!(
        ok > 1000 && rejected > 1000,
        "mutator too weak: {ok} ok, {rejected} rejected"
    );
}
