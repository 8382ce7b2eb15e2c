"""The run's counters each second: every pipe's counters from the link emulator
(links/counters.csv) and every node's CPU and memory from its cgroup (nodes/usage.csv).

One link emulator connection serves the samples and the live counters of `status`, kept open
for the run (a status poll every 50 ms must not open one each time).
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from nestbed.backend.base import Backend
from nestbed.backend.cgroups import NodeCgroup
from nestbed.backend.linkd import Channel, Pipe, drops_by_kind, pipe_counters
from nestbed.backend.plan import Plan
from nestbed.errors import NestbedError, reason
from nestbed.results.folder import RunFolder
from nestbed.results.tables import LINK_COLUMNS, NODE_COLUMNS, Table

_JOIN_S = 5.0  # at the end, how long the last sample may still be under way


class Sampler:
    """Writes a row per pipe and per node each second from t0 until stopped."""

    def __init__(
        self,
        backend: Backend,
        plan: Plan,
        folder: RunFolder,
        cgroups: dict[str, NodeCgroup],
        now_s: Callable[[], float],
        link_state: Callable[[str], str],
        simulated: Callable[[], dict[Pipe, dict[str, Any]]] = dict,
    ):
        self.backend, self.plan, self.now_s, self.link_state = backend, plan, now_s, link_state
        self.simulated = simulated  # the simulated links' counters, from nestbed-sim
        self.cgroups = cgroups
        self.link_rows = Table(folder.link_counters, LINK_COLUMNS)
        self.node_rows = Table(folder.node_usage, NODE_COLUMNS)
        self.lock = threading.Lock()
        self.channel: Channel | None = None
        self.stopping = threading.Event()
        self.thread: threading.Thread | None = None
        # Each pipe's bytes out at the last sample: what a status's top pipes are ranked by.
        self.bytes_before: dict[Pipe, int] = {}
        self.logged: str | None = None  # what the log said last of a failed request

    def start(self, t0: float) -> None:
        """Samples at t0 + 0, 1, 2 ... s (t0 on the monotonic clock)."""
        self.thread = threading.Thread(target=self._loop, args=(t0,), name="sampler", daemon=True)
        self.thread.start()

    def _loop(self, t0: float) -> None:
        tick = 0
        while not self.stopping.is_set():
            self.sample()
            tick += 1
            if self.stopping.wait(max(0.0, t0 + tick - time.monotonic())):
                break

    def counters(self) -> tuple[dict[Pipe, dict[str, Any]], str | None]:
        """Every pipe's counters now, and the simulated links' as pipes; and why the link
        emulator gave none, if it did not."""
        found, why = self._linkd_counters()
        return found | self.simulated(), why

    def _linkd_counters(self) -> tuple[dict[Pipe, dict[str, Any]], str | None]:
        """linkd's pipes; empty without a link emulator or when it does not answer twice,
        on the connection kept and on a new one (a cluster's request crosses Dask and every
        host, where one can fail and the next succeed), and then why. The controller's log
        says why a request failed, the first try's too, each reason once in a row."""
        if not self.plan.needs_linkd:
            return {}, None
        why: list[str] = []
        with self.lock:
            for _ in range(2):
                if self.channel is None:
                    try:
                        self.channel = self.backend.linkd(self.plan)
                    except (OSError, NestbedError) as exc:
                        why.append(reason(exc))
                        continue
                found = pipe_counters(self.channel, why)
                if found:
                    self._log(why, "the second try answered")
                    return found, None
                self.channel.close()
                self.channel = None
            self._log(why, "so none now")
            return {}, "; then ".join(why) or "it has no pipes"

    def _log(self, why: list[str], outcome: str) -> None:
        """Tells the controller's log why the link emulator did not answer, unless it said the
        same last time (a reason that lasts is said once)."""
        said = "; then ".join(why)
        if why and said != self.logged:
            print(f"the link emulator gave no counters: {said}; {outcome}", file=sys.stderr,
                  flush=True)  # fmt: skip
        self.logged = said or None

    def sample(self) -> None:
        """One row per pipe and per node, now."""
        t = round(self.now_s(), 3)
        counters, _ = self.counters()
        self.bytes_before = {pipe: c["bytes_out"] for pipe, c in counters.items()}
        for (link, port, direction), c in counters.items():
            drops = drops_by_kind(c)
            self.link_rows.add({
                "t_s": t, "link": link, "port": port, "direction": direction,
                "packets_in": c["packets_in"], "bytes_in": c["bytes_in"],
                "packets_out": c["packets_out"], "bytes_out": c["bytes_out"],
                "drops_loss": drops["loss"], "drops_queue": drops["queue"],
                "drops_other": drops["other"],
                "queue_packets": c["queue_packets"], "queue_bytes": c["queue_bytes"],
            })  # fmt: skip
        for node, cgroup in sorted(self.cgroups.items()):
            with contextlib.suppress(OSError):
                self.node_rows.add(
                    {
                        "t_s": t,
                        "node": node,
                        "cpu_s": cgroup.cpu_seconds(),
                        "memory_bytes": cgroup.memory_bytes(),
                    }
                )

    def live(self) -> list[dict[str, Any]]:
        """Status rows: every pipe's state, packets and bytes out, drops and queue now."""
        return self.chosen()[0]

    def chosen(
        self, links: tuple[str, ...] | None = None, top: int | None = None
    ) -> tuple[list[dict[str, Any]], int, str | None]:
        """The status rows of ``links`` only (all without), cut to the ``top`` that matter
        most: a link that is down, then the most drops, then the most bytes out since the
        last sample; in (link, port, direction) order. And how many pipes there are, and why
        the link emulator gave no counters, if it did not."""
        found, why = self.counters()
        total = len(found)
        if links is not None:
            wanted = set(links)
            found = {pipe: c for pipe, c in found.items() if pipe[0] in wanted}
        states = {link: self.link_state(link) for link in {pipe[0] for pipe in found}}
        pipes = list(found)
        if top is not None and len(pipes) > top:
            before = self.bytes_before

            def rank(pipe: Pipe) -> tuple[bool, int, int]:
                c = found[pipe]
                recent = c["bytes_out"] - before.get(pipe, 0)
                return states[pipe[0]] == "up", -sum(c["drops"].values()), -recent

            pipes = sorted(sorted(pipes, key=rank)[:top])
        rows = [
            {
                "link": link, "state": states[link], "port": port,
                "direction": direction, "packets_out": c["packets_out"],
                "bytes_out": c["bytes_out"], "drops": sum(c["drops"].values()),
                "queue_packets": c["queue_packets"],
            }
            for link, port, direction in pipes
            for c in (found[(link, port, direction)],)
        ]  # fmt: skip
        return rows, total, why

    def stop(self) -> None:
        """Stops sampling, takes the last sample (the run's totals) and closes the tables."""
        self.stopping.set()
        if self.thread is not None:
            self.thread.join(_JOIN_S)
        self.sample()
        self.link_rows.close()
        self.node_rows.close()
        self.close()

    def close(self) -> None:
        """Closes the link emulator connection (a status after the end may open it again,
        until the run is retired)."""
        with self.lock:
            if self.channel is not None:
                self.channel.close()
                self.channel = None
