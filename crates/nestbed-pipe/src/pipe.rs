//! The pipe: one direction of one link, loss → queue → bandwidth → delay → out.
//!
//! A pipe is a passive state machine. The caller hands it packets with
//! [`Pipe::enqueue`], asks for the packets whose time has come with
//! [`Pipe::dequeue_ready`], and sleeps until [`Pipe::next_wakeup`]. Between
//! calls nothing happens; each call first brings the pipe up to `now`.
//!
//! A link is two pipes, one per direction, each with its own parameters
//! (asymmetric links are just two different [`PipeParams`]) and its own
//! seed.

use rand::RngExt;
use rand_pcg::Pcg64;
use serde::{Deserialize, Serialize};

use crate::bandwidth::{BandwidthParams, Server};
use crate::counters::{Counters, DropCause};
use crate::delay::{DelayLine, DelayParams, Delivery};
use crate::error::{ParamErrors, Problems};
use crate::loss::{LossModel, LossStage};
use crate::packet::Packet;
use crate::queue::{
    bdp_queue_limit, Fifo, Plan, QueueLimit, QueueParams, Queued, FULL_FRAME_BYTES,
};
use crate::red::{Arrival, Red, Verdict};
use crate::rng::{stage_rng, STREAM_JITTER, STREAM_LOSS, STREAM_MANGLE, STREAM_RED};
use crate::time::Instant;

/// All parameters of one pipe. Every field has a default (no shaping at
/// all), unknown fields are rejected.
///
/// ```
/// # use nestbed_pipe::PipeParams;
/// let params: PipeParams = serde_json::from_str(r#"{
///     "loss": {"model": "bernoulli", "p": 0.001},
///     "drop_ordinals": [17],
///     "queue": {"limit": {"packets": 100}},
///     "bandwidth": {"rate_bps": 10000000},
///     "delay": {"delay_ns": 5000000, "jitter_ns": 100000, "distribution": "normal"}
/// }"#).unwrap();
/// params.validate().unwrap();
/// ```
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipeParams {
    /// Random loss model.
    #[serde(default)]
    pub loss: LossModel,
    /// 1-based ordinals of packets to drop, counted over all packets that
    /// ever entered the pipe (changing parameters does not restart the count).
    #[serde(default)]
    pub drop_ordinals: Vec<u64>,
    /// Queue limit and discipline.
    #[serde(default)]
    pub queue: QueueParams,
    /// Link rate and burst.
    #[serde(default)]
    pub bandwidth: BandwidthParams,
    /// Delay, jitter, reordering, duplication, corruption.
    #[serde(default)]
    pub delay: DelayParams,
}

impl PipeParams {
    /// Checks every parameter and reports all problems at once, each
    /// naming its field.
    pub fn validate(&self) -> Result<(), ParamErrors> {
        let mut problems = Problems::default();
        self.loss.check("loss", &mut problems);
        for (i, &ordinal) in self.drop_ordinals.iter().enumerate() {
            if ordinal == 0 {
                problems.push(
                    format!("drop_ordinals[{i}]"),
                    "ordinals start at 1 (the first packet to enter the pipe)",
                );
            }
        }
        self.queue.check(&mut problems);
        self.bandwidth.check(&mut problems);
        self.delay.check(&mut problems);
        problems.into_result()
    }

    /// The limit used when none is given: the bandwidth-delay product in
    /// full-sized frames ([`bdp_queue_limit`]) for a round-trip time of
    /// twice this pipe's `delay_ns` (that is, assuming the reverse pipe has
    /// the same delay), at least 50 packets. A caller that knows the real
    /// round-trip time should compute the limit itself and set it.
    pub fn default_queue_limit(&self) -> QueueLimit {
        QueueLimit::Packets(bdp_queue_limit(
            self.bandwidth.rate_bps,
            self.delay.delay_ns.saturating_mul(2),
            FULL_FRAME_BYTES + self.bandwidth.overhead_bytes,
        ))
    }

    /// Whether some stage decides packet by packet: random or ordinal loss,
    /// RED, jitter, duplication or corruption. A packet that stands for
    /// several wire frames (a super-frame) must then be offered as those
    /// frames, one by one, for the outcome to be theirs ([`Pipe::takes_whole`]).
    pub fn acts_per_packet(&self) -> bool {
        let loss = match self.loss {
            LossModel::None => false,
            LossModel::Bernoulli { p } => p > 0.0,
            LossModel::GilbertElliott { .. } | LossModel::GilbertBurst { .. } => true,
        };
        let d = &self.delay;
        loss || !self.drop_ordinals.is_empty()
            || self.queue.red.is_some()
            || d.jitter_ns > 0
            || d.duplicate > 0.0
            || d.corrupt > 0.0
    }

