//! Request dispatch without I/O: checks a parsed request against the
//! daemon's registry of links and turns it into an [`Action`] for the
//! daemon to carry out; after the action succeeded the daemon calls
//! [`Registry::commit`]. Everything here is pure, so it is unit-tested and
//! fuzzed without root.
//!
//! A link's worker applies its pipes' and state's changes in an order of
//! its own: a timed one (`at`) at its time, beside changes asked for now.
//! Each change the worker makes has a number, rising, and the registry
//! keeps a pipe's parameters and a link's state from the highest-numbered
//! change, whichever order the daemon's threads commit them in.

use std::collections::BTreeMap;

use nestbed_pipe::PipeParams;
use serde::Serialize;
use serde_json::{json, Value};

use crate::protocol::{AddLink, DownMode, Request};
use crate::seed::{pipe_seed, Direction};

/// Longest link or port name.
pub const MAX_NAME: usize = 64;
/// Longest interface name (IFNAMSIZ − 1).
pub const MAX_IFNAME: usize = 15;
/// Most ports in one link.
pub const MAX_PORTS: usize = 256;

/// Whether a link passes frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkState {
    /// Passing frames.
    Up,
    /// Host-side interfaces down (nodes see no carrier).
    AdminDown,
    /// Frames dropped silently.
    Blackhole,
}

/// What the registry knows about one port.
#[derive(Clone, Debug, PartialEq)]
pub struct PortEntry {
    /// Port name.
    pub name: String,
    /// Host-side interface.
    pub ifname: String,
    /// Parameters in force, egress then ingress.
    pub params: [PipeParams; 2],
    /// Pipe seeds, egress then ingress.
    pub seeds: [u64; 2],
    /// The worker's number of the change that set `params`, egress then ingress.
    pub changed: [u64; 2],
}

/// What the registry knows about one link.
#[derive(Clone, Debug, PartialEq)]
pub struct LinkEntry {
    /// Worker thread serving it.
    pub thread: usize,
    /// Learning switch or point-to-point.
    pub lan: bool,
    /// The link's seed.
    pub seed: u64,
    /// Member ports in request order.
    pub ports: Vec<PortEntry>,
    /// Up, admin down or blackhole.
    pub state: LinkState,
    /// Trace file, if tracing.
    pub trace: Option<String>,
    /// The worker's number of the change that set `state`.
    pub state_changed: u64,
    /// Which `add_link` of the daemon made it (a timed change planned on a
    /// link removed and added again before it came back is not kept).
    pub added: u64,
}

impl LinkEntry {
    fn ifnames(&self) -> Vec<String> {
        self.ports.iter().map(|p| p.ifname.clone()).collect()
    }
}

/// What the daemon must do for a request.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Open the interfaces and start the link on `thread`.
    AddLink {
        /// Worker thread.
        thread: usize,
        /// The validated request.
        spec: AddLink,
    },
    /// Stop the link; set `restore_up` interfaces up again.
    RemoveLink {
        /// Worker thread.
        thread: usize,
        /// Link name.
        link: String,
        /// Interfaces that were set down by `down admin`.
        restore_up: Vec<String>,
    },
    /// Change one pipe.
    Set {
        /// Worker thread.
        thread: usize,
        /// Link name.
        link: String,
        /// Port index.
        port: usize,
        /// Which pipe.
        direction: Direction,
        /// New parameters (validated).
        params: PipeParams,
    },
    /// Change the link state; set `ifnames` up or down first if `admin` is set.
    SetState {
        /// Worker thread.
        thread: usize,
        /// Link name.
        link: String,
        /// The new state.
        state: LinkState,
        /// `Some(up)`: set the link's interfaces up or down.
        admin: Option<bool>,
        /// The link's interfaces.
        ifnames: Vec<String>,
    },
    /// Collect counters of these (thread, link) pairs and every thread's lateness.
    Counters {
        /// Links to report.
        links: Vec<(usize, String)>,
    },
    /// Start a trace.
    TraceStart {
        /// Worker thread.
        thread: usize,
        /// Link name.
        link: String,
        /// File path.
        path: String,
    },
    /// Stop a trace.
    TraceStop {
        /// Worker thread.
        thread: usize,
        /// Link name.
        link: String,
    },
    /// Reply with [`Registry::status`].
    Status,
    /// Wait for the links still starting.
    Ready,
    /// Shut down.
    Shutdown,
    /// Give the link's worker these changes to apply at `at_ns`.
    At {
        /// Worker thread.
        thread: usize,
        /// The link all of them change.
        link: String,
        /// The link's `added` when they were planned.
        added: u64,
        /// When (CLOCK_MONOTONIC ns).
        at_ns: u64,
        /// `Set` and `SetState` without interface changes, in order.
        actions: Vec<Action>,
    },
}

