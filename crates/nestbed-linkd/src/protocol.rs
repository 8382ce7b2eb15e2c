//! The control protocol: JSON lines, one request object per line, one
//! reply per line. This module turns a line into a typed [`Request`] (or an
//! error sentence naming the field) and formats replies; it does no I/O.
//!
//! Every request is an object with an `"op"` and that op's fields; unknown
//! fields are rejected everywhere, including inside pipe parameters
//! (`nestbed_pipe::PipeParams`'s serde form). Replies are
//! `{"ok": true, ...}` or `{"ok": false, "error": "..."}`.
//!
//! `at` carries a due time (`at_ns`, CLOCK_MONOTONIC) and a list of `set`,
//! `up` and `down` requests on one link, which the link's worker applies
//! in order at that time; its reply comes then, saying when it was handed to
//! the worker (`handed_ns`: after `at_ns`, it came late) and applied
//! (`applied_ns`).

use nestbed_pipe::PipeParams;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::seed::Direction;

/// Longest request line accepted, in bytes.
pub const MAX_LINE: usize = 1 << 20;

/// One member port of a link in `add_link`.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PortSpec {
    /// The port's name within the link (used in counters and traces).
    pub port: String,
    /// The host-side interface in linkd's namespace (at most 15 bytes).
    pub ifname: String,
    /// Frames from this member into the link; omitted: unshaped.
    #[serde(default)]
    pub egress: PipeParams,
    /// Frames from the link to this member; omitted: unshaped.
    #[serde(default)]
    pub ingress: PipeParams,
}

impl PortSpec {
    /// The parameters of one direction.
    pub fn params(&self, d: Direction) -> &PipeParams {
        match d {
            Direction::Egress => &self.egress,
            Direction::Ingress => &self.ingress,
        }
    }
}

/// The `add_link` request.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AddLink {
    /// Link name, unique in the daemon.
    pub link: String,
    /// Make it a learning switch even with 2 ports (3 or more always are).
    #[serde(default)]
    pub lan: bool,
    /// The link's seed; every pipe's seed is derived from it (default 0).
    #[serde(default)]
    pub seed: u64,
    /// The member ports, at least 2.
    pub ports: Vec<PortSpec>,
    /// Answer once the link carries frames (the default); `false`: once it
    /// is registered (its state, pipes and trace can be changed at once),
    /// its ports starting in the background (`ready` waits for them).
    #[serde(default = "yes")]
    pub wait: bool,
}

fn yes() -> bool {
    true
}

impl AddLink {
    /// Whether the link is a learning switch.
    pub fn is_lan(&self) -> bool {
        self.lan || self.ports.len() >= 3
    }
}

/// How a link goes down.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DownMode {
    /// The host-side interfaces go down; the nodes' interfaces lose carrier.
    Admin,
    /// Frames are silently dropped (and counted).
    Blackhole,
}

