//! nestbed-probe: a paced UDP sender and receiver for measuring links.
//!
//! Each probe datagram starts with a 12-byte header (sequence number, burst id, send
//! timestamp on `CLOCK_MONOTONIC`, see [`header`]); the receiver turns arrivals into loss,
//! duplication, reordering and one-way delay, and can echo datagrams back for round trips.
//! `nestbed validate` uses it to measure emulated links, the controller for CBR traffic, and
//! `nestbed calibrate` for bursts with per-packet send, receive and echo logs.
//!
//! Modules, from pure to platform:
//! - [`header`]: the wire format, encode/decode.
//! - [`wire`]: bytes on the wire per datagram, what `--rate` paces.
//! - [`frame`]: whole Ethernet/IPv4/UDP frames, built and parsed, for the packet rings.
//! - [`pacing`]: the absolute send schedule and the sleep-then-spin wait, with a clock
//!   parameter (tested on a fake clock).
//! - [`stats`]: distributions and sequence statistics.
//! - [`send`], [`recv`]: the two roles, each returning a JSON-serializable summary.
//! - [`os`]: clock, sleeps, socket options, `recvmsg` and packet rings (`send --ring`,
//!   `recv --ring`) through `libc`; the only module allowed `unsafe`.
//! - [`error`]: the one error type (usage errors exit 2, system failures 1).
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod error;
pub mod frame;
pub mod header;
pub mod os;
pub mod pacing;
pub mod recv;
pub mod send;
pub mod stats;
pub mod wire;

pub use error::ProbeError;
