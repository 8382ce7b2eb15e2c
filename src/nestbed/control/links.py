"""The run's links as events have left them: up or down, their shaping now, and carrying out
a link event on the link emulator through one connection kept open for the run."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

from nestbed.backend.base import Backend
from nestbed.backend.linkd import Channel, Requests, TimedChannel, set_changed_pipes
from nestbed.backend.plan import PipeSettings, Plan, pipe_params
from nestbed.control.simulated import SimulatedPart
from nestbed.errors import Refused
from nestbed.model import Experiment, Link
from nestbed.model.events import link_after_event


class LinkStates:
    """Every link and LAN of the experiment, as events changed them; simulated ones change
    in nestbed-sim."""

    def __init__(
        self, exp: Experiment, plan: Plan, backend: Backend, simulated: SimulatedPart | None = None
    ):
        self.plan, self.backend, self.simulated = plan, backend, simulated
        self.original = {link.name: link for link in exp.all_links}
        self.links = dict(self.original)
        self.state = {name: "up" for name in self.links}
        self.emulated = {e.link for e in plan.emulated}
        self.lock = threading.Lock()
        self.channel: Channel | None = None  # opened by the first link event
        # Changes handed over ahead of their time (to this machine's linkd, or a cluster's
        # hosts) are planned before they are applied: a link's next event starts from the
        # planned link, and a change that comes back is kept unless a later one came back
        # first.
        self.planned = dict(self.links)
        self.kept_due: dict[str, float] = {}

    def lead_s(self, name: str) -> float:
        """How long ahead of its time an event on ``name`` is handed over to its link
        emulators (``Backend.link_lead_s``), or 0 where the link is not emulated there."""
        if self.simulated is not None and name in self.simulated.links:
            return self.simulated.lead_s
        return self.backend.link_lead_s if name in self.emulated else 0.0

    def __contains__(self, name: str) -> bool:
        return name in self.links

    def apply(
        self, name: str, verb: str, args: tuple[str, ...], due: float | None = None
    ) -> tuple[str, float]:
        """Carries out a link event now, or at ``due`` (time.monotonic()) where the link
        emulators take changes ahead of their time; what it did, and when it took effect
        (time.monotonic(): for a change handed over ahead, when its link emulators said they
        applied it, the last of a cluster's hosts)."""
        if self.simulated is not None and name in self.simulated.links:
            return self._apply_simulated(self.simulated, name, verb, args, due)
        if name not in self.emulated:
            raise Refused(
                f"link {name} is not emulated (it is unshaped and no event in the file names "
                "it), so it cannot change while active; give it a shaping or an event in the file"
            )
        with self.lock:
            if self.channel is None:
                self.channel = self.backend.linkd(self.plan)
            channel = self.channel
            if due is None or not isinstance(channel, TimedChannel):
                try:
                    message, state, after = self._apply(channel, name, verb, args)
                except OSError:
                    channel.close()  # broken: the next event opens a new one
                    self.channel = None
                    raise
                done = time.monotonic()
                self._keep(name, state, after, done)
                return message, done
            asked = Requests()
            message, state, after = self._apply(asked, name, verb, args)
        # Outside the lock: linkd waits for the time, and other links' events go on.
        with self._undone_if_failed(name, after):
            applied = channel.request_at(due, asked.requests)
        with self.lock:
            self._keep(name, state, after, due)
        return message, applied

    def _apply(
        self, client: Channel, name: str, verb: str, args: tuple[str, ...]
    ) -> tuple[str, str | None, Link]:
        """Sends ``client`` the requests of a link event on the link as planned, and plans
        its shaping after it; what it did, its state after it (None: unchanged) and its
        shaping after it."""
        before = self.planned[name]
        if verb in ("up", "down"):
            fields = {"mode": "blackhole"} if verb == "down" else {}
            client.request(verb, link=name, **fields)
            return f"link {name} is {verb}", verb, before
        after = link_after_event(before, self.original[name], verb, args)
        self.planned[name] = after
        changed = set_changed_pipes(client, name, _settings(before), _settings(after))
        return f"{changed} pipes of {name} changed", None, after

    @contextlib.contextmanager
    def _undone_if_failed(self, name: str, after: Link) -> Iterator[None]:
        """A change handed over outside the lock that raises was never applied: the link's
        next change starts from what is, unless another was planned meanwhile."""
        try:
            yield
        except BaseException:
            with self.lock:
                if self.planned[name] is after:
                    self.planned[name] = self.links[name]
            raise

    def _keep(self, name: str, state: str | None, link: Link, due: float) -> None:
        """The link as a change due at ``due`` left it, unless a later one came back first."""
        if due < self.kept_due.get(name, float("-inf")):
            return
        self.kept_due[name] = due
        self.links[name] = link
        if state is not None:
            self.state[name] = state

    def _apply_simulated(
        self,
        simulated: SimulatedPart,
        name: str,
        verb: str,
        args: tuple[str, ...],
        due: float | None,
    ) -> tuple[str, float]:
        """A simulated link's event, planned as an emulated link's is and sent to nestbed-sim
        (outside the lock where it is handed over ahead of its time, ``due``)."""
        with self.lock:
            before = self.planned[name]
            if verb in ("up", "down"):
                state, after = verb, before
                message = f"simulated link {name} is {verb}"
            else:
                state, after = None, link_after_event(before, self.original[name], verb, args)
                message = f"simulated link {name} changed"
            self.planned[name] = after
        with self._undone_if_failed(name, after):
            if state is not None:
                done = simulated.set_state(name, state, due)
            else:
                done = simulated.shape(after, due)
        with self.lock:
            self._keep(name, state, after, done if due is None else due)
        return message, done

    def reset(self, exp: Experiment) -> list[str]:
        """Sets every link to what ``exp`` configures from what this run's events left (a
        sweep's next run on the same network starts from its own configuration): a link
        taken down comes up, a pipe whose shaping differs is set; what it did, one line a
        link. The pipes whose configuration changed between the two runs may already have
        been set; setting one again to the same value is harmless."""
        done = []
        with self.lock:
            for link in exp.all_links:
                name = link.name
                down, changed = self.state.get(name) == "down", self.links.get(name) != link
                if not (down or changed):
                    continue
                if self.simulated is not None and name in self.simulated.links:
                    if down:
                        self.simulated.set_state(name, "up")
                    if changed:
                        self.simulated.shape(link)
                elif name in self.emulated:
                    if self.channel is None:
                        self.channel = self.backend.linkd(self.plan)
                    if down:
                        self.channel.request("up", link=name)
                    set_changed_pipes(self.channel, name, _settings(self.links[name]),
                                      _settings(link))  # fmt: skip
                else:
                    continue  # a cable: neither events nor the next run change it
                self.state[name], self.links[name], self.planned[name] = "up", link, link
                what = [w for w, on in (("up", down), ("reshaped", changed)) if on]
                done.append(f"{name}: {' and '.join(what)}")
        return done

    def now(self) -> dict[str, Any]:
        """Status fields: every link's state, and the links events changed, as they are now
        (what a linktest during the run tests against)."""
        with self.lock:
            return {
                "links": dict(self.state),
                "changed_links": [
                    link.model_dump(mode="json")
                    for name, link in self.links.items()
                    if link != self.original[name]
                ],
            }

    def close(self) -> None:
        with self.lock:
            if self.channel is not None:
                self.channel.close()
                self.channel = None


def _settings(link: Link) -> list[PipeSettings]:
    return [(p.node, pipe_params(p.egress), pipe_params(p.ingress)) for p in link.ports]
