"""Idle detection and swap-out (Emulab's idle-swap and maximum duration): from successive
samples of an active experiment's activity, whether to warn its owner or to swap it out.

An experiment is **idle** over an interval when, between two samples,

* its nodes sent fewer than ``idle_packets_per_s`` packets per second into their links (the
  link emulator's counters for shaped links, the nodes' interface counters for plain ones),
* no shell or exec session of the server was open into it, and
* none of its nodes used more than ``idle_cpu_cores`` of CPU (their cgroups' CPU time).

The default packet rate (1/s) leaves the protocols' chatter idle (ARP, routing hellos every
few seconds) but not a person's ping (a request and a reply each second). The CPU threshold
(a tenth of a core per node) leaves a node's idle daemons idle but not a program at work.

``judge`` is pure: it takes what it remembers (``IdleState``, which the server stores so a
restart forgets nothing but the last sample) and a new ``Sample``, and returns the new state
and a ``Verdict``: nothing, ``warn`` (once, ``warn_before_s`` ahead) or ``swap_out``. A swap-out
always follows a warning by at least ``warn_before_s``, even when sampling started late, and is
said again at every sample until the experiment is gone.
Defaults are Emulab's: idle 4 h, warning 30 min before, maximum duration 16 h; a project may
change them, and a leader may exempt an experiment (then neither idle time nor duration swaps
it out, though its idleness is still reported).

``ActiveSampler`` reads a real active experiment through its back end; ``FakeSampler`` is its
scripted twin for tests. ``Sessions`` counts the server's open shell and exec sessions.
"""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Protocol

from nestbed.backend.linkd import pipe_counters
from nestbed.errors import EnvironmentProblem, NestbedError, UserError
from nestbed.lifecycle.active import Active
from nestbed.store.records import ProjectSettingsRecord

HOUR_S = 3600.0
EXEC_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True, kw_only=True)
class IdleSettings:
    """A project's idle policy (Emulab's defaults); times in seconds."""

    idle_s: float = 4 * HOUR_S
    warn_before_s: float = 0.5 * HOUR_S  # 0: no warning
    max_duration_s: float | None = 16 * HOUR_S  # None: no maximum
    idle_packets_per_s: float = 1.0
    idle_cpu_cores: float = 0.1  # per node

    def __post_init__(self) -> None:
        if not self.idle_s > 0:
            raise UserError(f"idle setting idle_s must be above 0, not {self.idle_s}")
        if not 0 <= self.warn_before_s < self.idle_s:
            raise UserError(
                f"idle setting warn_before_s must be at least 0 and below idle_s "
                f"({self.idle_s:g}), not {self.warn_before_s}"
            )
        if self.max_duration_s is not None and not self.max_duration_s > self.warn_before_s:
            raise UserError(
                f"idle setting max_duration_s must be above warn_before_s, not "
                f"{self.max_duration_s}"
            )
        if self.idle_packets_per_s < 0 or self.idle_cpu_cores < 0:
            raise UserError(
                "idle settings idle_packets_per_s and idle_cpu_cores must not be negative"
            )


def idle_settings(default: IdleSettings, own: ProjectSettingsRecord) -> IdleSettings:
    """The idle settings of a project: its own where set, else the server's ``default``
    (a maximum duration of 0: none)."""
    changes: dict[str, Any] = {}
    if own.idle_s is not None:
        changes["idle_s"] = own.idle_s
    if own.warn_before_s is not None:
        changes["warn_before_s"] = own.warn_before_s
    if own.max_duration_s is not None:
        changes["max_duration_s"] = own.max_duration_s or None
    return replace(default, **changes)


@dataclass(frozen=True, slots=True)
class Sample:
    """An experiment's activity counters at one moment (cumulative, except ``sessions``)."""

    t_s: float  # the server's Unix clock
    packets: int  # sent by the nodes into their links, since swap-in
    bytes: int
    cpu_s: Mapping[str, float]  # CPU seconds per node since swap-in (none without a cgroup)
    sessions: int  # shell and exec sessions open now or since the last sample

    def to_dict(self) -> dict[str, Any]:
        return {"t_s": self.t_s, "packets": self.packets, "bytes": self.bytes,
                "cpu_s": dict(self.cpu_s), "sessions": self.sessions}  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Sample:
        return cls(data["t_s"], data["packets"], data["bytes"], dict(data["cpu_s"]),
                   data["sessions"])  # fmt: skip


