"""How far each host's clock is from the controlling machine's, as NTP estimates it: a time
request to the host's agent, stamped when it leaves (t1) and returns (t4) here, answered
with the host's time (t). Of several requests, the one with the shortest round trip is
trusted most: the host read its clock somewhere inside that round trip, so its offset is
t - (t1 + t4) / 2, give or take half the round trip.

One-way delays measured across hosts carry the offset between their clocks as an error, so
a cut link tolerates an offset up to a part of its delay (``tolerance_s``).

The same estimate gives the offset between the hosts' monotonic clocks, which is what
nestbed-probe stamps its datagrams with: a one-way delay from host A to host B measured by
those stamps is off by B's offset less A's (``one_way_correction_ns``).

Pure: the samples are handed in, or asked for through a function (``measure``; the agents
answer over UDP, ``timeservice``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

SAMPLES = 8  # time requests per host at swap-in, through Dask (where UDP is not answered)
UDP_SAMPLES = 200  # time requests per host at swap-in, over UDP (a few hundred µs each)
TOLERATED_PART = 0.1  # of the smallest delay of a cut link
TOLERANCE_FLOOR_S = 60e-6  # the delay accuracy nestbed promises on one host


@dataclass(frozen=True)
class Sample:
    """One time request: sent (``t1_ns``) and answered (``t4_ns``) on this machine's clock,
    and the host's clock when it answered (``host_ns``)."""

    t1_ns: int
    host_ns: int
    t4_ns: int

    @property
    def rtt_ns(self) -> int:
        return self.t4_ns - self.t1_ns

    @property
    def offset_ns(self) -> float:
        return self.host_ns - (self.t1_ns + self.t4_ns) / 2


@dataclass(frozen=True)
class Offset:
    """A host's clock less this machine's, and how sure that is (half the round trip)."""

    offset_s: float
    rtt_s: float
    samples: int
    method: str = "udp"  # how the requests went: "udp" (timeservice) or "dask"
    monotonic_offset_s: float | None = None  # the same for the monotonic clocks, if asked

    @property
    def error_s(self) -> float:
        return self.rtt_s / 2

    def to_json(self) -> dict[str, float | int | str | None]:
        mono = self.monotonic_offset_s
        return {
            "clock_offset_s": round(self.offset_s, 9),
            "clock_error_s": round(self.error_s, 9),
            "clock_rtt_s": round(self.rtt_s, 9),
            "clock_samples": self.samples,
            "clock_method": self.method,
            "monotonic_offset_s": None if mono is None else round(mono, 9),
        }


def estimate(samples: Iterable[Sample]) -> Offset:
    """The offset from the sample with the shortest round trip (ValueError without any)."""
    found = [s for s in samples if s.rtt_ns >= 0]
    if not found:
        raise ValueError("no time sample to estimate a clock offset from")
    best = min(found, key=lambda s: s.rtt_ns)
    return Offset(best.offset_ns / 1e9, best.rtt_ns / 1e9, len(found))


def measure(
    ask: Callable[[], tuple[Sample, Sample] | None], count: int
) -> tuple[Offset, Offset] | None:
    """The offsets of the wall and the monotonic clocks from ``count`` requests (``ask``
    gives each one's samples of both clocks, or None when it was lost); None if all were."""
    answers = [a for a in (ask() for _ in range(count)) if a is not None]
    if not answers:
        return None
    wall = estimate(a[0] for a in answers)
    mono = estimate(a[1] for a in answers)
    return replace(wall, monotonic_offset_s=mono.offset_s), mono


def one_way_correction_ns(sender_offset_ns: float, receiver_offset_ns: float) -> float:
    """What to take off a one-way delay stamped by the sender's clock at one end and the
    receiver's at the other, each offset being the host's clock less this machine's."""
    return receiver_offset_ns - sender_offset_ns


def tolerance_s(cut_delays_s: Iterable[float]) -> float:
    """The clock offset the cut links tolerate: a part of the smallest one's delay, never
    below what one host promises."""
    delays = [d for d in cut_delays_s if d > 0]
    return max(TOLERATED_PART * min(delays), TOLERANCE_FLOOR_S) if delays else TOLERANCE_FLOOR_S


def warnings(offsets: dict[str, Offset], tolerated_s: float) -> list[str]:
    """One sentence for each host whose clock may be further off than tolerated."""
    found = []
    for host, o in sorted(offsets.items()):
        if abs(o.offset_s) + o.error_s <= tolerated_s:
            continue
        # Said as it is: a host measured far off, or one whose offset, small as measured,
        # is known only to within more than the tolerance (a slow or busy path to it).
        measured = f"{o.offset_s * 1e3:+.3f} ms (±{o.error_s * 1e3:.3f} ms)"
        limit = f"{tolerated_s * 1e3:.3f} ms"
        if abs(o.offset_s) > tolerated_s:
            what = f"host {host}'s clock is {measured} from this machine's, more than the {limit}"
        else:
            what = (f"host {host}'s clock is {measured} from this machine's, measured only to "
                    f"within more than the {limit}")  # fmt: skip
        found.append(
            f"{what} the cut links' delays tolerate; one-way delays across hosts may be off by "
            "as much: synchronise the hosts' clocks (chrony, PTP)"
        )
    return found
