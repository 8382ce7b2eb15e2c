//! nestbed-spawn as the controller uses it: a socket for requests, a pipe for answers and
//! notes. No root needed: the programs are plain local commands.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, ChildStdout, Command, Stdio};

use serde_json::{json, Value};

struct Spawner {
    child: Child,
    requests: UnixStream,
    notes: BufReader<ChildStdout>,
    early: VecDeque<Value>, // notes read while looking for an answer
    dir: PathBuf,
}

impl Spawner {
    fn new(name: &str) -> Spawner {
        let dir = std::env::temp_dir().join(format!("nestbed-spawn-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let (ours, theirs) = UnixStream::pair().unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_nestbed-spawn"))
            .stdin(Stdio::from(OwnedFd::from(theirs)))
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let notes = BufReader::new(child.stdout.take().unwrap());
        Spawner {
            child,
            requests: ours,
            notes,
            early: VecDeque::new(),
            dir,
        }
    }

    /// Starts `argv`; its answer.
    fn start(&mut self, id: u64, argv: &[&str], limit: u64) -> Value {
        let request = json!({
            "id": id, "argv": argv, "env": ["PATH=/usr/bin:/bin", "WHO=spawned"],
            "stdout": self.dir.join(format!("{id}.stdout")), "stderr": self.dir.join(format!("{id}.stderr")),
            "limit": limit,
        });
        self.send(format!("{request}\n").as_bytes())
    }

    /// Sends a request line; the answer to it (the next one on the stream).
    fn send(&mut self, line: &[u8]) -> Value {
        self.requests.write_all(line).unwrap();
        loop {
            let message = self.read();
            if message.get("pid").is_some() || message.get("errno").is_some() {
                return message;
            }
            self.early.push_back(message);
        }
    }

    fn read(&mut self) -> Value {
        let mut line = String::new();
        self.notes.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap()
    }

    /// The next note (exit or closed).
    fn note(&mut self) -> Value {
        match self.early.pop_front() {
            Some(note) => note,
            None => self.read(),
        }
    }

    fn output(&self, id: u64, stream: &str) -> Vec<u8> {
        std::fs::read(self.dir.join(format!("{id}.{stream}"))).unwrap()
    }

    /// Closes the request socket: the spawner ends; its exit status.
    fn close(mut self) -> i32 {
        self.requests.shutdown(std::net::Shutdown::Both).unwrap();
        let code = self.child.wait().unwrap().code().unwrap();
        std::fs::remove_dir_all(&self.dir).unwrap();
        code
    }
}

fn monotonic_ns() -> u64 {
    nestbed_spawn::os::monotonic_ns()
}

#[test]
fn a_program_starts_with_its_environment_and_its_output_and_status_come_back() {
    let mut spawner = Spawner::new("status");
    let before = monotonic_ns();
    let answer = spawner.start(
        1,
        &["sh", "-c", "echo out $WHO; echo err >&2; exit 3"],
        1 << 20,
    );
    assert_eq!(answer["id"], 1);
    assert!(answer["pid"].as_i64().unwrap() > 0);
    let started = answer["began_ns"].as_u64().unwrap();
    let exec = answer["exec_ns"].as_u64().unwrap();
    assert!(
        before <= started && started <= exec && exec <= monotonic_ns(),
        "{answer}"
    );
    let mut notes = [spawner.note(), spawner.note()];
    notes.sort_by_key(|n| n.get("closed").is_some());
    assert_eq!(notes[0]["exit"], 3);
    assert!(notes[0]["ended_ns"].as_u64().unwrap() >= started);
    assert_eq!(notes[1], json!({"id": 1, "closed": true}));
    assert_eq!(spawner.output(1, "stdout"), b"out spawned\n");
    assert_eq!(spawner.output(1, "stderr"), b"err\n");
    assert_eq!(spawner.close(), 0);
}

#[test]
fn a_program_ended_by_a_signal_has_minus_the_signal_as_its_status() {
    let mut spawner = Spawner::new("signal");
    spawner.start(1, &["sh", "-c", "kill -KILL $$"], 1 << 20);
    let note = loop {
        let note = spawner.note();
        if note.get("exit").is_some() {
            break note;
        }
    };
    assert_eq!(note["exit"], -9);
    assert_eq!(spawner.close(), 0);
}

