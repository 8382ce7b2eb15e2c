"""linktest's statistical tests and sample sizes.

Every level tests many directions at once, so each test runs at α / m (Bonferroni), where m is
the number of tests in the level and ALPHA = 0.01 the chance that a correct experiment shows
any failure at all in that level.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy import stats

ALPHA = 0.01

# Latency: nestbed's one-way delay error measured by `nestbed validate` is under 60 µs on
# average with a spread of up to about 100 µs (docs/benchmarks.md, Table 1), probe stacks
# included. A direction passes unless its mean delay is shown to be off by more than
# DELAY_TOLERANCE_S plus DELAY_TOLERANCE_REL of the expected delay (timer slop on long delays)
# plus any configured jitter.
DELAY_TOLERANCE_S = 250e-6
DELAY_TOLERANCE_REL = 0.01

# Loss on directions configured without loss: hosts may drop a few packets under load; a rate
# shown to exceed ZERO_LOSS_TOLERANCE fails.
ZERO_LOSS_TOLERANCE = 0.001
# Lossy directions: enough packets that a loss rate off by a factor of 2 (or half) is caught
# with probability POWER, within MAX_LOSS_PACKETS.
POWER = 0.9
MAX_LOSS_PACKETS = 20_000
ZERO_LOSS_PACKETS = 2_000


@dataclass(frozen=True)
class Verdict:
    passed: bool
    reason: str = ""


def per_test_alpha(tests: int) -> float:
    return ALPHA / max(tests, 1)


def delay_tolerance(expected_s: float, jitter_s: float) -> float:
    return DELAY_TOLERANCE_S + DELAY_TOLERANCE_REL * expected_s + jitter_s


def delay_test(
    mean_s: float,
    stdev_s: float,
    n: int,
    expected_s: float,
    tolerance_s: float,
    alpha: float,
    median_s: float | None = None,
) -> Verdict:
    """Fails when the mean delay is significantly (one-sided t-test at ``alpha`` on each side)
    more than ``tolerance_s`` away from ``expected_s``: H0 is |μ − expected| ≤ tolerance.

    A shared host delays a few probes by milliseconds now and then (a receiver not scheduled
    at once), which pulls the mean and widens the spread without saying anything about the
    link. So a mean that fails while the ``median_s`` is within the tolerance passes, and says
    why: a link whose delay is wrong moves every probe, its median included.
    """
    if n < 2:
        return Verdict(False, f"only {n} probe arrived")
    se = max(stdev_s, 1e-9) / math.sqrt(n)
    critical = stats.t.ppf(1 - alpha, n - 1)
    excess = abs(mean_s - expected_s) - tolerance_s
    if excess / se > critical:
        if median_s is not None and abs(median_s - expected_s) <= tolerance_s:
            return Verdict(
                True,
                f"median {median_s * 1e3:.3f} ms within the tolerance; a few late probes "
                f"(the host, not the link) pulled the mean to {mean_s * 1e3:.3f} ms",
            )
        side = "more" if mean_s > expected_s else "less"
        return Verdict(
            False,
            f"mean {mean_s * 1e3:.3f} ms is {side} than {expected_s * 1e3:.3f} ms ± "
            f"{tolerance_s * 1e3:.3f} ms (t = {excess / se:.1f} > {critical:.1f}, n = {n})",
        )
    return Verdict(True)


def lag1_correlation(p_good_bad: float, r_bad_good: float) -> float:
    """Lag-1 autocorrelation of the loss indicator of a Gilbert-Elliott chain (bad state loses
    everything, good state nothing): 1 − p − r."""
    return 1 - p_good_bad - r_bad_good


def loss_packets(p: float, alpha: float, correlation: float = 0.0) -> int:
    """Packets needed so that a two-sided test at ``alpha`` detects a true loss of 2p (or p/2)
    with probability POWER (normal approximation; bursty loss inflates the variance by
    (1 + ρ)/(1 − ρ), the Markov-chain central limit factor)."""
    if p <= 0:
        return ZERO_LOSS_PACKETS
    inflation = (1 + correlation) / (1 - correlation) if correlation < 1 else math.inf
    z_a, z_b = stats.norm.ppf(1 - alpha / 2), stats.norm.ppf(POWER)
    needed = 0
    for other in (min(2 * p, 1.0), p / 2):
        if other == p:
            continue
        spread = z_a * math.sqrt(p * (1 - p)) + z_b * math.sqrt(other * (1 - other))
        needed = max(needed, math.ceil(inflation * (spread / (other - p)) ** 2))
    return min(max(needed, 100), MAX_LOSS_PACKETS)


def loss_test(lost: int, sent: int, p: float, alpha: float, correlation: float = 0.0) -> Verdict:
    """Binomial test of the loss count against the configured probability ``p``: two-sided
    exact test for independent loss; for bursty loss a normal test with the Markov-chain
    variance; for p = 0 a one-sided test against ZERO_LOSS_TOLERANCE."""
    if sent == 0:
        return Verdict(False, "no packet could be sent")
    observed = lost / sent
    if p <= 0:
        pvalue = stats.binomtest(lost, sent, ZERO_LOSS_TOLERANCE, alternative="greater").pvalue
        if pvalue < alpha:
            return Verdict(
                False, f"lost {lost} of {sent} ({observed:.2%}) on a direction without loss"
            )
        return Verdict(True)
    if correlation:
        sd = math.sqrt(p * (1 - p) / sent * (1 + correlation) / (1 - correlation))
        pvalue = 2 * stats.norm.sf(abs(observed - p) / sd) if sd > 0 else 0.0
        test = "normal test, bursty loss"
    else:
        pvalue = stats.binomtest(lost, sent, p).pvalue
        test = "exact binomial test"
    if pvalue < alpha:
        return Verdict(
            False,
            f"lost {lost} of {sent} ({observed:.2%}), configured {p:.2%} "
            f"({test}, p = {pvalue:.1e})",
        )
    return Verdict(True)


def delivery_copies(delivered: float, alpha: float, cap: int = 200) -> int:
    """Datagrams to send so that a route that works delivers at least one of them with
    probability 1 − alpha, when each arrives with probability ``delivered``."""
    if delivered >= 1:
        return 2  # one spare against a drop by the host
    if delivered <= 0:
        return 2
    return min(max(math.ceil(math.log(alpha) / math.log(1 - delivered)), 2), cap)


# Bandwidth: linkd and nestbed-probe count a frame the same way (payload + 42 header bytes +
# 24 bytes of wire overhead), so framing adds no error to the rate a frame's bits over its
# serialization time give. What is left is the timing of arrivals: the median of thousands of
# gaps between consecutive frames is exact to well under a microsecond against gaps of 120 µs
# (100 Mb/s) or more, and linkd releases frames within its spin window; 1 % covers the rest.
RATE_TOLERANCE = 0.01