class Action(StrEnum):
    WARN = "warn"
    SWAP_OUT = "swap_out"


class Why(StrEnum):
    IDLE = "idle"
    DURATION = "duration"


@dataclass(frozen=True, slots=True, kw_only=True)
class IdleState:
    """What ``judge`` remembers of an experiment between samples; the server stores it."""

    swapped_in_at_s: float
    idle_since_s: float | None = None  # None: busy at the last look (or not yet judged)
    warned_idle_at_s: float | None = None  # warned of an idle swap-out, this idle spell
    warned_duration_at_s: float | None = None
    last: Sample | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "swapped_in_at_s": self.swapped_in_at_s, "idle_since_s": self.idle_since_s,
            "warned_idle_at_s": self.warned_idle_at_s,
            "warned_duration_at_s": self.warned_duration_at_s,
            "last": self.last.to_dict() if self.last else None,
        }  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> IdleState:
        last = data.get("last")
        return cls(
            swapped_in_at_s=data["swapped_in_at_s"], idle_since_s=data.get("idle_since_s"),
            warned_idle_at_s=data.get("warned_idle_at_s"),
            warned_duration_at_s=data.get("warned_duration_at_s"),
            last=Sample.from_dict(last) if last else None,
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class Verdict:
    """What to do now, and why."""

    action: Action | None
    why: Why | None = None
    reason: str = ""  # for the owner, after "experiment NAME: "
    idle_for_s: float = 0.0  # how long it has been idle; 0 when busy
    busy: str = ""  # what made the last interval busy; "" when it was idle or not judged


def activity(before: Sample, after: Sample, settings: IdleSettings) -> str:
    """What made the interval between two samples busy, as a phrase; "" when it was idle.

    A counter that went down was reset (the link emulator restarted): what it counts now is
    all new. A node missing before is judged on its whole count (so it looks busy)."""
    if after.sessions:
        return f"{after.sessions} session{'s' if after.sessions > 1 else ''} open"
    span = after.t_s - before.t_s
    if span <= 0:
        return ""
    packets = _grown(before.packets, after.packets)
    if packets / span > settings.idle_packets_per_s:
        return f"{packets / span:.1f} packets/s sent into its links"
    for node, cpu in sorted(after.cpu_s.items()):
        cores = _grown(before.cpu_s.get(node, 0.0), cpu) / span
        if cores > settings.idle_cpu_cores:
            return f"node {node} used {cores:.2f} cores"
    return ""


def _grown(before: float, after: float) -> float:
    return after - before if after >= before else after


def judge(
    state: IdleState, sample: Sample, settings: IdleSettings, *, exempt: bool = False
) -> tuple[IdleState, Verdict]:
    """The state after ``sample`` and what to do now (module docstring)."""
    t = sample.t_s
    idle_since = state.idle_since_s
    # With nothing to compare with yet (the first sample), only an open session says anything.
    busy = activity(state.last or sample, sample, settings)
    if not busy and idle_since is None and state.last is not None:
        idle_since = state.last.t_s
    if busy:
        idle_since = None
    state = replace(
        state,
        idle_since_s=idle_since,
        warned_idle_at_s=state.warned_idle_at_s if idle_since is not None else None,
        last=sample,
    )
    idle_for = t - idle_since if idle_since is not None else 0.0
    if exempt:
        # Warnings given before the exemption do not count once it is withdrawn.
        state = replace(state, warned_idle_at_s=None, warned_duration_at_s=None)
        return state, Verdict(None, idle_for_s=idle_for, busy=busy)
    found: list[tuple[IdleState, Verdict]] = []  # the maximum duration first
    if settings.max_duration_s is not None:
        found.append(_deadline(state, t, Why.DURATION, state.swapped_in_at_s,
                               settings.max_duration_s, settings))  # fmt: skip
    if idle_since is not None:
        found.append(_deadline(state, t, Why.IDLE, idle_since, settings.idle_s, settings))
    # A swap-out goes before a warning; one verdict at a time (another warning comes next time).
    acted = [(s, v) for s, v in found if v.action is not None]
    acted.sort(key=lambda sv: sv[1].action is not Action.SWAP_OUT)
    if acted:
        state, verdict = acted[0]
        return state, replace(verdict, idle_for_s=idle_for, busy=busy)
    return state, Verdict(None, idle_for_s=idle_for, busy=busy)


def _deadline(
    state: IdleState, t: float, why: Why, since: float, limit_s: float, settings: IdleSettings
) -> tuple[IdleState, Verdict]:
    """Warn once ``warn_before_s`` before ``since + limit_s``; swap out at it, but never less
    than ``warn_before_s`` after the warning."""
    warned = state.warned_idle_at_s if why is Why.IDLE else state.warned_duration_at_s
    warn = settings.warn_before_s
    elapsed = t - since
    if elapsed >= limit_s and (warn == 0 or (warned is not None and t - warned >= warn)):
        return state, Verdict(Action.SWAP_OUT, why, _swap_reason(why, elapsed))
    if warn > 0 and warned is None and elapsed >= limit_s - warn:
        field_ = "warned_idle_at_s" if why is Why.IDLE else "warned_duration_at_s"
        due = max(since + limit_s, t + warn) - t
        warning = Verdict(Action.WARN, why, _warn_reason(why, elapsed, due))
        return replace(state, **{field_: t}), warning
    return state, Verdict(None)


def _hours(seconds: float) -> str:
    """A span as a person reads it: seconds below a minute (a project's short threshold
    read "0 min"), minutes below an hour, hours above."""
    if seconds < 59.5:
        return f"{max(seconds, 0):.0f} s"
    if seconds < HOUR_S:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / HOUR_S:.1f} h"


