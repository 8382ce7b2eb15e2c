//! Which links have an interface with a segmentation or receive offload
//! on, followed on a thread of its own and handed to the workers as one flag
//! a link.
//!
//! Reading an interface's offloads (`SIOCETHTOOL`) takes the kernel's rtnl
//! lock, which whatever changes the machine's interfaces holds: another
//! experiment's swap, or the kernel removing a namespace (measured under
//! namespace churn: up to 2.1 ms a read). A worker that read them itself
//! was held that long while its frames were due. Here a worker only loads
//! an atomic flag, which never waits: a lock shared with a thread that
//! waits for rtnl (or for a core) would let it wait after all.
//!
//! The watcher reads an interface when rtnetlink says it changed (a change
//! of offloads is announced), at once; and every interface once a [`SWEEP`]
//! besides, in case a change goes unannounced. Without the netlink socket
//! (or after lost messages) it reads them all every [`PERIOD`], as it once
//! always did: at 1 000 ports that took 20 ms of CPU a second, now 2
//! (`bench/linkd_ports.py`).

use std::collections::HashSet;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::os;

/// Whether some interface of a link has offloads on, as last read; shared
/// by the link's worker (which loads it) and the watcher (which stores it).
pub type Offloads = Arc<AtomicBool>;

/// How long the watcher waits for rtnetlink's messages at a time.
pub const PERIOD: Duration = Duration::from_millis(100);

/// How often every interface is read, announced or not.
pub const SWEEP: Duration = Duration::from_secs(1);

/// One link's interfaces and its flag; forgotten once the worker drops the
/// flag (the link is gone).
struct Watched {
    ifnames: Vec<String>,
    flag: Weak<AtomicBool>,
    /// When the watcher last read its interfaces (never: in its next round,
    /// which reads them after whatever the first reading missed).
    read_at: Option<Instant>,
}

/// The watcher thread's list; the thread ends once this is dropped.
pub struct OffloadWatch {
    links: Arc<Mutex<Vec<Watched>>>,
}

impl OffloadWatch {
    /// Starts the thread following the watched interfaces: those announced
    /// within `period`, every one once a `sweep`.
    pub fn start(period: Duration, sweep: Duration) -> io::Result<OffloadWatch> {
        let links = Arc::new(Mutex::new(Vec::new()));
        let list = Arc::downgrade(&links);
        // Opened here, before any link is watched, so that no change after
        // a link's first reading goes unheard.
        let events = os::LinkEvents::open(period).ok();
        std::thread::Builder::new()
            .name("linkd-offloads".into())
            .spawn(move || follow(&list, events, period, sweep))?;
        Ok(OffloadWatch { links })
    }

    /// A flag for a link of these interfaces, read now (on the caller's
    /// thread) and then by the watcher.
    pub fn watch(&self, ifnames: Vec<String>) -> Offloads {
        let flag = Arc::new(AtomicBool::new(any_on(&ifnames)));
        let watched = Watched {
            ifnames,
            flag: Arc::downgrade(&flag),
            read_at: None,
        };
        lock(&self.links).push(watched);
        flag
    }
}

/// Whether some of these interfaces has offloads on (or cannot be read:
/// then a super-frame may come, and its metadata must not be lost).
fn any_on(ifnames: &[String]) -> bool {
    ifnames.iter().any(|i| os::offloads_on(i).unwrap_or(true))
}