    /// The limit in force: the configured one, else [`Self::default_queue_limit`].
    pub fn queue_limit(&self) -> QueueLimit {
        self.queue
            .limit
            .unwrap_or_else(|| self.default_queue_limit())
    }
}

/// What became of a packet handed to [`Pipe::enqueue`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EnqueueOutcome {
    /// The packet is in the queue and will come out of `dequeue_ready`.
    Accepted {
        /// Its 1-based ordinal.
        ordinal: u64,
    },
    /// The packet was dropped.
    Dropped {
        /// Its 1-based ordinal.
        ordinal: u64,
        /// Why.
        cause: DropCause,
    },
}

impl EnqueueOutcome {
    /// The packet's 1-based ordinal.
    pub fn ordinal(&self) -> u64 {
        match *self {
            EnqueueOutcome::Accepted { ordinal } | EnqueueOutcome::Dropped { ordinal, .. } => {
                ordinal
            }
        }
    }

    /// Whether the packet was accepted.
    pub fn is_accepted(&self) -> bool {
        matches!(self, EnqueueOutcome::Accepted { .. })
    }

    /// The drop cause, if dropped.
    pub fn drop_cause(&self) -> Option<DropCause> {
        match *self {
            EnqueueOutcome::Accepted { .. } => None,
            EnqueueOutcome::Dropped { cause, .. } => Some(cause),
        }
    }
}

/// One direction of an emulated link.
///
/// Time must not go backwards: a `now` earlier than one already seen is
/// treated as the latest time seen.
#[derive(Debug)]
pub struct Pipe {
    params: PipeParams,
    seed: u64,
    limit: QueueLimit,
    /// Latest time seen.
    now: Instant,
    /// Ordinal of the last packet that entered.
    ordinal: u64,
    loss: LossStage,
    fifo: Fifo,
    red: Option<Red>,
    red_rng: Pcg64,
    server: Server,
    /// When the queue last became empty (None: busy, or never used).
    idle_since: Option<Instant>,
    line: DelayLine,
    jitter_rng: Pcg64,
    mangle_rng: Pcg64,
    counters: Counters,
}

impl Pipe {
    /// A pipe with `params`, drawing all its randomness from `seed`.
    ///
    /// Each stage has its own random stream derived from the seed, so the
    /// same seed and the same packets at the same times give the same
    /// result, and e.g. adding jitter does not change which packets are
    /// lost.
    pub fn new(params: PipeParams, seed: u64) -> Result<Pipe, ParamErrors> {
        params.validate()?;
        Ok(Pipe {
            limit: params.queue_limit(),
            seed,
            now: Instant::ZERO,
            ordinal: 0,
            loss: LossStage::new(
                &params.loss,
                &params.drop_ordinals,
                stage_rng(seed, STREAM_LOSS),
            ),
            fifo: Fifo::default(),
            red: params.queue.red.as_ref().map(Red::new),
            red_rng: stage_rng(seed, STREAM_RED),
            server: Server::new(&params.bandwidth),
            idle_since: None,
            line: DelayLine::default(),
            jitter_rng: stage_rng(seed, STREAM_JITTER),
            mangle_rng: stage_rng(seed, STREAM_MANGLE),
            counters: Counters::default(),
            params,
        })
    }

    /// The seed this pipe was created with (record it to reproduce a run).
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The parameters in force.
    pub fn params(&self) -> &PipeParams {
        &self.params
    }

    /// The queue limit in force (configured or derived; announce it).
    pub fn queue_limit(&self) -> QueueLimit {
        self.limit
    }

    /// RED's current average queue (packets, or bytes with
    /// `queue_in_bytes`), if RED is on.
    pub fn red_average(&self) -> Option<f64> {
        self.red.as_ref().map(Red::average)
    }

