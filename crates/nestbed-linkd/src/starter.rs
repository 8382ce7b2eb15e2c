//! Starting a link's ports off the control thread. Setting up a port's
//! packet rings waits for the kernel (an RCU grace period per ring, some
//! 25 ms a port here, however small the rings), so a daemon that did it
//! while answering `add_link`, one port after the other under its lock,
//! made a 100-link swap-in wait seconds. Here each port starts on a thread
//! of its own: concurrent set-ups share the kernel's waits (56 ports in
//! about 90 ms instead of 1.5 s). The link's worker serves its state,
//! pipes and trace from the start, and its frames once the started sockets
//! are attached; a socket is bound only once its rings exist, so no frame
//! goes through another path first, and none is read twice.

use std::io;
use std::sync::mpsc::{channel, Receiver};
use std::time::Duration;

use crate::os::{PacketSocket, Unstarted};
use crate::worker::{Command, Mailbox};

/// How long a link's start may take before it is reported failed (the
/// kernel's waits grow with the machine's load, never to this).
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// Starts `sockets` (a link's, one per port in order) on a thread and
/// attaches them to link `id` of `worker`; the receiver gets whether the
/// link now carries frames (an error names the port that failed).
pub fn start(
    id: u64,
    sockets: Vec<Unstarted>,
    worker: Mailbox,
) -> io::Result<Receiver<Result<(), String>>> {
    let (done, result) = channel();
    std::thread::Builder::new()
        .name("linkd-start".into())
        .spawn(move || {
            let started = start_all(sockets);
            let (tx, rx) = channel();
            let attached = worker.send(Command::Attach(id, started, tx)).and_then(|_| {
                rx.recv_timeout(START_TIMEOUT)
                    .map_err(|_| "worker thread did not answer".to_string())
            });
            let (outcome, unused) = match attached {
                Ok(a) => a,
                Err(e) => (Err(e), Vec::new()),
            };
            let _ = done.send(outcome);
            // Closed here, after the answer: closing a bound packet socket
            // waits for the kernel too.
            drop(unused);
        })?;
    Ok(result)
}

/// Starts every socket at once; all of them, or the first error (the
/// others are closed).
fn start_all(sockets: Vec<Unstarted>) -> Result<Vec<PacketSocket>, String> {
    std::thread::scope(|scope| {
        let starting: Vec<_> = sockets
            .into_iter()
            .enumerate()
            .map(|(i, u)| {
                let ifname = u.ifname().to_string();
                let started = scope.spawn(move || u.start());
                (i, ifname, started)
            })
            .collect();
        starting
            .into_iter()
            .map(|(i, ifname, started)| {
                started
                    .join()
                    .unwrap_or_else(|_| Err(io::Error::other("its thread panicked")))
                    .map_err(|e| format!("field `ports[{i}].ifname`: cannot start {ifname:?}: {e}"))
            })
            .collect()
    })
}