fn lock(links: &Mutex<Vec<Watched>>) -> std::sync::MutexGuard<'_, Vec<Watched>> {
    links
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The watcher's loop: each round picks its links from the list, so the
/// list's lock is never held while the kernel is asked.
fn follow(
    list: &Weak<Mutex<Vec<Watched>>>,
    mut events: Option<os::LinkEvents>,
    period: Duration,
    sweep: Duration,
) {
    loop {
        // The links to read: those named, or all of them (None).
        let named: Option<HashSet<String>> = match events.as_mut().map(os::LinkEvents::heard) {
            Some(Ok(os::Heard::Names(names))) => Some(names.into_iter().collect()),
            lost_or_failed => {
                // Messages lost, or no socket (polled from now on): every
                // link, but not more often than once a period (under a storm
                // of changes ENOBUFS may come back at once, round after round).
                if !matches!(lost_or_failed, Some(Ok(_))) {
                    events = None;
                }
                std::thread::sleep(period);
                None
            }
        };
        let Some(links) = list.upgrade() else {
            return;
        };
        let now = Instant::now();
        let round: Vec<(Vec<String>, Offloads)> = {
            let mut links = lock(&links);
            links.retain(|w| w.flag.strong_count() > 0);
            links
                .iter_mut()
                .filter(|w| match &named {
                    None => true,
                    Some(names) => {
                        w.read_at.is_none_or(|at| now >= at + sweep)
                            || w.ifnames.iter().any(|i| names.contains(i))
                    }
                })
                .filter_map(|w| {
                    w.read_at = Some(now);
                    Some((w.ifnames.clone(), w.flag.upgrade()?))
                })
                .collect()
        };
        drop(links);
        for (ifnames, flag) in round {
            flag.store(any_on(&ifnames), Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_whose_interface_cannot_be_read_is_taken_to_have_offloads_on() {
        let watch =
            OffloadWatch::start(Duration::from_millis(1), Duration::from_millis(5)).unwrap();
        let flag = watch.watch(vec!["nbtwx-none".into()]);
        assert!(flag.load(Ordering::Relaxed));
        // The watcher keeps it so, round after round.
        flag.store(false, Ordering::Relaxed);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !flag.load(Ordering::Relaxed) {
            assert!(
                std::time::Instant::now() < deadline,
                "the watcher never read it"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn a_dropped_flag_is_forgotten() {
        let watch =
            OffloadWatch::start(Duration::from_millis(1), Duration::from_millis(5)).unwrap();
        drop(watch.watch(vec!["nbtwx-gone".into()]));
        let kept = watch.watch(vec!["nbtwx-kept".into()]);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while lock(&watch.links).len() != 1 {
            assert!(std::time::Instant::now() < deadline, "never forgotten");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(Arc::ptr_eq(
            &lock(&watch.links)[0].flag.upgrade().unwrap(),
            &kept
        ));
    }

    fn run(argv: &[&str]) {
        let done = std::process::Command::new(argv[0])
            .args(&argv[1..])
            .output()
            .unwrap();
        assert!(done.status.success(), "{argv:?}: {done:?}");
    }

    fn wait_for(what: &str, flag: &Offloads, on: bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while flag.load(Ordering::Relaxed) != on {
            assert!(std::time::Instant::now() < deadline, "{what} never seen");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn a_change_of_offloads_is_heard_before_any_sweep() {
        if !os::is_root() {
            eprintln!("SKIPPED: a namespace of its own needs root");
            return;
        }
        // In a thread of its own namespace: the veth, the watcher thread and
        // the commands are there, and go with it.
        std::thread::spawn(|| {
            if let Err(e) = os::enter_new_net_namespace() {
                eprintln!("SKIPPED: no namespace of its own ({e})");
                return;
            }
            run(&[
                "ip", "link", "add", "nbtw0", "type", "veth", "peer", "name", "nbtw1",
            ]);
            let off = ["tso", "off", "gso", "off", "gro", "off"];
            run(&[&["ethtool", "-K", "nbtw0"][..], &off].concat());
            // Heard only: the sweep, or polling if the socket could not be
            // opened, would take an hour. (The thread is left waiting when
            // the test ends; the process's end takes it.)
            let hour = Duration::from_secs(3600);
            let watch = OffloadWatch::start(hour, hour).unwrap();
            let flag = watch.watch(vec!["nbtw0".into()]);
            assert!(!flag.load(Ordering::Relaxed));
            run(&["ethtool", "-K", "nbtw0", "gso", "on"]);
            wait_for("offloads on", &flag, true);
            run(&["ethtool", "-K", "nbtw0", "gso", "off"]);
            wait_for("offloads off", &flag, false);
            // A removed interface cannot be read: on, as for any link the
            // watcher cannot read.
            run(&["ip", "link", "del", "nbtw0"]);
            wait_for("the interface's removal", &flag, true);
        })
        .join()
        .unwrap();
    }
}