impl Action {
    /// The reply's fields of a `set` (the queue limit it gives) or a state
    /// change (the state); none for others.
    pub fn reply_fields(&self) -> serde_json::Map<String, Value> {
        let mut m = serde_json::Map::new();
        match self {
            Action::Set { params, .. } => {
                m.insert("queue_limit".into(), json!(params.queue_limit()));
            }
            Action::SetState { state, .. } => {
                m.insert("state".into(), json!(state));
            }
            _ => {}
        }
        m
    }
}

/// The daemon's view of its links.
#[derive(Clone, Debug)]
pub struct Registry {
    threads: usize,
    links: BTreeMap<String, LinkEntry>,
    /// `add_link`s committed so far.
    adds: u64,
}

fn check_name(what: &str, name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_NAME {
        return Err(format!(
            "field `{what}`: must be 1 to {MAX_NAME} bytes, got {name:?}"
        ));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
    {
        return Err(format!(
            "field `{what}`: may hold only letters, digits, '_', '.' and '-', got {name:?}"
        ));
    }
    Ok(())
}

fn check_params(field: &str, params: &PipeParams) -> Result<(), String> {
    params.validate().map_err(|errors| {
        errors
            .errors()
            .iter()
            .map(|e| format!("field `{field}.{}`: {}", e.field, e.message))
            .collect::<Vec<_>>()
            .join("; ")
    })
}

impl Registry {
    /// An empty registry spreading links over `threads` workers.
    pub fn new(threads: usize) -> Registry {
        Registry {
            threads: threads.max(1),
            links: BTreeMap::new(),
            adds: 0,
        }
    }

    /// The links.
    pub fn links(&self) -> &BTreeMap<String, LinkEntry> {
        &self.links
    }

    fn link(&self, name: &str) -> Result<&LinkEntry, String> {
        self.links
            .get(name)
            .ok_or_else(|| format!("field `link`: unknown link {name:?}"))
    }

    /// The thread with the fewest links (lowest index on ties).
    fn pick_thread(&self) -> usize {
        let mut load = vec![0usize; self.threads];
        for l in self.links.values() {
            load[l.thread] += 1;
        }
        (0..self.threads).min_by_key(|&t| load[t]).unwrap_or(0)
    }

    fn check_add(&self, a: &AddLink) -> Result<(), String> {
        check_name("link", &a.link)?;
        if self.links.contains_key(&a.link) {
            return Err(format!("field `link`: link {:?} already exists", a.link));
        }
        if a.ports.len() < 2 || a.ports.len() > MAX_PORTS {
            return Err(format!(
                "field `ports`: a link needs 2 to {MAX_PORTS} ports, got {}",
                a.ports.len()
            ));
        }
        let mut problems = Vec::new();
        for (i, p) in a.ports.iter().enumerate() {
            if let Err(e) = check_name(&format!("ports[{i}].port"), &p.port) {
                problems.push(e);
            }
            if a.ports[..i].iter().any(|q| q.port == p.port) {
                problems.push(format!(
                    "field `ports[{i}].port`: duplicate port name {:?}",
                    p.port
                ));
            }
            let ifname_ok = !p.ifname.is_empty()
                && p.ifname.len() <= MAX_IFNAME
                && p.ifname
                    .bytes()
                    .all(|b| b.is_ascii_graphic() && b != b'/' && b != b':');
            if !ifname_ok {
                problems.push(format!(
                    "field `ports[{i}].ifname`: must be 1 to {MAX_IFNAME} printable bytes without '/' or ':', got {:?}",
                    p.ifname
                ));
            }
            if a.ports[..i].iter().any(|q| q.ifname == p.ifname) {
                problems.push(format!(
                    "field `ports[{i}].ifname`: {:?} is used twice",
                    p.ifname
                ));
            }
            for (other, entry) in &self.links {
                if entry.ports.iter().any(|q| q.ifname == p.ifname) {
                    problems.push(format!(
                        "field `ports[{i}].ifname`: {:?} already belongs to link {other:?}",
                        p.ifname
                    ));
                }
            }
            for d in Direction::BOTH {
                if let Err(e) = check_params(&format!("ports[{i}].{}", d.as_str()), p.params(d)) {
                    problems.push(e);
                }
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(format!("add_link: {}", problems.join("; ")))
        }
    }

    /// Checks `req` against the registry and says what to do. Never
    /// panics; the error is one sentence naming the field.
    pub fn plan(&self, req: Request) -> Result<Action, String> {
        Ok(match req {
            Request::AddLink(spec) => {
                self.check_add(&spec)?;
                Action::AddLink {
                    thread: self.pick_thread(),
                    spec,
                }
            }
            Request::RemoveLink { link } => {
                let e = self.link(&link)?;
                Action::RemoveLink {
                    thread: e.thread,
                    restore_up: if e.state == LinkState::AdminDown {
                        e.ifnames()
                    } else {
                        Vec::new()
                    },
                    link,
                }
            }
            Request::Set {
                link,
                port,
                direction,
                params,
            } => {
                let e = self.link(&link)?;
                let index =
                    e.ports.iter().position(|p| p.name == port).ok_or_else(|| {
                        format!("field `port`: link {link:?} has no port {port:?}")
                    })?;
                check_params("params", &params).map_err(|m| format!("set: {m}"))?;
                Action::Set {
                    thread: e.thread,
                    link,
                    port: index,
                    direction,
                    params,
                }
            }
            Request::Up { link } => {
                let e = self.link(&link)?;
                Action::SetState {
                    thread: e.thread,
                    state: LinkState::Up,
                    admin: (e.state == LinkState::AdminDown).then_some(true),
                    ifnames: e.ifnames(),
                    link,
                }
            }
            Request::Down { link, mode } => {
                let e = self.link(&link)?;
                let (state, admin) = match mode {
                    DownMode::Admin => (
                        LinkState::AdminDown,
                        (e.state != LinkState::AdminDown).then_some(false),
                    ),
                    DownMode::Blackhole => (
                        LinkState::Blackhole,
                        (e.state == LinkState::AdminDown).then_some(true),
                    ),
                };
                Action::SetState {
                    thread: e.thread,
                    state,
                    admin,
                    ifnames: e.ifnames(),
                    link,
                }
            }
            Request::Counters { link } => Action::Counters {
                links: match link {
                    Some(name) => vec![(self.link(&name)?.thread, name)],
                    None => self
                        .links
                        .iter()
                        .map(|(n, e)| (e.thread, n.clone()))
                        .collect(),
                },
            },
            Request::TraceStart { link, path } => {
                let e = self.link(&link)?;
                if path.is_empty() || path.contains('\0') {
                    return Err("field `path`: must be a non-empty file path".into());
                }
                if let Some(p) = &e.trace {
                    return Err(format!(
                        "field `link`: link {link:?} is already tracing to {p:?}; send trace_stop first"
                    ));
                }
                Action::TraceStart {
                    thread: e.thread,
                    link,
                    path,
                }
            }
            Request::TraceStop { link } => {
                let e = self.link(&link)?;
                if e.trace.is_none() {
                    return Err(format!("field `link`: link {link:?} is not tracing"));
                }
                Action::TraceStop {
                    thread: e.thread,
                    link,
                }
            }
            Request::Status => Action::Status,
            Request::Ready => Action::Ready,
            Request::Shutdown => Action::Shutdown,
            Request::At { at_ns, requests } => self.plan_at(at_ns, requests)?,
        })
    }

    /// A timed batch: every request checked (all or nothing), all on one
    /// link, none changing its interfaces (the worker applies the batch by
    /// itself, and setting interfaces is the control thread's).
    fn plan_at(&self, at_ns: u64, requests: Vec<Request>) -> Result<Action, String> {
        if requests.is_empty() {
            return Err("at: field `requests`: give at least one (set, up or down)".into());
        }
        let mut actions = Vec::new();
        let mut problems = Vec::new();
        for (i, r) in requests.into_iter().enumerate() {
            let admin_down = matches!(
                r,
                Request::Down {
                    mode: DownMode::Admin,
                    ..
                }
            );
            match self.plan(r) {
                Ok(_) if admin_down => problems.push(format!(
                    "requests[{i}]: `down` with mode admin cannot be timed (it sets interfaces \
                     down); use mode blackhole"
                )),
                Ok(Action::SetState {
                    admin: Some(_),
                    link,
                    ..
                }) => problems.push(format!(
                    "requests[{i}]: link {link:?} is down admin, so its interfaces must be set \
                     up, which cannot be timed; send `up` without a time first"
                )),
                Ok(a) => actions.push(a),
                Err(e) => problems.push(format!("requests[{i}]: {e}")),
            }
        }
        if !problems.is_empty() {
            return Err(format!("at: {}", problems.join("; ")));
        }
        let target = |a: &Action| match a {
            Action::Set { thread, link, .. } | Action::SetState { thread, link, .. } => {
                Some((*thread, link.clone()))
            }
            _ => None,
        };
        let (thread, link) = target(&actions[0]).ok_or("at: nothing to apply")?;
        if let Some(i) = actions
            .iter()
            .position(|a| target(a).is_none_or(|(_, l)| l != link))
        {
            return Err(format!(
                "at: field `requests[{i}].link`: every request of one `at` must name the same \
                 link ({link:?})"
            ));
        }
        Ok(Action::At {
            thread,
            added: self.links[&link].added,
            link,
            at_ns,
            actions,
        })
    }

    /// Records the effect of an action that was carried out; `number` is
    /// the worker's number of the change it made (`Set`, `SetState`),
    /// ignored for others. A timed batch (`At`) is recorded when it was
    /// applied ([`Registry::commit_applied`]).
    pub fn commit(&mut self, action: &Action, number: u64) {
        match action {
            Action::AddLink { thread, spec } => {
                self.adds += 1;
                let ports = spec
                    .ports
                    .iter()
                    .enumerate()
                    .map(|(i, p)| PortEntry {
                        name: p.port.clone(),
                        ifname: p.ifname.clone(),
                        params: [p.egress.clone(), p.ingress.clone()],
                        seeds: Direction::BOTH.map(|d| pipe_seed(spec.seed, i, d)),
                        changed: [0; 2],
                    })
                    .collect();
                self.links.insert(
                    spec.link.clone(),
                    LinkEntry {
                        thread: *thread,
                        lan: spec.is_lan(),
                        seed: spec.seed,
                        ports,
                        state: LinkState::Up,
                        trace: None,
                        state_changed: 0,
                        added: self.adds,
                    },
                );
            }
            Action::RemoveLink { link, .. } => {
                self.links.remove(link);
            }
            Action::Set {
                link,
                port,
                direction,
                params,
                ..
            } => {
                if let Some(p) = self
                    .links
                    .get_mut(link)
                    .and_then(|e| e.ports.get_mut(*port))
                {
                    let d = *direction as usize;
                    if number >= p.changed[d] {
                        p.params[d] = params.clone();
                        p.changed[d] = number;
                    }
                }
            }
            Action::SetState { link, state, .. } => {
                if let Some(e) = self.links.get_mut(link) {
                    if number >= e.state_changed {
                        e.state = *state;
                        e.state_changed = number;
                    }
                }
            }
            Action::TraceStart { link, path, .. } => {
                if let Some(e) = self.links.get_mut(link) {
                    e.trace = Some(path.clone());
                }
            }
            Action::TraceStop { link, .. } => {
                if let Some(e) = self.links.get_mut(link) {
                    e.trace = None;
                }
            }
            Action::Counters { .. }
            | Action::Status
            | Action::Ready
            | Action::Shutdown
            | Action::At { .. } => {}
        }
    }

    /// Records a timed batch its worker applied, its changes numbered from
    /// `first` on; nothing if its link was removed (and maybe added again)
    /// meanwhile.
    pub fn commit_applied(&mut self, at: &Action, first: u64) {
        let Action::At {
            link,
            added,
            actions,
            ..
        } = at
        else {
            return;
        };
        if self.links.get(link).is_some_and(|e| e.added == *added) {
            for (n, a) in (first..).zip(actions) {
                self.commit(a, n);
            }
        }
    }

    /// The `status` reply's fields: version, threads and every link with
    /// its ports, parameters in force (with the derived queue limit) and
    /// seeds.
    pub fn status(&self) -> serde_json::Map<String, Value> {
        let links: serde_json::Map<String, Value> = self
            .links
            .iter()
            .map(|(name, e)| {
                let ports: Vec<Value> = e
                    .ports
                    .iter()
                    .map(|p| {
                        let mut port = json!({"port": p.name, "ifname": p.ifname});
                        for d in Direction::BOTH {
                            let params = &p.params[d as usize];
                            port[d.as_str()] = json!({
                                "seed": p.seeds[d as usize],
                                "params": params,
                                "queue_limit": params.queue_limit(),
                            });
                        }
                        port
                    })
                    .collect();
                let v = json!({
                    "lan": e.lan,
                    "seed": e.seed,
                    "thread": e.thread,
                    "state": e.state,
                    "trace": e.trace,
                    "ports": ports,
                });
                (name.clone(), v)
            })
            .collect();
        let mut m = serde_json::Map::new();
        m.insert("version".into(), env!("CARGO_PKG_VERSION").into());
        m.insert("threads".into(), self.threads.into());
        m.insert("links".into(), Value::Object(links));
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::parse_request;

    fn add(reg: &mut Registry, line: &str) -> Result<Action, String> {
        let a = reg.plan(parse_request(line)?)?;
        reg.commit(&a, u64::MAX);
        Ok(a)
    }

    const L0: &str = r#"{"op":"add_link","link":"l0","seed":7,"ports":[{"port":"a","ifname":"v0a"},{"port":"b","ifname":"v0b","ingress":{"delay":{"delay_ns":1000}}}]}"#;

    #[test]
    fn add_assigns_threads_and_seeds() {
        let mut reg = Registry::new(2);
        let a = add(&mut reg, L0).unwrap();
        assert!(matches!(a, Action::AddLink { thread: 0, .. }));
        let b = add(
            &mut reg,
            r#"{"op":"add_link","link":"l1","ports":[{"port":"a","ifname":"v1a"},{"port":"b","ifname":"v1b"},{"port":"c","ifname":"v1c"}]}"#,
        )
        .unwrap();
        assert!(matches!(b, Action::AddLink { thread: 1, .. }));
        let e = &reg.links()["l0"];
        assert_eq!(e.ports[1].seeds[1], pipe_seed(7, 1, Direction::Ingress));
        assert!(!e.lan);
        assert!(reg.links()["l1"].lan);
        let st = Value::Object(reg.status());
        assert_eq!(
            st["links"]["l0"]["ports"][1]["ingress"]["params"]["delay"]["delay_ns"],
            1000
        );
        assert_eq!(
            st["links"]["l0"]["ports"][1]["ingress"]["queue_limit"]["packets"],
            50
        );
    }

    #[test]
    fn rejects_bad_links() {
        let mut reg = Registry::new(1);
        add(&mut reg, L0).unwrap();
        let e = add(&mut reg, L0).unwrap_err();
        assert!(e.contains("already exists"), "{e}");
        let e = add(&mut reg, &L0.replace("\"l0\"", "\"l9\"")).unwrap_err();
        assert!(
            e.contains("ports[0].ifname") && e.contains("already belongs"),
            "{e}"
        );
        let e = add(
            &mut reg,
            r#"{"op":"add_link","link":"x","ports":[{"port":"a","ifname":"q1"}]}"#,
        )
        .unwrap_err();
        assert!(e.contains("ports"), "{e}");
        let e = add(&mut reg, r#"{"op":"add_link","link":"x","ports":[{"port":"a","ifname":"waytoolonginterface"},{"port":"a","ifname":"q2"}]}"#).unwrap_err();
        assert!(
            e.contains("ports[0].ifname") && e.contains("ports[1].port"),
            "{e}"
        );
        let e = add(&mut reg, r#"{"op":"add_link","link":"x","ports":[{"port":"a","ifname":"q1","egress":{"loss":{"model":"bernoulli","p":1.5}}},{"port":"b","ifname":"q2"}]}"#).unwrap_err();
        assert!(e.contains("ports[0].egress.loss"), "{e}");
        let e = add(&mut reg, r#"{"op":"add_link","link":"a b","ports":[]}"#).unwrap_err();
        assert!(e.contains("link"), "{e}");
    }

    #[test]
    fn state_changes_plan_interface_flags() {
        let mut reg = Registry::new(1);
        add(&mut reg, L0).unwrap();
        let down = add(&mut reg, r#"{"op":"down","link":"l0","mode":"admin"}"#).unwrap();
        assert!(matches!(
            down,
            Action::SetState {
                admin: Some(false),
                state: LinkState::AdminDown,
                ..
            }
        ));
        let bh = add(&mut reg, r#"{"op":"down","link":"l0","mode":"blackhole"}"#).unwrap();
        assert!(matches!(
            bh,
            Action::SetState {
                admin: Some(true),
                state: LinkState::Blackhole,
                ..
            }
        ));
        let up = add(&mut reg, r#"{"op":"up","link":"l0"}"#).unwrap();
        assert!(matches!(
            up,
            Action::SetState {
                admin: None,
                state: LinkState::Up,
                ..
            }
        ));
        add(&mut reg, r#"{"op":"down","link":"l0","mode":"admin"}"#).unwrap();
        let rm = add(&mut reg, r#"{"op":"remove_link","link":"l0"}"#).unwrap();
        assert!(matches!(rm, Action::RemoveLink { ref restore_up, .. } if restore_up.len() == 2));
        assert!(reg.links().is_empty());
    }

    #[test]
    fn unknown_link_port_and_trace_state() {
        let mut reg = Registry::new(1);
        add(&mut reg, L0).unwrap();
        let e = add(&mut reg, r#"{"op":"up","link":"nope"}"#).unwrap_err();
        assert!(e.contains("link") && e.contains("nope"));
        let e = add(
            &mut reg,
            r#"{"op":"set","link":"l0","port":"z","direction":"egress","params":{}}"#,
        )
        .unwrap_err();
        assert!(e.contains("port"), "{e}");
        let e = add(&mut reg, r#"{"op":"set","link":"l0","port":"a","direction":"egress","params":{"loss":{"model":"bernoulli","p":2}}}"#).unwrap_err();
        assert!(e.contains("params.loss"), "{e}");
        let ok = add(&mut reg, r#"{"op":"set","link":"l0","port":"a","direction":"egress","params":{"delay":{"delay_ns":5}}}"#).unwrap();
        assert!(matches!(ok, Action::Set { port: 0, .. }));
        assert_eq!(reg.links()["l0"].ports[0].params[0].delay.delay_ns, 5);
        assert!(add(&mut reg, r#"{"op":"trace_stop","link":"l0"}"#).is_err());
        add(
            &mut reg,
            r#"{"op":"trace_start","link":"l0","path":"/tmp/x"}"#,
        )
        .unwrap();
        assert!(add(
            &mut reg,
            r#"{"op":"trace_start","link":"l0","path":"/tmp/y"}"#
        )
        .is_err());
        add(&mut reg, r#"{"op":"trace_stop","link":"l0"}"#).unwrap();
        assert!(add(&mut reg, r#"{"op":"counters","link":"zz"}"#).is_err());
        let c = add(&mut reg, r#"{"op":"counters"}"#).unwrap();
        assert_eq!(
            c,
            Action::Counters {
                links: vec![(0, "l0".into())]
            }
        );
    }

    const L1: &str = r#"{"op":"add_link","link":"l1","ports":[{"port":"a","ifname":"v1a"},{"port":"b","ifname":"v1b"}]}"#;

    fn set_delay(link: &str, port: &str, ns: u64) -> String {
        format!(
            r#"{{"op":"set","link":"{link}","port":"{port}","direction":"egress","params":{{"delay":{{"delay_ns":{ns}}}}}}}"#
        )
    }

    fn at(requests: &[String]) -> String {
        format!(
            r#"{{"op":"at","at_ns":7,"requests":[{}]}}"#,
            requests.join(",")
        )
    }

    fn plan(reg: &Registry, line: &str) -> Result<Action, String> {
        reg.plan(parse_request(line)?)
    }

    #[test]
    fn a_timed_batch_is_planned_whole_on_one_link_without_interface_changes() {
        let mut reg = Registry::new(2);
        add(&mut reg, L0).unwrap();
        add(&mut reg, L1).unwrap();
        let down = r#"{"op":"down","link":"l1","mode":"blackhole"}"#.to_string();
        let a = plan(&reg, &at(&[set_delay("l1", "a", 5), down.clone()])).unwrap();
        let Action::At {
            thread,
            link,
            at_ns,
            actions,
            ..
        } = a
        else {
            panic!()
        };
        assert_eq!((thread, link.as_str(), at_ns), (1, "l1", 7));
        assert!(matches!(actions[0], Action::Set { port: 0, .. }));
        assert!(matches!(
            actions[1],
            Action::SetState {
                admin: None,
                state: LinkState::Blackhole,
                ..
            }
        ));
        // All or nothing: one bad request refuses the batch, naming it.
        let bad = r#"{"op":"set","link":"l1","port":"zz","direction":"egress","params":{}}"#;
        let e = plan(&reg, &at(&[set_delay("l1", "a", 5), bad.into()])).unwrap_err();
        assert!(e.contains("requests[1]") && e.contains("zz"), "{e}");
        let e = plan(
            &reg,
            &at(&[set_delay("l1", "a", 5), set_delay("l0", "a", 5)]),
        )
        .unwrap_err();
        assert!(e.contains("requests[1].link"), "{e}");
        let e = plan(&reg, &at(&[])).unwrap_err();
        assert!(e.contains("requests"), "{e}");
        let admin = r#"{"op":"down","link":"l1","mode":"admin"}"#;
        let e = plan(&reg, &at(&[admin.into()])).unwrap_err();
        assert!(e.contains("mode admin"), "{e}");
        add(&mut reg, admin).unwrap();
        let e = plan(&reg, &at(&[r#"{"op":"up","link":"l1"}"#.into()])).unwrap_err();
        assert!(e.contains("down admin"), "{e}");
        // A pipe's parameters can change while the link is down admin.
        assert!(plan(&reg, &at(&[set_delay("l1", "b", 9)])).is_ok());
    }

    #[test]
    fn the_registry_keeps_the_change_its_worker_made_last_whatever_order_they_come_back_in() {
        let mut reg = Registry::new(1);
        let added = reg.plan(parse_request(L0).unwrap()).unwrap();
        reg.commit(&added, 0);
        let timed = plan(&reg, &at(&[set_delay("l0", "a", 5)])).unwrap();
        let now = plan(&reg, &set_delay("l0", "a", 9)).unwrap();
        let delay = |reg: &Registry| reg.links()["l0"].ports[0].params[0].delay.delay_ns;
        // The worker applied the timed change (number 1), then the one asked for
        // now (2); the timed one's answer is committed last.
        reg.commit(&now, 2);
        reg.commit_applied(&timed, 1);
        assert_eq!(delay(&reg), 9);
        // The other way round.
        reg.commit_applied(&timed, 3);
        assert_eq!(delay(&reg), 5);
        // A link removed and added again takes nothing planned on the old one.
        add(&mut reg, r#"{"op":"remove_link","link":"l0"}"#).unwrap();
        let again = reg.plan(parse_request(L0).unwrap()).unwrap();
        reg.commit(&again, 0);
        reg.commit_applied(&timed, 4);
        assert_eq!(delay(&reg), 0);
    }
}