#[test]
fn output_beyond_the_limit_is_dropped_and_counted_at_the_files_end() {
    let mut spawner = Spawner::new("limit");
    spawner.start(1, &["sh", "-c", "head -c 100000 /dev/zero"], 10);
    let (a, b) = (spawner.note(), spawner.note());
    assert!(a.get("closed").is_some() || b.get("closed").is_some());
    let mut expected = vec![0u8; 10];
    expected.extend_from_slice(b"\n[nestbed: 99990 more bytes of output were dropped]\n");
    assert_eq!(spawner.output(1, "stdout"), expected);
    assert_eq!(spawner.output(1, "stderr"), b"");
    assert_eq!(spawner.close(), 0);
}

#[test]
fn a_program_has_a_session_of_its_own_null_input_and_no_other_descriptor() {
    let mut spawner = Spawner::new("session");
    let script = "read -r stat < /proc/$$/stat; echo \"$$ ${stat##*) }\"; readlink /proc/$$/fd/0";
    let answer = spawner.start(1, &["sh", "-c", script], 1 << 20);
    // (a shell of its own: the first's redirection left it a descriptor of its own)
    spawner.start(2, &["sh", "-c", "ls /proc/$$/fd"], 1 << 20);
    for _ in 0..4 {
        spawner.note();
    }
    let out = String::from_utf8(spawner.output(1, "stdout")).unwrap();
    let mut lines = out.lines();
    let fields: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    let pid = answer["pid"].as_i64().unwrap().to_string();
    // pid, then stat's fields from the state on: state, ppid, pgrp, session
    assert_eq!(fields[0], pid);
    assert_eq!(
        (fields[3], fields[4]),
        (pid.as_str(), pid.as_str()),
        "{out}"
    );
    assert_eq!(lines.next(), Some("/dev/null"));
    let listed = String::from_utf8(spawner.output(2, "stdout")).unwrap();
    assert_eq!(
        listed.lines().collect::<Vec<_>>(),
        ["0", "1", "2"],
        "{listed}"
    );
    assert_eq!(spawner.close(), 0);
}

#[test]
fn a_command_that_cannot_start_is_an_answer_with_its_errno_and_the_spawner_goes_on() {
    let mut spawner = Spawner::new("missing");
    let answer = spawner.start(1, &["no-such-command-i18s"], 1 << 20);
    assert_eq!(answer["errno"], 2);
    assert_eq!(answer["filename"], "no-such-command-i18s");
    let answer = spawner.start(2, &["true"], 1 << 20);
    assert!(answer["pid"].as_i64().unwrap() > 0);
    let refused = spawner.send(b"{\"id\": 3}\n");
    assert_eq!(
        (refused["id"].clone(), refused["errno"].clone()),
        (Value::Null, json!(0))
    );
    assert!(
        refused["error"].as_str().unwrap().contains("missing field"),
        "{refused}"
    );
    assert_eq!(spawner.close(), 0);
}

#[test]
fn a_child_left_in_the_background_holds_the_output_open_after_the_programs_exit() {
    let mut spawner = Spawner::new("background");
    spawner.start(1, &["sh", "-c", "(sleep 0.3; echo late) & exit 0"], 1 << 20);
    assert_eq!(spawner.note()["exit"], 0);
    assert_eq!(spawner.note(), json!({"id": 1, "closed": true}));
    assert_eq!(spawner.output(1, "stdout"), b"late\n");
    assert_eq!(spawner.close(), 0);
}

#[test]
fn requests_sent_together_are_all_answered_each_before_its_notes() {
    let mut spawner = Spawner::new("together");
    let line = |id: u64| {
        json!({"id": id, "argv": ["sh", "-c", "exit 0"], "env": ["PATH=/usr/bin:/bin"],
               "stdout": spawner.dir.join(format!("{id}.o")), "stderr": spawner.dir.join(format!("{id}.e")),
               "limit": 10})
        .to_string()
    };
    let batch: String = (1..=5).map(|id| line(id) + "\n").collect();
    spawner.requests.write_all(batch.as_bytes()).unwrap();
    let mut answered = Vec::new();
    let mut ended = Vec::new();
    while ended.len() < 5 {
        let message = spawner.read();
        let id = message["id"].as_u64().unwrap();
        if message.get("pid").is_some() {
            answered.push(id);
        } else if message.get("closed").is_some() {
            assert!(answered.contains(&id), "{id} closed before its answer");
        } else {
            assert!(answered.contains(&id), "{id} ended before its answer");
            ended.push(id);
        }
    }
    answered.sort(); // (in the order their execs ended)
    assert_eq!(answered, [1, 2, 3, 4, 5]);
    assert_eq!(spawner.close(), 0);
}

