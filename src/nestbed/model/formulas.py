"""What the IR's values imply, as plain functions of numbers: the models use them, and so does
what reads the IR as JSON without loading the models (``nestbed show``)."""

from __future__ import annotations


def stationary_loss(p: float, r: float, loss_bad: float, loss_good: float) -> float:
    """The long-run loss probability of a Gilbert-Elliott channel: p = P(good→bad),
    r = P(bad→good), and the loss probability in each state."""
    if p + r == 0:
        return loss_good
    bad = p / (p + r)
    return bad * loss_bad + (1 - bad) * loss_good
