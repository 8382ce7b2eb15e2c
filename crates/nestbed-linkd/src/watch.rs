//! Which links have an interface with a segmentation or receive offload
//! on, read on a thread of its own every 100 ms and handed to the workers
//! as one flag a link.
//!
//! Reading an interface's offloads (`SIOCETHTOOL`) takes the kernel's rtnl
//! lock, which whatever changes the machine's interfaces holds: another
//! experiment's swap, or the kernel removing a namespace (measured under
//! namespace churn: up to 2.1 ms a read). A worker that read them itself
//! was held that long while its frames were due. Here a worker only loads
//! an atomic flag, which never waits: a lock shared with a thread that
//! waits for rtnl (or for a core) would let it wait after all.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use crate::os;

/// Whether some interface of a link has offloads on, as last read; shared
/// by the link's worker (which loads it) and the watcher (which stores it).
pub type Offloads = Arc<AtomicBool>;

/// How often the interfaces are read.
pub const PERIOD: Duration = Duration::from_millis(100);

/// One link's interfaces and its flag; forgotten once the worker drops the
/// flag (the link is gone).
struct Watched {
    ifnames: Vec<String>,
    flag: Weak<AtomicBool>,
}

/// The watcher thread's list; the thread ends once this is dropped.
pub struct OffloadWatch {
    links: Arc<Mutex<Vec<Watched>>>,
}

impl OffloadWatch {
    /// Starts the thread reading the watched interfaces every `period`.
    pub fn start(period: Duration) -> io::Result<OffloadWatch> {
        let links = Arc::new(Mutex::new(Vec::new()));
        let list = Arc::downgrade(&links);
        std::thread::Builder::new()
            .name("linkd-offloads".into())
            .spawn(move || follow(&list, period))?;
        Ok(OffloadWatch { links })
    }

    /// A flag for a link of these interfaces, read now (on the caller's
    /// thread) and then by the watcher.
    pub fn watch(&self, ifnames: Vec<String>) -> Offloads {
        let flag = Arc::new(AtomicBool::new(any_on(&ifnames)));
        let watched = Watched {
            ifnames,
            flag: Arc::downgrade(&flag),
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

/// The watcher's loop: each round reads a copy of the list, so the list's
/// lock is never held while the kernel is asked.
fn follow(list: &Weak<Mutex<Vec<Watched>>>, period: Duration) {
    loop {
        std::thread::sleep(period);
        let Some(links) = list.upgrade() else {
            return;
        };
        let round: Vec<(Vec<String>, Offloads)> = {
            let mut links = lock(&links);
            links.retain(|w| w.flag.strong_count() > 0);
            links
                .iter()
                .filter_map(|w| Some((w.ifnames.clone(), w.flag.upgrade()?)))
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
        let watch = OffloadWatch::start(Duration::from_millis(1)).unwrap();
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
        let watch = OffloadWatch::start(Duration::from_millis(1)).unwrap();
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
}
