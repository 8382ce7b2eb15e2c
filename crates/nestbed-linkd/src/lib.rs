//! nestbed-linkd: nestbed's user-space link emulator daemon.
//!
//! One process serves every shaped link and LAN of an experiment. Each
//! member port of a link is the host-side end of a veth pair (the other end
//! is in the node's namespace); linkd reads frames from it with an AF_PACKET
//! socket, passes them through the port's egress pipe, the link's switch
//! and the destination's ingress pipe (`nestbed_pipe::Pipe`), and sends
//! them out of the destination's host-side end when due.
//!
//! Modules, pure first:
//! - [`protocol`]: control requests (JSON lines) → [`protocol::Request`].
//! - [`dispatch`]: the registry of links; checks a request and plans the
//!   [`dispatch::Action`].
//! - [`link`]: one link's pipes, switch, state and trace, with virtual time.
//! - [`switch`]: point-to-point or learning switch.
//! - [`seed`]: per-pipe seeds from the link's seed.
//! - [`trace`]: ns-2 style event log.
//! - [`lateness`]: timer lateness histogram.
//! - [`offload`]: the virtio-net header of super-frames (GSO) and
//!   unfinished checksums, and what a super-frame is on the wire.
//! - [`segment`]: a super-frame cut into its wire frames, for pipes that
//!   act frame by frame.
//! - [`cli`]: command-line options.
//! - [`worker`]: the epoll/timerfd loop of one thread (I/O).
//! - [`watch`]: which links have offloads on, read off the workers'
//!   threads (I/O).
//! - [`daemon`]: the control socket and the workers (I/O).
//! - [`os`]: every system call; the only module allowed `unsafe`.

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod cli;
pub mod daemon;
pub mod dispatch;
pub mod lateness;
pub mod link;
pub mod offload;
pub mod os;
pub mod protocol;
pub mod seed;
pub mod segment;
pub mod starter;
pub mod switch;
pub mod trace;
pub mod watch;
pub mod worker;