/// A parsed request.
#[derive(Clone, Debug, PartialEq)]
pub enum Request {
    /// Create a link.
    AddLink(AddLink),
    /// Remove a link (its interfaces are set up again if admin-down).
    RemoveLink {
        /// Link name.
        link: String,
    },
    /// Change one pipe's parameters, keeping its queue and counters.
    Set {
        /// Link name.
        link: String,
        /// Port name.
        port: String,
        /// Which pipe of the port.
        direction: Direction,
        /// The new parameters (all of them; omitted fields take defaults).
        params: PipeParams,
    },
    /// Bring a link up.
    Up {
        /// Link name.
        link: String,
    },
    /// Take a link down.
    Down {
        /// Link name.
        link: String,
        /// How.
        mode: DownMode,
    },
    /// Read counters of one link or all.
    Counters {
        /// Link name; omitted: all links.
        link: Option<String>,
    },
    /// Start the packet event log of a link into a file.
    TraceStart {
        /// Link name.
        link: String,
        /// File to write (created or truncated).
        path: String,
    },
    /// Stop the packet event log of a link.
    TraceStop {
        /// Link name.
        link: String,
    },
    /// Links, ports, parameters in force, seeds, version.
    Status,
    /// Wait until every link added with `"wait": false` carries frames.
    Ready,
    /// Restore interfaces, stop every link and exit.
    Shutdown,
    /// Apply these requests (`set`, `up`, `down`) in order at a time.
    At {
        /// When, on CLOCK_MONOTONIC (at once if it has passed).
        at_ns: u64,
        /// The requests, in the order they are applied.
        requests: Vec<Request>,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LinkOnly {
    link: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SetFields {
    link: String,
    port: String,
    direction: Direction,
    params: PipeParams,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DownFields {
    link: String,
    mode: DownMode,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CountersFields {
    #[serde(default)]
    link: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TraceStartFields {
    link: String,
    path: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NoFields {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AtFields {
    at_ns: u64,
    requests: Vec<Value>,
}

/// The ops an `at` request may carry: the ones that change a link's pipes
/// or state, which its worker applies by itself.
pub const TIMED_OPS: [&str; 3] = ["set", "up", "down"];

/// The ops, in the order they are documented.
pub const OPS: [&str; 12] = [
    "add_link",
    "remove_link",
    "set",
    "up",
    "down",
    "counters",
    "trace_start",
    "trace_stop",
    "status",
    "ready",
    "shutdown",
    "at",
];

fn fields<T: DeserializeOwned>(op: &str, rest: Map<String, Value>) -> Result<T, String> {
    serde_path_to_error::deserialize(Value::Object(rest)).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." {
            format!("{op}: {inner}")
        } else {
            format!("{op}: field `{path}`: {inner}")
        }
    })
}

/// Parses one request line. The error is one sentence naming the field
/// and the problem. Never panics, whatever the input.
pub fn parse_request(line: &str) -> Result<Request, String> {
    if line.len() > MAX_LINE {
        return Err(format!("request: line longer than {MAX_LINE} bytes"));
    }
    let value: Value =
        serde_json::from_str(line).map_err(|e| format!("request: malformed JSON: {e}"))?;
    let Value::Object(map) = value else {
        return Err("request: must be a JSON object with an \"op\" field".into());
    };
    parse_object(map)
}

fn op_of(map: &mut Map<String, Value>) -> Result<String, String> {
    match map.remove("op") {
        Some(Value::String(op)) => Ok(op),
        Some(_) => Err("field `op`: must be a string".into()),
        None => Err(format!("field `op`: missing (one of {})", OPS.join(", "))),
    }
}

/// The requests of an `at`: each one of [`TIMED_OPS`]; the error names the
/// request by its index.
fn timed_requests(requests: Vec<Value>) -> Result<Vec<Request>, String> {
    requests
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            let Value::Object(mut map) = v else {
                return Err(format!("at: field `requests[{i}]`: must be a JSON object"));
            };
            let op = op_of(&mut map).map_err(|e| format!("at: requests[{i}]: {e}"))?;
            if !TIMED_OPS.contains(&op.as_str()) {
                return Err(format!(
                    "at: field `requests[{i}].op`: {op:?} cannot be timed (only {})",
                    TIMED_OPS.join(", ")
                ));
            }
            map.insert("op".into(), op.into());
            parse_object(map).map_err(|e| format!("at: requests[{i}]: {e}"))
        })
        .collect()
}

fn parse_object(mut map: Map<String, Value>) -> Result<Request, String> {
    let op = op_of(&mut map)?;
    let op = op.as_str();
    Ok(match op {
        "add_link" => Request::AddLink(fields(op, map)?),
        "remove_link" => Request::RemoveLink {
            link: fields::<LinkOnly>(op, map)?.link,
        },
        "set" => {
            let f: SetFields = fields(op, map)?;
            Request::Set {
                link: f.link,
                port: f.port,
                direction: f.direction,
                params: f.params,
            }
        }
        "up" => Request::Up {
            link: fields::<LinkOnly>(op, map)?.link,
        },
        "down" => {
            let f: DownFields = fields(op, map)?;
            Request::Down {
                link: f.link,
                mode: f.mode,
            }
        }
        "counters" => Request::Counters {
            link: fields::<CountersFields>(op, map)?.link,
        },
        "trace_start" => {
            let f: TraceStartFields = fields(op, map)?;
            Request::TraceStart {
                link: f.link,
                path: f.path,
            }
        }
        "trace_stop" => Request::TraceStop {
            link: fields::<LinkOnly>(op, map)?.link,
        },
        "status" => {
            fields::<NoFields>(op, map)?;
            Request::Status
        }
        "ready" => {
            fields::<NoFields>(op, map)?;
            Request::Ready
        }
        "shutdown" => {
            fields::<NoFields>(op, map)?;
            Request::Shutdown
        }
        "at" => {
            let f: AtFields = fields(op, map)?;
            Request::At {
                at_ns: f.at_ns,
                requests: timed_requests(f.requests)?,
            }
        }
        other => {
            return Err(format!(
                "field `op`: unknown op {other:?} (one of {})",
                OPS.join(", ")
            ))
        }
    })
}

/// `{"ok": true, ...fields}` as one line (no newline).
pub fn ok_reply(fields: Map<String, Value>) -> String {
    let mut m = Map::new();
    m.insert("ok".into(), Value::Bool(true));
    m.extend(fields);
    Value::Object(m).to_string()
}

/// `{"ok": false, "error": message}` as one line (no newline).
pub fn error_reply(message: &str) -> String {
    serde_json::json!({"ok": false, "error": message}).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_op() {
        let add = r#"{"op":"add_link","link":"link0","seed":42,"ports":[
            {"port":"a","ifname":"nbx0a","egress":{"delay":{"delay_ns":20000000}}},
            {"port":"b","ifname":"nbx0b"}]}"#;
        let Request::AddLink(a) = parse_request(&add.replace('\n', "")).unwrap() else {
            panic!()
        };
        assert_eq!(a.seed, 42);
        assert!(!a.is_lan());
        assert_eq!(a.ports[0].egress.delay.delay_ns, 20_000_000);
        assert_eq!(a.ports[1].ingress, PipeParams::default());
        assert!(
            a.wait,
            "add_link answers once the link carries frames unless told"
        );
        let later = add
            .replace('\n', "")
            .replace(r#""seed":42,"#, r#""seed":42,"wait":false,"#);
        let Request::AddLink(a) = parse_request(&later).unwrap() else {
            panic!()
        };
        assert!(!a.wait);
        assert_eq!(
            parse_request(r#"{"op":"remove_link","link":"x"}"#).unwrap(),
            Request::RemoveLink { link: "x".into() }
        );
        assert!(matches!(
            parse_request(r#"{"op":"set","link":"x","port":"a","direction":"ingress","params":{"loss":{"model":"bernoulli","p":1.0}}}"#).unwrap(),
            Request::Set { direction: Direction::Ingress, .. }
        ));
        assert_eq!(
            parse_request(r#"{"op":"down","link":"x","mode":"blackhole"}"#).unwrap(),
            Request::Down {
                link: "x".into(),
                mode: DownMode::Blackhole
            }
        );
        assert_eq!(
            parse_request(r#"{"op":"up","link":"x"}"#).unwrap(),
            Request::Up { link: "x".into() }
        );
        assert_eq!(
            parse_request(r#"{"op":"counters"}"#).unwrap(),
            Request::Counters { link: None }
        );
        assert_eq!(
            parse_request(r#"{"op":"trace_start","link":"x","path":"/tmp/t"}"#).unwrap(),
            Request::TraceStart {
                link: "x".into(),
                path: "/tmp/t".into()
            }
        );
        assert_eq!(
            parse_request(r#"{"op":"trace_stop","link":"x"}"#).unwrap(),
            Request::TraceStop { link: "x".into() }
        );
        assert_eq!(
            parse_request(r#"{"op":"status"}"#).unwrap(),
            Request::Status
        );
        assert_eq!(parse_request(r#"{"op":"ready"}"#).unwrap(), Request::Ready);
        assert_eq!(
            parse_request(r#"{"op":"shutdown"}"#).unwrap(),
            Request::Shutdown
        );
    }

    fn err(line: &str) -> String {
        parse_request(line).unwrap_err()
    }

    #[test]
    fn parses_a_timed_batch_and_refuses_what_cannot_be_timed() {
        let at = r#"{"op":"at","at_ns":5,"requests":[{"op":"set","link":"x","port":"a","direction":"egress","params":{}},{"op":"down","link":"x","mode":"blackhole"},{"op":"up","link":"x"}]}"#;
        let Request::At { at_ns, requests } = parse_request(at).unwrap() else {
            panic!()
        };
        assert_eq!(at_ns, 5);
        assert!(matches!(requests[0], Request::Set { .. }));
        assert_eq!(
            requests[1..],
            [
                Request::Down {
                    link: "x".into(),
                    mode: DownMode::Blackhole
                },
                Request::Up { link: "x".into() }
            ]
        );
        let e =
            err(r#"{"op":"at","at_ns":5,"requests":[{"op":"up","link":"x"},{"op":"counters"}]}"#);
        assert!(
            e.contains("requests[1].op") && e.contains("counters"),
            "{e}"
        );
        let e = err(r#"{"op":"at","at_ns":5,"requests":[{"op":"at","at_ns":1,"requests":[]}]}"#);
        assert!(e.contains("requests[0].op"), "{e}");
        let e = err(r#"{"op":"at","at_ns":5,"requests":[{"op":"up","link":"x","mode":"admin"}]}"#);
        assert!(e.contains("requests[0]") && e.contains("mode"), "{e}");
        let e = err(r#"{"op":"at","at_ns":-1,"requests":[]}"#);
        assert!(e.contains("at_ns"), "{e}");
        let e = err(r#"{"op":"at","at_ns":1,"requests":[7]}"#);
        assert!(e.contains("requests[0]"), "{e}");
        let e = err(r#"{"op":"at","requests":[]}"#);
        assert!(e.contains("at_ns"), "{e}");
    }

    #[test]
    fn errors_name_the_field() {
        let e = err(
            r#"{"op":"set","link":"x","port":"a","direction":"egress","params":{"delay":{"delay_ns":-5}}}"#,
        );
        assert!(e.contains("params.delay.delay_ns"), "{e}");
        let e = err(r#"{"op":"set","link":"x","port":"a","direction":"up","params":{}}"#);
        assert!(e.contains("direction"), "{e}");
        let e = err(r#"{"op":"status","verbose":true}"#);
        assert!(e.contains("verbose"), "{e}");
        let e = err(
            r#"{"op":"set","link":"x","port":"a","direction":"egress","params":{"delay":{"delay_ms":5}}}"#,
        );
        assert!(e.contains("delay_ms"), "{e}");
        let e = err(r#"{"op":"fly"}"#);
        assert!(e.contains("op") && e.contains("fly"), "{e}");
        assert!(err("{nope").contains("malformed JSON"));
        assert!(err("[1]").contains("object"));
        assert!(err(r#"{"link":"x"}"#).contains("op"));
        assert!(err(r#"{"op":7}"#).contains("op"));
        let e = err(r#"{"op":"down","link":"x"}"#);
        assert!(e.contains("mode"), "{e}");
    }

    #[test]
    fn replies_are_one_line() {
        let mut m = Map::new();
        m.insert("links".into(), Value::from(2));
        let v: Value = serde_json::from_str(&ok_reply(m)).unwrap();
        assert_eq!(v, serde_json::json!({"ok": true, "links": 2}));
        let e = error_reply("field `x`: bad\nthing");
        assert!(!e.contains('\n'));
        let v: Value = serde_json::from_str(&e).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"ok": false, "error": "field `x`: bad\nthing"})
        );
    }
}