def _swap_reason(why: Why, elapsed: float) -> str:
    if why is Why.IDLE:
        return (
            f"idle for {_hours(elapsed)} (no traffic on its links, no session, its nodes' CPU "
            "low): swapped out, its results kept"
        )
    return f"swapped in for {_hours(elapsed)}, its maximum duration: swapped out, its results kept"


def _warn_reason(why: Why, elapsed: float, due: float) -> str:
    if why is Why.IDLE:
        return (
            f"idle for {_hours(elapsed)}: it will be swapped out in {_hours(due)} unless it is "
            "used, or a project leader exempts it"
        )
    return (
        f"swapped in for {_hours(elapsed)}: it reaches its maximum duration and will be swapped "
        f"out in {_hours(due)}, unless a project leader exempts it"
    )


# -- sampling ------------------------------------------------------------------------------


class Sessions:
    """The shell and exec sessions the server has open, per experiment (thread-safe). Only
    sessions opened through the server (``server.sessions``) are seen; a root user's own
    `nestbed shell` is not. A session that opened and ended between two samples is seen by
    the second (``seen``): a short exec a minute is use, though none is open at any sample."""

    def __init__(self) -> None:
        self._open: Counter[str] = Counter()
        self._ended: Counter[str] = Counter()  # since the last ``seen``
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def opened(self, experiment: str) -> Iterator[None]:
        with self._lock:
            self._open[experiment] += 1
        try:
            yield
        finally:
            with self._lock:
                self._open[experiment] -= 1
                self._ended[experiment] += 1
                if not self._open[experiment]:
                    del self._open[experiment]

    def count(self, experiment: str) -> int:
        """The experiment's sessions open now."""
        with self._lock:
            return self._open[experiment]

    def seen(self, experiment: str) -> int:
        """The experiment's sessions open now or ended since the last call (the sampler's)."""
        with self._lock:
            return self._open[experiment] + self._ended.pop(experiment, 0)


class Sampler(Protocol):
    """Reads one experiment's activity now."""

    def sample(self) -> Sample: ...