    /// The counters, as of the last `enqueue`, `dequeue_ready` or
    /// `set_params` call.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Whether `packet`, offered at `now`, meets the fate its wire frames
    /// would meet one by one if it is offered whole: it is one frame, or no
    /// stage acts per packet ([`PipeParams::acts_per_packet`]) and the queue
    /// has room for all its frames. Otherwise the caller offers its frames
    /// one by one, so a full queue takes the first ones and drops the rest.
    ///
    /// A super-frame offered whole is in the queue until its last frame has
    /// left, and comes out with it: its first frames leave as late as its
    /// last, at most its serialization time later than one by one.
    pub fn takes_whole(&mut self, now: Instant, packet: &Packet) -> bool {
        if packet.segments() <= 1 {
            return true;
        }
        let now = self.clock(now);
        self.advance(now);
        !self.params.acts_per_packet()
            && !self
                .fifo
                .would_overflow(self.limit, packet.wire_len(), packet.segments())
    }

    /// Offers a packet to the pipe at `now`.
    pub fn enqueue(&mut self, now: Instant, packet: Packet) -> EnqueueOutcome {
        let now = self.clock(now);
        self.advance(now);
        self.ordinal += 1;
        let ordinal = self.ordinal;
        let size = packet.wire_len();
        self.counters.packets_in += 1;
        self.counters.bytes_in += u64::from(size);

        if let Some(cause) = self.loss.decide(ordinal) {
            return self.drop(ordinal, cause);
        }

        let verdict = match &mut self.red {
            None => Verdict::Accept,
            Some(red) => red.on_arrival(
                Arrival {
                    queue_packets: self.fifo.frames(),
                    queue_bytes: self.fifo.bytes(),
                    idle_ns: if self.fifo.is_empty() {
                        self.idle_since.map(|t| now.nanos_since(t))
                    } else {
                        None
                    },
                    size,
                    rate_bps: self.params.bandwidth.rate_bps,
                },
                &mut self.red_rng,
            ),
        };
        let cause = if self
            .fifo
            .would_overflow(self.limit, size, packet.segments())
        {
            if let Some(red) = &mut self.red {
                red.reset_count();
            }
            Some(DropCause::QueueFull)
        } else {
            match verdict {
                Verdict::Accept => None,
                Verdict::EarlyDrop => Some(DropCause::RedEarly),
                Verdict::ForcedDrop => Some(DropCause::RedForced),
            }
        };
        if let Some(cause) = cause {
            return self.drop(ordinal, cause);
        }

        self.fifo.push(Queued {
            packet,
            ordinal,
            arrived: now,
            plan: None,
        });
        self.idle_since = None;
        let c = &mut self.counters;
        c.queue_peak_packets = c.queue_peak_packets.max(self.fifo.frames());
        c.queue_peak_bytes = c.queue_peak_bytes.max(self.fifo.bytes());
        self.advance(now);
        EnqueueOutcome::Accepted { ordinal }
    }

    /// Takes out every packet due at or before `now`, in due-time order
    /// (ties in the order they entered the delay stage).
    pub fn dequeue_ready(&mut self, now: Instant) -> Vec<Delivery> {
        let mut out = Vec::new();
        self.dequeue_ready_into(now, &mut out);
        out
    }

    /// Like [`Self::dequeue_ready`], appending to `out` (to reuse its
    /// allocation); returns how many packets were appended.
    pub fn dequeue_ready_into(&mut self, now: Instant, out: &mut Vec<Delivery>) -> usize {
        let now = self.clock(now);
        self.advance(now);
        let before = out.len();
        while let Some(delivery) = self.line.pop_due(now) {
            self.counters.packets_out += 1;
            self.counters.bytes_out += u64::from(delivery.packet.wire_len());
            out.push(delivery);
        }
        self.counters.delay_line_packets = self.line.len();
        out.len() - before
    }

    /// The earliest time at which `dequeue_ready` may have something to
    /// hand out, or `None` if the pipe is empty. Calling `dequeue_ready` at
    /// exactly this time never finds a packet already late.
    pub fn next_wakeup(&self) -> Option<Instant> {
        let mut next = self.line.next_due();
        let mut consider = |t: Instant| next = Some(next.map_or(t, |n| n.min(t)));
        if let Some(head) = self.fifo.front() {
            match head.plan {
                Some(plan) => {
                    consider(plan.due);
                    if let Some(due) = plan.duplicate_due {
                        consider(due);
                    }
                    // A packet behind the head may overtake it; its times are
                    // fixed when the head leaves, so wake up then.
                    if self.params.delay.reorder && self.fifo.len() > 1 {
                        consider(plan.transmitted);
                    }
                }
                None => consider(head.arrived),
            }
        }
        next
    }

