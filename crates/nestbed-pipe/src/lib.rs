//! The sans-I/O pipe core of nestbed's link emulator.
//!
//! Every direction of every emulated link is a [`Pipe`]: packets go through
//! **loss → queue → bandwidth → delay → out**.
//!
//! - [`loss`]: Bernoulli, Gilbert-Elliott (four-parameter or loss rate +
//!   mean burst length) and drop-by-ordinal.
//! - [`queue`]: DropTail in packets or bytes, with [`red`] (RED, gentle RED)
//!   ahead of it; the default limit comes from the bandwidth-delay product
//!   ([`bdp_queue_limit`]) and is reported by [`Pipe::queue_limit`].
//! - [`bandwidth`]: exact serialization time including Ethernet overhead,
//!   no rounding drift, optional token-bucket burst.
//! - [`delay`]: constant delay plus jitter (uniform, normal, pareto,
//!   paretonormal), order-preserving unless reordering is asked for;
//!   duplication and corruption.
//! - [`counters`]: packets and bytes in and out, drops by cause, queue now
//!   and at its peak.
//!
//! # No I/O, no clock
//!
//! Time is a parameter: every call takes `now` as an [`Instant`], whole
//! nanoseconds since an epoch the caller picks (virtual time in tests,
//! `CLOCK_MONOTONIC` in the daemon). Durations in parameters are `u64`
//! nanoseconds named `*_ns`. Randomness comes from a seeded PCG generator
//! owned by the pipe ([`Pipe::new`] takes the seed, [`Pipe::seed`] reports
//! it), with one stream per stage. The same parameters, seed and packet
//! arrivals give the same result on every run.
//!
//! # Driving a pipe
//!
//! ```
//! use nestbed_pipe::{Instant, Packet, Pipe, PipeParams};
//!
//! let mut params = PipeParams::default();
//! params.bandwidth.rate_bps = 10_000_000;
//! params.delay.delay_ns = 5_000_000;
//! let mut pipe = Pipe::new(params, 42).unwrap();
//!
//! pipe.enqueue(Instant::ZERO, Packet::new(vec![0; 1000]));
//! // 1000 + 24 bytes at 10 Mb/s = 819.2 µs, then 5 ms of delay.
//! let wake = pipe.next_wakeup().unwrap();
//! assert_eq!(wake.as_nanos(), 5_819_200);
//! assert!(pipe.dequeue_ready(Instant::from_nanos(5_819_199)).is_empty());
//! let out = pipe.dequeue_ready(wake);
//! assert_eq!(out.len(), 1);
//! assert_eq!(pipe.counters().packets_out, 1);
//! ```
//!
//! # Asymmetric links
//!
//! A link is two independent pipes, one per direction, each with its own
//! [`PipeParams`] and seed. Nothing is shared between directions.
//!
//! # Changing parameters at run time
//!
//! [`Pipe::set_params`] keeps the queue, the packets in flight, the counters
//! and RED's state; only packets not yet being serialized see the new
//! parameters.

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod bandwidth;
pub mod counters;
pub mod delay;
mod error;
// The one exception to `deny(unsafe_code)`: the C interface nestbed-sim calls.
#[allow(unsafe_code)]
pub mod ffi;
pub mod loss;
mod packet;
pub mod pipe;
pub mod queue;
pub mod red;
mod rng;
mod time;

pub use bandwidth::{BandwidthParams, ETHERNET_OVERHEAD_BYTES, MAX_RATE_BPS};
pub use counters::{Counters, DropCause, DropCounters};
pub use delay::{inverse_normal_cdf, DelayParams, Delivery, JitterDistribution, MAX_DELAY_NS};
pub use error::{ParamError, ParamErrors};
pub use loss::{GilbertElliott, LossModel};
pub use packet::Packet;
pub use pipe::{EnqueueOutcome, Pipe, PipeParams};
pub use queue::{
    bdp_queue_limit, QueueLimit, QueueParams, FULL_FRAME_BYTES, FULL_FRAME_WIRE_BYTES,
    MIN_DEFAULT_QUEUE_PACKETS,
};
pub use red::RedParams;
pub use time::Instant;
