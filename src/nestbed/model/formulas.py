"""What the IR's values imply, as plain functions of numbers: the models use them, and so does
what reads the IR as JSON without loading the models (``nestbed show``)."""

from __future__ import annotations

import math


def stationary_loss(p: float, r: float, loss_bad: float, loss_good: float) -> float:
    """The long-run loss probability of a Gilbert-Elliott channel: p = P(good→bad),
    r = P(bad→good), and the loss probability in each state."""
    if p + r == 0:
        return loss_good
    bad = p / (p + r)
    return bad * loss_bad + (1 - bad) * loss_good


# nestbed-linkd's default queue limit (crates/nestbed-pipe/src/queue.rs, bdp_queue_limit):
# the bandwidth-delay product for twice the pipe's delay, in full frames on the wire, and
# never below ns-2's 50 packets. ns-2 runs and simulated links use it too, so a file that
# sets no limit means the same queue wherever its links run.
_MIN_QUEUE_PACKETS = 50
_FULL_FRAME_WIRE_BYTES = 1514 + 24


def default_queue_packets(bandwidth_bps: float, delay_s: float) -> int:
    """The queue limit of a pipe of this rate and one-way delay whose file gives none."""
    if bandwidth_bps == 0:
        return _MIN_QUEUE_PACKETS
    bdp = bandwidth_bps * 2 * delay_s / (_FULL_FRAME_WIRE_BYTES * 8)
    return max(_MIN_QUEUE_PACKETS, math.ceil(bdp - 1e-9))