class ActiveSampler:
    """An active experiment's activity through its back end: the link emulator's egress pipes
    (packets the nodes sent into shaped links), each node's interface counters on plain links
    and LANs (``/proc/net/dev`` read in the node: a few milliseconds of its CPU per sample),
    and its nodes' cgroups (v1 or v2)."""

    def __init__(
        self, active: Active, sessions: Sessions, clock: Callable[[], float] = time.time
    ) -> None:
        self.active, self.sessions, self.clock = active, sessions, clock
        plan = active.plan
        emulated = {e.link for e in plan.emulated}
        self.plain: dict[str, list[str]] = {}  # node -> its interfaces on plain links and LANs
        for (link, node), ifname in sorted(plan.interfaces().items()):
            if link not in emulated:
                self.plain.setdefault(node, []).append(ifname)

    def sample(self) -> Sample:
        """The counters now; EnvironmentProblem when one cannot be read (judge nothing then)."""
        t = self.clock()
        packets, sent_bytes = self._emulated()
        for node, ifnames in self.plain.items():
            p, b = sent_on(self._proc_net_dev(node), ifnames)
            packets, sent_bytes = packets + p, sent_bytes + b
        cpu: dict[str, float] = {}
        for node in self.active.nodes:
            cgroup = self.active.backend.node_cgroup(self.active.plan, node)
            if cgroup is not None:
                try:
                    cpu[node] = cgroup.cpu_seconds()
                except (OSError, ValueError) as exc:
                    raise EnvironmentProblem(
                        f"cannot read the CPU time of node {node} of experiment "
                        f"{self.active.name} ({exc})"
                    ) from exc
        return Sample(t, packets, sent_bytes, cpu, self.sessions.seen(self.active.name))

    def _emulated(self) -> tuple[int, int]:
        plan = self.active.plan
        if not plan.needs_linkd:
            return 0, 0
        try:
            channel = self.active.backend.linkd(plan)
        except OSError as exc:
            raise EnvironmentProblem(self._no_linkd(f"({exc})")) from exc
        try:
            counters = pipe_counters(channel)
        finally:
            channel.close()
        if not counters:
            raise EnvironmentProblem(self._no_linkd("(it does not answer)"))
        egress = [c for (_, _, direction), c in counters.items() if direction == "egress"]
        return sum(c["packets_in"] for c in egress), sum(c["bytes_in"] for c in egress)

    def _no_linkd(self, why: str) -> str:
        return f"cannot read the link emulator of experiment {self.active.name} {why}"

    def _proc_net_dev(self, node: str) -> str:
        try:
            done = self.active.exec(node, ["cat", "/proc/net/dev"], capture_output=True,
                                    text=True, timeout=EXEC_TIMEOUT_S)  # fmt: skip
        except (OSError, NestbedError, subprocess.SubprocessError) as exc:
            raise EnvironmentProblem(self._no_counters(node, str(exc))) from exc
        if done.returncode != 0:
            raise EnvironmentProblem(self._no_counters(node, done.stderr.strip()))
        return done.stdout

    def _no_counters(self, node: str, why: str) -> str:
        return f"cannot read the interface counters of node {node} of {self.active.name} ({why})"


def sent_on(proc_net_dev: str, ifnames: Iterable[str]) -> tuple[int, int]:
    """Packets and bytes sent on ``ifnames``, from the text of a ``/proc/net/dev``."""
    wanted = set(ifnames)
    packets = sent = 0
    for line in proc_net_dev.splitlines():
        name, colon, rest = line.partition(":")
        if not colon or name.strip() not in wanted:
            continue
        fields = rest.split()  # 8 receive columns, then bytes and packets transmitted
        sent += int(fields[8])
        packets += int(fields[9])
    return packets, sent


@dataclass
class FakeSampler:
    """The twin of ``ActiveSampler`` for tests: hands out the samples it was given, in order."""

    samples: list[Sample] = field(default_factory=list)

    def sample(self) -> Sample:
        if not self.samples:
            raise EnvironmentProblem("the fake sampler has no samples left")
        return self.samples.pop(0)