#[test]
fn a_start_handed_over_ahead_of_its_time_begins_then_not_before() {
    let mut spawner = Spawner::new("timed");
    let at = monotonic_ns() + 200_000_000;
    let request = json!({
        "id": 1, "argv": ["true"], "env": ["PATH=/usr/bin:/bin"],
        "stdout": spawner.dir.join("1.o"), "stderr": spawner.dir.join("1.e"), "limit": 10,
        "at_ns": at,
    });
    // one asked for now meanwhile is not held up by it
    let now = spawner.start(2, &["true"], 10);
    assert!(now["began_ns"].as_u64().unwrap() < at, "{now}");
    let answer = spawner.send(format!("{request}\n").as_bytes());
    assert!(answer["began_ns"].as_u64().unwrap() >= at, "{answer}");
    assert_eq!(spawner.close(), 0);
}

#[test]
fn a_program_gets_the_nice_value_nestbed_spawn_was_started_with() {
    let mut spawner = Spawner::new("nice");
    let ours = std::fs::read_to_string("/proc/self/stat").unwrap();
    let field = |stat: &str| {
        stat.rsplit(')')
            .next()
            .unwrap()
            .split_whitespace()
            .nth(16)
            .map(str::to_owned)
    };
    spawner.start(1, &["sh", "-c", "cat /proc/$$/stat"], 1 << 20);
    spawner.note();
    spawner.note();
    let theirs = String::from_utf8(spawner.output(1, "stdout")).unwrap();
    assert_eq!(field(&theirs), field(&ours), "{theirs}"); // stat's 19th field, nice
                                                          // and no real-time policy, handed over ahead of its time or not (stat's 41st field)
    let policy = |stat: &str| {
        stat.rsplit(')')
            .next()
            .unwrap()
            .split_whitespace()
            .nth(38)
            .map(str::to_owned)
    };
    let at = monotonic_ns() + 50_000_000;
    let request = json!({
        "id": 2, "argv": ["sh", "-c", "cat /proc/$$/stat"], "env": ["PATH=/usr/bin:/bin"],
        "stdout": spawner.dir.join("2.stdout"), "stderr": spawner.dir.join("2.stderr"),
        "limit": 1000, "at_ns": at,
    });
    spawner.send(format!("{request}\n").as_bytes());
    spawner.note();
    spawner.note();
    let later = String::from_utf8(spawner.output(2, "stdout")).unwrap();
    assert_eq!(policy(&later).as_deref(), Some("0"), "{later}");
    assert_eq!(field(&later), field(&ours), "{later}");
    assert_eq!(spawner.close(), 0);
}

#[test]
fn a_program_waiting_for_its_time_goes_with_nestbed_spawn() {
    let mut spawner = Spawner::new("orphan");
    let at = monotonic_ns() + 60_000_000_000; // a minute on: the test ends long before
    let request = json!({
        "id": 1, "argv": ["true"], "env": [], "stdout": spawner.dir.join("o"),
        "stderr": spawner.dir.join("e"), "limit": 10, "at_ns": at,
    });
    spawner
        .requests
        .write_all(format!("{request}\n").as_bytes())
        .unwrap();
    // its process exists, waiting: found as the one child of the spawner
    let children = format!("/proc/{0}/task/{0}/children", spawner.child.id());
    let mut waiting = String::new();
    for _ in 0..1000 {
        waiting = std::fs::read_to_string(&children)
            .unwrap()
            .trim()
            .to_owned();
        if !waiting.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let pid: i32 = waiting.parse().expect("a waiting child");
    spawner.child.kill().unwrap(); // nestbed-spawn dies before its time
    spawner.child.wait().unwrap();
    let alive = || {
        std::path::Path::new(&format!("/proc/{pid}/stat")).exists()
            && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .unwrap_or_default()
                .contains(") Z")
    };
    for _ in 0..1000 {
        if !alive() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert!(!alive(), "the waiting program outlived nestbed-spawn");
    std::fs::remove_dir_all(&spawner.dir).unwrap();
}