    /// Changes the parameters at `now`, keeping the queue, the packets in
    /// flight, the counters, RED's average and the random streams.
    ///
    /// Packets that finished serialization before `now` keep their times.
    /// The packet being serialized keeps its planned times; the packets
    /// behind it get the new rate, delay and so on. A smaller queue limit
    /// drops nothing already queued. Invalid parameters change nothing.
    pub fn set_params(&mut self, now: Instant, params: PipeParams) -> Result<(), ParamErrors> {
        params.validate()?;
        let now = self.clock(now);
        self.advance(now);
        self.loss.set_params(&params.loss, &params.drop_ordinals);
        match (&mut self.red, &params.queue.red) {
            (Some(red), Some(p)) => red.set_params(p),
            (None, Some(p)) => self.red = Some(Red::new(p)),
            (_, None) => self.red = None,
        }
        self.server.set_params(&params.bandwidth);
        self.limit = params.queue_limit();
        self.params = params;
        Ok(())
    }

    fn clock(&mut self, now: Instant) -> Instant {
        self.now = self.now.max(now);
        self.now
    }

    fn drop(&mut self, ordinal: u64, cause: DropCause) -> EnqueueOutcome {
        self.counters.drops.count(cause);
        EnqueueOutcome::Dropped { ordinal, cause }
    }

    /// Moves every packet whose serialization ended by `now` into the delay
    /// line, and leaves the new head (if any) planned.
    fn advance(&mut self, now: Instant) {
        loop {
            self.plan_head();
            let plan = match self.fifo.front().and_then(|head| head.plan) {
                Some(plan) if plan.transmitted <= now => plan,
                _ => break,
            };
            let Some(entry) = self.fifo.pop() else { break };
            if self.fifo.is_empty() {
                self.idle_since = Some(plan.transmitted);
            }
            self.release(entry, plan);
        }
        self.counters.queue_packets = self.fifo.frames();
        self.counters.queue_bytes = self.fifo.bytes();
        self.counters.delay_line_packets = self.line.len();
    }

    /// Fixes the head's transmission and due times, duplication and
    /// corruption, if not done yet.
    fn plan_head(&mut self) {
        let Some(head) = self.fifo.front_mut() else {
            return;
        };
        if head.plan.is_some() {
            return;
        }
        let transmitted =
            self.server
                .serve(head.arrived, head.packet.wire_len(), head.packet.segments());
        self.counters.busy_ns = self.server.busy_ns();
        let delay = &self.params.delay;
        let bits = head.packet.data().len().saturating_mul(8);
        let corrupt_bit =
            (delay.corrupt > 0.0 && bits > 0 && self.mangle_rng.random_bool(delay.corrupt))
                .then(|| self.mangle_rng.random_range(0..bits));
        let duplicate = delay.duplicate > 0.0 && self.mangle_rng.random_bool(delay.duplicate);
        let due = self.line.due_for(transmitted, delay, &mut self.jitter_rng);
        let duplicate_due =
            duplicate.then(|| self.line.due_for(transmitted, delay, &mut self.jitter_rng));
        head.plan = Some(Plan {
            transmitted,
            due,
            duplicate_due,
            corrupt_bit,
        });
    }

    /// Puts a packet that left the bandwidth stage (and its duplicate)
    /// into the delay line.
    fn release(&mut self, entry: Queued, plan: Plan) {
        let Queued {
            mut packet,
            ordinal,
            arrived,
            ..
        } = entry;
        let duplicate = plan.duplicate_due.map(|due| Delivery {
            packet: packet.clone(),
            ordinal,
            arrived,
            transmitted: plan.transmitted,
            due,
            duplicate: true,
            corrupted: false,
        });
        let corrupted = plan.corrupt_bit.is_some_and(|bit| packet.flip_bit(bit));
        if corrupted {
            self.counters.corrupted += 1;
        }
        self.line.push(Delivery {
            packet,
            ordinal,
            arrived,
            transmitted: plan.transmitted,
            due: plan.due,
            duplicate: false,
            corrupted,
        });
        if let Some(copy) = duplicate {
            self.counters.duplicates += 1;
            self.line.push(copy);
        }
    }
}
