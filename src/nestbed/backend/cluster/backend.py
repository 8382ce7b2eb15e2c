"""The cluster back end: the ``Backend`` protocol over several hosts, each served by an agent
(a Dask worker pinned to its host, see ``agent``), reached through a Dask scheduler.

Swap-in asks every agent for its host's facts, places the nodes with the mapper in the slots
other experiments leave (``slots``), cuts the plan into each host's share (``share``) and has
every host build its share at once; if any host fails (or does not answer in time), every
host removes its share and swap-in fails with the first host's reason, or, if hosts refused
only because experiments swapped in meanwhile took the slots, places it again. The placement
is kept in the experiment's state folder on this machine, so swap-out and commands reach the
same hosts.

The controller stays one process on the controlling machine and reaches every host through
this back end: ``start_in`` starts a command on its node's host and gives back a Popen-like
proxy whose output is streamed into the caller's files (``proxy``, ``remote``); ``linkd`` is
one channel over every host's link emulator (``channel``); ``exec_in`` and ``wait_listening``
run on the node's host. Each is a Dask task to the hosts concerned, so the data plane never
passes through Dask. ``open_socket`` gives a socket whose sends leave from the node and
whose arrivals are drained here (``datagrams``). ``node_cgroup`` gives a node's CPU time
and memory, read on its host (``usage``). A confined command (a server's run, as the
project's identity) starts in its node's working folder made and handed over on its host
(``workdirs``), as the controller makes its own in the results.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import random
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nestbed import places
from nestbed.backend import processes
from nestbed.backend.cgroups import NodeCgroup
from nestbed.backend.cluster import agent, clocks, host, remote, slots, timeservice, workdirs
from nestbed.backend.cluster.channel import ClusterChannel
from nestbed.backend.cluster.datagrams import Drainer
from nestbed.backend.cluster.placement import HostFacts, place
from nestbed.backend.cluster.proxy import Feed, Poller, RemoteProcess, Terminal, sink_and_reader
from nestbed.backend.cluster.share import (
    DEFAULT_PORT,
    DEFAULT_UNDERLAY_MTU,
    HostShare,
    Underlay,
    cut_links,
    mtu_warning,
    shares,
    simulator_host,
)
from nestbed.backend.cluster.simulator import RemoteSimulator, request_on_host_at
from nestbed.backend.cluster.usage import RemoteCgroup, UsageReader
from nestbed.backend.confine import confined_argv, hand_over
from nestbed.backend.linkd import Channel, Request
from nestbed.backend.nofollow import write_tree
from nestbed.backend.plan import Plan, experiment_tag
from nestbed.errors import EnvironmentProblem, Held, InternalError, NestbedError, reason

if TYPE_CHECKING:
    from nestbed.model.options import RunAs

STATE_ROOT = Path(places.run_root()) / ".cluster"
PLACEMENT = "placement.json"
CONTROLLER_PID = "controller.pid"  # the life cycle's controller of the experiment, if any
# What start_in passes on to the node's host; anything else is a bug of the caller's.
_POPEN_KEYS = {"stdout", "stderr", "stdin", "env", "start_new_session", "text", "cwd"}
DEFAULT_TIMEOUT_S = 300.0  # for one host's part of a swap-in or swap-out
CLOCK_THREADS = 32  # hosts whose clocks are asked at once at swap-in
# A link event goes to its hosts this long ahead of its time, and their linkd applies it then
# (nestbed-sim's host sends it then). A Dask round trip to a simulated host took 1.5 s at
# load 9 on 2 cores (events landed that late, and one second of lead was not enough), and up
# to 1.3 s at load 4-9 during `bench/cluster.py --events` (docs/benchmarks.md); a run's end
# waits for the events handed over before an end nobody scheduled: this long until their
# time, and LINK_ANSWER_S after it.
LINK_LEAD_S = 3.0
# A host's answer to a timed link change is given up this long after its time (the hop
# back, as long as the hop there may be): a host whose agent went is named in the event's
# row then, rather than after DEFAULT_TIMEOUT_S, and the run's end does not wait for it.
LINK_ANSWER_S = LINK_LEAD_S
# How long the hosts' link emulators may take to give their counters (a status, a sample).
COUNTERS_ANSWER_S = 10.0


PLACE_ATTEMPTS = 5  # placements of one swap-in whose slots others took meanwhile


class _SlotsTaken(Exception):
    """Every host that refused a share did so for slots other experiments took since it was
    placed; every host removed what it had built."""

    def __init__(self, host: str):
        super().__init__(host)
        self.host = host


class ClusterBackend:
    """Experiments over the hosts whose agents are connected to the scheduler at ``scheduler``."""

    name = "cluster"
    link_lead_s = LINK_LEAD_S
    work_elsewhere = True  # a node's programs run on its host

    def __init__(
        self,
        scheduler: str,
        *,
        underlay_mtu: int | None = None,  # None: the least MTU of the hosts' routes
        port: int = DEFAULT_PORT,
        state_root: Path = STATE_ROOT,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ):
        self.scheduler = scheduler
        self.underlay_mtu, self.port = underlay_mtu, port
        self.state_root = state_root
        self.timeout_s = timeout_s
        self._client: Any = None
        # The controller's threads (its sampler, its requests, the usage readers) all ask
        # for the client; the first ones must not each connect one.
        self._connecting = threading.Lock()
        self._poller: Poller | None = None
        self._drainer: Drainer | None = None
        self._usage: dict[str, UsageReader] = {}  # by experiment
        # Folders handed over to an identity here (``hand_over``) and nodes' working folders
        # of runs (``work_folder``; None: unconfined): a node's working folder among them is
        # made again on the node's host for the commands that start in it.
        self._handed: dict[str, RunAs | None] = {}

    # -- connection ------------------------------------------------------------------------

    def client(self) -> Any:
        with self._connecting:
            if self._client is None:
                from distributed import Client

                try:
                    self._client = Client(self.scheduler, timeout=30)
                except OSError as exc:
                    raise EnvironmentProblem(
                        f"cannot reach the cluster's scheduler at {self.scheduler} ({exc}); "
                        "start `dask scheduler` there, or give its address"
                    ) from exc
            return self._client

    def close(self) -> None:
        with self._connecting:
            if self._client is not None:
                self._client.close()
                self._client = None

    def __enter__(self) -> ClusterBackend:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def hosts(self) -> list[str]:
        """The hosts whose agents are connected now."""
        workers = self.client().scheduler_info(n_workers=-1).get("workers", {}).values()
        names = {
            key.removeprefix(agent.RESOURCE_PREFIX)
            for w in workers
            for key in w.get("resources", {})
            if key.startswith(agent.RESOURCE_PREFIX)
        }
        return sorted(names)

    def require_ready(self) -> None:
        if not self.hosts():
            raise EnvironmentProblem(
                f"no agent is connected to the scheduler at {self.scheduler}; run "
                f"`nestbed agent --scheduler {self.scheduler}` on each host"
            )

    def _on_hosts(
        self,
        function: Callable[..., Any],
        args: dict[str, tuple[Any, ...]],
        *,
        light: bool = True,
        leave_queued: bool = False,
        timeout_s: float | None = None,
    ) -> dict:
        """``function(*args[h])`` on every host ``h`` at once; each host's result or the
        exception it raised (or a timeout). Building or removing a share (``light=False``)
        takes the host's one slot, so that a host builds one share at a time; all other
        work (commands, their polls and signals, link changes, facts) goes to the host's
        agent beside it, and is held up neither by a swap-in there nor by a long command.
        Work a host has not done in time is called off, or with ``leave_queued`` left to
        run there when its turn comes (``_Queued``). ``timeout_s`` is the deadline
        (default: the back end's)."""
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        client = self.client()
        live = set(self.hosts())
        results: dict[str, Any] = {
            h: EnvironmentProblem(f"host {h} has no agent connected; start `nestbed agent` there")
            for h in args
            if h not in live
        }  # rather than wait for one until the timeout: work for it would never start
        futures = {
            h: client.submit(function, *a, pure=False, **_on_host(h, light))
            for h, a in args.items()
            if h in live
        }
        from distributed import wait

        with contextlib.suppress(TimeoutError):  # one deadline for all hosts together
            wait(list(futures.values()), timeout=timeout_s)
        for h, future in futures.items():
            if not future.done():
                if leave_queued:
                    from distributed import fire_and_forget

                    fire_and_forget(future)
                    results[h] = _Queued(f"no answer within {timeout_s:.3g} s; left queued")
                else:
                    future.cancel()
                    results[h] = TimeoutError(f"no answer within {timeout_s:.3g} s")
                continue
            try:
                results[h] = future.result()
            except Exception as exc:  # the host's own error, or Dask's (a worker lost)
                results[h] = exc
        return results

    def facts(self) -> list[HostFacts]:
        answers = self._on_hosts(agent.facts, {h: () for h in self.hosts()})
        failed = {h: a for h, a in answers.items() if isinstance(a, BaseException)}
        if failed:
            h, exc = next(iter(failed.items()))
            raise EnvironmentProblem(f"host {h} did not report its facts: {reason(exc)}") from exc
        return list(answers.values())

    # -- swap in and out ----------------------------------------------------------------------

    def run_dir(self, plan: Plan) -> Path:
        return self.state_root / plan.experiment

    def placement(self, plan: Plan) -> tuple[dict[str, str], Underlay] | None:
        """Node -> host of the swapped-in experiment and its underlay, as kept at swap-in."""
        try:
            kept = json.loads((self.run_dir(plan) / PLACEMENT).read_text())
        except (OSError, ValueError):
            return None
        underlay = Underlay(kept["addresses"], kept["mtu"], kept["port"], kept.get("delays_s", {}))
        return kept["nodes"], underlay

    def swap_in(self, plan: Plan) -> None:
        """Places and builds the experiment; placed again, from fresh facts, while other
        experiments swapped in meanwhile take the slots it was placed in or hold the slots
        it needs (up to ``PLACE_ATTEMPTS`` times, a random while apart). A racing swap-in
        gives back what it took as soon as it finds its own slots taken, so only slots still
        held at the last placement refuse the swap-in (``Held``)."""
        for attempt in range(1, PLACE_ATTEMPTS + 1):
            try:
                return self._swap_in(plan)
            except Held:
                if attempt == PLACE_ATTEMPTS:
                    raise
            except _SlotsTaken as taken:
                if attempt == PLACE_ATTEMPTS:
                    raise Held(
                        f"swap-in of experiment {plan.experiment} was placed {attempt} times, "
                        f"and each time other experiments swapped in meanwhile took its "
                        f"slots (last on host {taken.host}); try again"
                    ) from taken.__cause__
            # Apart, so that two swap-ins that took each other's slots do not again.
            time.sleep(random.uniform(0.05, 0.25) * attempt)

    def _swap_in(self, plan: Plan) -> None:
        facts = self.facts()
        if not facts:
            self.require_ready()
        nodes = place(plan, facts)
        limits = {f.name: f.slots for f in facts}
        addresses = {f.name: f.address for f in facts}
        cut = cut_links(plan, nodes)
        delays, mtu = self.underlay_paths(cut, addresses)
        underlay = Underlay(addresses, mtu, self.port, delays)
        parts = shares(plan, nodes, underlay)
        directory = self.run_dir(plan)
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        offsets = self.clock_offsets([f for f in facts if f.name in parts])
        tolerated = clocks.tolerance_s(_cut_delays_s(plan, nodes))
        said = clocks.warnings(offsets, tolerated)
        narrow = mtu_warning(plan, cut, underlay)
        for warning in said + ([narrow] if narrow else []):
            print(f"warning: {warning}", file=sys.stderr)
        (directory / PLACEMENT).write_text(json.dumps({
            "nodes": nodes, "addresses": underlay.addresses, "mtu": underlay.mtu,
            "port": underlay.port, "delays_s": delays,
            "clocks": {h: o.to_json() for h, o in offsets.items()},
            "clock_tolerance_s": tolerated, "clock_warnings": said,
        }))  # fmt: skip
        answers = self._on_hosts(
            host.swap_in, {h: (part, limits[h]) for h, part in parts.items()}, light=False
        )
        failed = {h: a for h, a in answers.items() if isinstance(a, BaseException)}
        if failed:
            # A host still building when its answer was due removes its part once the build
            # is done: the removal is left queued there behind it.
            undone = self._on_hosts(
                host.swap_out,
                {h: (part,) for h, part in parts.items()},
                light=False,
                leave_queued=True,
            )
            late = sorted(h for h, a in undone.items() if isinstance(a, _Queued))
            stuck = sorted(h for h, a in undone.items()
                           if isinstance(a, BaseException) and h not in late)  # fmt: skip
            if stuck:  # the placement stays, so that swap-out can try again
                after = (f"host {', '.join(stuck)} could not remove its part; run "
                         "`nestbed swapout` again")  # fmt: skip
            elif late:
                shutil.rmtree(directory, ignore_errors=True)
                after = (f"host {', '.join(late)} did not answer in time: "
                         + ("it removes its part" if len(late) == 1 else "each removes its part")
                         + " once it has finished building it")  # fmt: skip
            else:
                shutil.rmtree(directory, ignore_errors=True)
                after = "every host removed what it had created"
                full = [h for h, a in failed.items() if isinstance(a, slots.HostFull)]
                if len(full) == len(failed):  # only taken slots: place again
                    raise _SlotsTaken(full[0]) from failed[full[0]]
            h, exc = next(iter(failed.items()))
            raise EnvironmentProblem(
                f"swap-in of experiment {plan.experiment} failed on host {h}: {reason(exc)}; "
                + after
            ) from exc

    def underlay_paths(
        self, cut: dict[str, set[str]], addresses: dict[str, str]
    ) -> tuple[dict[str, dict[str, float]], int]:
        """host -> other host -> one-way time over the underlay, for the pairs of hosts a
        cut link joins (each host pings its peers, all hosts at once), and the underlay's
        MTU: the one configured, else the least of those pairs' routes (each checked to
        carry it unfragmented)."""
        peers: dict[str, set[str]] = {}
        for hosts in cut.values():
            for h in hosts:
                peers.setdefault(h, set()).update(hosts - {h})
        asked = {h: ([addresses[o] for o in sorted(others)],) for h, others in peers.items()}
        answers = self._on_hosts(host.underlay_paths, asked)
        found: dict[str, dict[str, float]] = {}
        mtus = []
        name = {a: o for o, a in addresses.items()}
        for h, answer in answers.items():
            if isinstance(answer, BaseException):
                raise EnvironmentProblem(
                    f"host {h} could not measure the underlay: {reason(answer)}"
                ) from answer
            found[h] = {name[a]: s for a, (s, _) in answer.items()}
            mtus += [mtu for _, mtu in answer.values()]
        if self.underlay_mtu is not None:
            return found, self.underlay_mtu
        return found, min(mtus, default=DEFAULT_UNDERLAY_MTU)

    def clock_offsets(self, facts: list[HostFacts]) -> dict[str, clocks.Offset]:
        """Each host's clock less this machine's (and its monotonic clock's), from
        ``clocks.UDP_SAMPLES`` time requests over UDP to its agent (``timeservice``); from
        ``clocks.SAMPLES`` through Dask for a host that does not answer them. The hosts are
        asked all at once, each by a thread of its own (a request waits for its answer a
        round trip: one host after another, 200 requests each, took 0.9 s for four
        simulated hosts; a host's best round trip, all that counts, is kept either way)."""

        stop = threading.Event()  # the swap-in interrupted: the threads' next request ends

        def udp(f: HostFacts) -> tuple[str, tuple[clocks.Offset, clocks.Offset] | None]:
            if not f.clock_port:
                return f.name, None
            ask, close = timeservice.asker(f.address, f.clock_port)

            def asked() -> tuple[clocks.Sample, clocks.Sample] | None:
                if stop.is_set():
                    raise InterruptedError("the swap-in was interrupted")
                return ask()

            try:
                return f.name, clocks.measure(asked, clocks.UDP_SAMPLES)
            finally:
                close()

        found = {}
        if facts:
            pool = ThreadPoolExecutor(min(len(facts), CLOCK_THREADS))
            try:
                for name, measured in pool.map(udp, facts):
                    if measured is not None:
                        found[name] = measured[0]
            finally:
                stop.set()  # at once on an interrupt: no host's 200 requests to wait out
                pool.shutdown(wait=True, cancel_futures=True)
        slow = sorted(f.name for f in facts if f.name not in found)
        return found | (self._dask_clock_offsets(slow) if slow else {})

    def _dask_clock_offsets(self, hosts: list[str]) -> dict[str, clocks.Offset]:
        """Each host's clock less this machine's, from ``clocks.SAMPLES`` time requests sent
        straight to its agent (not through the scheduler, whose hop would widen the round
        trip)."""
        client = self.client()
        workers = {
            key.removeprefix(agent.RESOURCE_PREFIX): address
            for address, w in client.scheduler_info(n_workers=-1)["workers"].items()
            for key in w.get("resources", {})
            if key.startswith(agent.RESOURCE_PREFIX)
        }
        found = {}
        for h in hosts:
            samples = []
            try:
                for _ in range(clocks.SAMPLES):
                    t1 = time.time_ns()
                    answer = client.run(agent.clock, workers=[workers[h]])
                    samples.append(clocks.Sample(t1, answer[workers[h]], time.time_ns()))
            except Exception as exc:  # its agent left since it reported its facts
                raise EnvironmentProblem(
                    f"host {h} did not answer a time request: {reason(exc)}"
                ) from exc
            found[h] = replace(clocks.estimate(samples), method="dask")
        return found

    def placement_facts(self, plan: Plan) -> dict[str, Any]:
        """Where the experiment lives, for its runs' manifests: each host's address, nodes
        and clock offset, the offset the cut links tolerate and any warning about it."""
        try:
            kept = json.loads((self.run_dir(plan) / PLACEMENT).read_text())
        except (OSError, ValueError):
            return {}
        hosts = {
            h: {"address": address,
                "nodes": sorted(n for n, on in kept["nodes"].items() if on == h),
                **kept.get("clocks", {}).get(h, {})}
            for h, address in sorted(kept["addresses"].items())
            if h in kept["nodes"].values()
        }  # fmt: skip
        return {
            "backend": self.name,
            "scheduler": self.scheduler,
            "hosts": hosts,
            "clock_tolerance_s": kept.get("clock_tolerance_s"),
            "clock_warnings": kept.get("clock_warnings", []),
        }

    def swap_out(self, plan: Plan) -> None:
        kept = self.placement(plan)
        if kept is None:
            # Never swapped in from here (or its state is gone): every host removes whatever
            # it has of the experiment.
            self.remove_leftovers({plan.tag})
            return
        nodes, underlay = kept
        parts = shares(plan, nodes, underlay)
        answers = self._on_hosts(
            host.swap_out, {h: (part,) for h, part in parts.items()}, light=False
        )
        failed = {h: a for h, a in answers.items() if isinstance(a, BaseException)}
        if failed:
            h, exc = next(iter(failed.items()))
            raise EnvironmentProblem(
                f"swap-out of experiment {plan.experiment} failed on host {h}: {reason(exc)}; "
                "run `nestbed swapout` again"
            ) from exc
        _remove_state(self.run_dir(plan))

    def shares(self, plan: Plan) -> dict[str, HostShare]:
        """Every host's share of the swapped-in experiment."""
        kept = self.placement(plan)
        if kept is None:
            raise EnvironmentProblem(
                f"experiment {plan.experiment} is not swapped in on this cluster"
            )
        return shares(plan, *kept)

    # -- commands in nodes ---------------------------------------------------------------

    def _host_of(self, plan: Plan, node: str) -> str:
        kept = self.placement(plan)
        if kept is None or node not in kept[0]:
            raise EnvironmentProblem(
                f"experiment {plan.experiment} is not swapped in on this cluster"
            )
        return kept[0][node]

    def exec_in(
        self, plan: Plan, node: str, argv: list[str], **run: Any
    ) -> subprocess.CompletedProcess:
        """Runs the command on its node's host; its output comes back here, to wherever the
        caller sent it (by default this process's own stdout and stderr)."""
        h = self._host_of(plan, node)
        only = agent.node_only(plan, node)
        remote_run = {k: run[k] for k in ("input", "timeout", "env") if k in run}
        remote_run["capture_output"] = True
        if isinstance(remote_run.get("input"), str):
            remote_run["input"] = remote_run["input"].encode()
        (answer,) = self._on_hosts(agent.exec_in, {h: (only, node, argv, remote_run)}).values()
        if isinstance(answer, BaseException):
            raise answer
        return _as_asked(answer, run)

    def entering(self, plan: Plan, node: str) -> list[str] | None:
        return None  # a node is on its host, reached through start_in's proxies alone

    def start_in(self, plan: Plan, node: str, argv: list[str], **popen: Any) -> subprocess.Popen:
        """Starts the command on its node's host; a Popen-like proxy of it (``proxy``).

        Paths in ``argv`` under the folder of the file given as stdout are the command's own
        files: written on the host, and back here at the same paths when it ends. ``cwd`` is
        a folder on the node's host (a confined command's working folder: the host's own);
        a command given one is waited for until its host started it, so a folder missing
        there is the caller's error (``remote.start``), not a line in its stderr. Its
        ``stdin`` is nothing, or a pipe (PIPE) whose input goes to it with the polls
        (``proxy.Feed``), or a terminal (a descriptor of a tty: a session's pty, a user's
        terminal): the command then gets a pty of its own on its host, this terminal's
        input, size and output carried to and from it (``proxy.Terminal``); as on one
        machine, the caller's ``setsid --ctty`` makes it the command's controlling one."""
        unknown = set(popen) - _POPEN_KEYS
        stdin = popen.get("stdin")
        tty = isinstance(stdin, int) and stdin >= 0 and os.isatty(stdin)
        if unknown or not (tty or stdin in (None, subprocess.DEVNULL, subprocess.PIPE)):
            raise InternalError(
                f"a command on a cluster takes no {sorted(unknown) or 'stdin but a pipe'}"
            )
        h = self._host_of(plan, node)
        text = bool(popen.get("text"))
        out, out_reader = sink_and_reader(popen.get("stdout"), text)
        err, err_reader = sink_and_reader(popen.get("stderr"), text)
        # Only what the caller changed of its environment: the host has its own, but a
        # terminal's type is the caller's terminal's.
        given_env = popen.get("env") or os.environ
        env = {k: v for k, v in given_env.items()
               if os.environ.get(k) != v or (tty and k == "TERM")}  # fmt: skip
        group = bool(popen.get("start_new_session"))
        work = self._work_of(argv, popen)
        terminal = Terminal(stdin) if tty else None
        feed = Feed(text, terminal) if tty or stdin == subprocess.PIPE else None
        args = (agent.node_only(plan, node), node, argv, _own_files(argv, popen.get("stdout")),
                env, group, work, popen.get("cwd"), feed is not None,
                None if terminal is None else terminal.size())  # fmt: skip
        # Not waited for: a round of starts (linktest's receivers) costs one round trip, not
        # one each; the poller asks about the command once its host has started it.
        key = uuid.uuid4().hex[:16]
        started = self.client().submit(remote.start, key, *args, pure=False, **_on_host(h))
        if popen.get("cwd") is not None:  # a session's command: one round trip is nothing
            with contextlib.suppress(TimeoutError):  # a late start: the poller says so
                failed = started.exception(timeout=self.timeout_s)
                if isinstance(failed, NestbedError):
                    if terminal is not None:  # as the caller's terminal was
                        terminal.close()
                    raise failed
        process = RemoteProcess(self.poller(), h, key, started, list(argv), (out, err),
                                (out_reader, err_reader), self._signal, feed,
                                terminal)  # fmt: skip
        self.poller().add(process)
        return process  # type: ignore[return-value]

    def _work_of(self, argv: list[str], popen: dict[str, Any]) -> tuple[str, RunAs | None] | None:
        """The working folder a command starts in, and its identity, if it is one this back
        end was given: a confined command's is its HOME (``user_command``); an unconfined
        program's, the folder its shell or ``cwd`` names. The node's host makes its own
        (``workdirs``) and starts the command there."""
        home = (popen.get("env") or {}).get("HOME")
        if home in self._handed and self._handed[home] is not None:
            return home, self._handed[home]
        named = [*argv, popen.get("cwd") or ""]
        found = [f for f, run_as in self._handed.items()
                 if run_as is None and any(workdirs.names(text, f) for text in named)]  # fmt: skip
        return (found[0], None) if found else None

    def poller(self) -> Poller:
        if self._poller is None:
            self._poller = Poller(
                lambda asked: self._on_hosts(remote.poll, {h: (o,) for h, o in asked.items()})
            )
        return self._poller

    def _signal(self, h: str, key: str, sig: int, group: bool) -> None:
        (answer,) = self._on_hosts(remote.send_signal, {h: (key, sig, group)}).values()
        if isinstance(answer, BaseException):
            raise EnvironmentProblem(f"host {h} could not signal a command: {reason(answer)}")

    # The node's host runs the command with its own setpriv (util-linux).
    confine = staticmethod(confined_argv)

    def hand_over(self, path: Path, run_as: RunAs) -> None:
        """Hands the folder or file over here; a node's working folder is handed over on the
        node's host too, when a command starts in it (``start_in``)."""
        hand_over(path, run_as)
        self._handed[str(path)] = run_as

    def work_folder(self, path: Path, run_as: RunAs | None) -> None:
        """A node's working folder of a run: handed over here if confined, and made on the
        node's host for the commands that start in it (``start_in``)."""
        if run_as is None:
            self._handed[str(path)] = None
        else:
            self.hand_over(path, run_as)

    def bring_back(self, plan: Plan, folders: dict[str, Path], run_as: RunAs | None) -> list[str]:
        """Each node's working folder on its host, read there without following anything
        (``workdirs.bring_back``, bounded by ``nofollow.LIMIT_BYTES`` a node) and removed,
        written into ``folders[node]`` the same way, ``run_as``'s own if confined: one task
        per host, all at once. One sentence per node for what was left out."""
        kept = self.placement(plan)
        if kept is None or not folders:
            return []
        asked: dict[str, dict[str, str]] = {}
        for node, folder in folders.items():
            asked.setdefault(kept[0][node], {})[node] = str(folder)
        answers = self._taken(plan.experiment, self._on_hosts(
            workdirs.spool_back, {h: (plan.experiment, homes) for h, homes in asked.items()}
        ))  # fmt: skip
        owner = None if run_as is None else (run_as.uid, run_as.gid)
        said = []
        for h, answer in sorted(answers.items()):
            if isinstance(answer, BaseException):
                said.append(f"the working folders on host {h} did not come back: "
                            f"{reason(answer)}")  # fmt: skip
                continue
            for node, tree in sorted(answer.items()):
                left = tree.left_out | write_tree(folders[node], tree, owner)
                if left:
                    said.append(workdirs.left_out_sentence(f"work/{node}", h, left))
        return said

    def _taken(self, experiment: str, spooled: dict[str, Any]) -> dict[str, Any]:
        """Each host's trees of ``workdirs.spool_back``, the rest of a large one taken in
        ``workdirs.CHUNK_BYTES`` a host per round, all hosts at once; or its error."""
        got: dict[str, Any] = {}
        left: dict[str, tuple[str, int]] = {}  # host -> (spool, size)
        for h, answer in spooled.items():
            if isinstance(answer, BaseException):
                got[h] = answer
                continue
            head, name, size = answer
            got[h] = bytearray(head)
            if name is not None:
                left[h] = (name, size)
        while left:
            chunks = self._on_hosts(workdirs.take, {
                h: (experiment, name, len(got[h])) for h, (name, _) in left.items()
            })  # fmt: skip
            for h, chunk in chunks.items():
                if not chunk:  # a spool cut short under it
                    chunk = EnvironmentProblem(f"it ended at {len(got[h])} of {left[h][1]} bytes")
                if isinstance(chunk, BaseException):
                    got[h] = chunk
                    del left[h]
                    continue
                got[h] += chunk
                if len(got[h]) >= left[h][1]:
                    del left[h]
        return {h: a if isinstance(a, BaseException) else pickle.loads(a) for h, a in got.items()}

    def capture_argv(self, ifname: str, path: Path) -> list[str]:
        from nestbed.backend.linux import capture_argv

        return capture_argv(ifname, path)

    def open_socket(self, plan: Plan, node: str, kind: socket.SocketKind) -> socket.socket:
        """A socket in the node, on its host, as a socket here (``datagrams``)."""
        h = self._host_of(plan, node)
        if self._drainer is None:
            self._drainer = Drainer(self._on_hosts)
        sock = self._drainer.open_socket(h, (agent.node_only(plan, node), node, kind))
        return sock  # type: ignore[return-value]

    @property
    def socket_delay_s(self) -> float:
        """How much later than on one host a datagram through ``open_socket`` may arrive
        (linktest waits that much longer for its datagrams): from the drains' own times."""
        return 0.0 if self._drainer is None else self._drainer.delay_s()

    def linkd(self, plan: Plan) -> Channel:
        parts = self.shares(plan)

        def on_hosts(hosts: list[str], op: str, fields: dict[str, Any]) -> dict[str, Any]:
            # A status waits on counters: a host that has not given them soon is named.
            timeout_s = COUNTERS_ANSWER_S if op == "counters" else None
            return self._on_hosts(agent.linkd_request, {
                h: (agent.state_only(parts[h].plan), op, fields) for h in hosts
            }, timeout_s=timeout_s)  # fmt: skip

        offset_ns = self._monotonic_offsets_ns(plan)

        def at_hosts(asked: dict[str, list[Request]], due: float) -> dict[str, Any]:
            due_ns = {h: round(due * 1e9 + offset_ns.get(h, 0.0)) for h in asked}
            answers = self._timed(agent.linkd_requests_at, due, {
                h: (due_ns[h], agent.state_only(parts[h].plan), due_ns[h], requests)
                for h, requests in asked.items()
            })  # fmt: skip
            return {h: a if isinstance(a, BaseException) else (a - offset_ns.get(h, 0.0)) / 1e9
                    for h, a in answers.items()}  # fmt: skip

        return ClusterChannel(parts, on_hosts, at_hosts)

    def _timed(
        self, function: Callable[..., Any], due: float, args: dict[str, tuple[Any, ...]]
    ) -> dict[str, Any]:
        """``function(*args[h][1:])``, a coroutine function due on host ``h`` at
        ``args[h][0]`` (its monotonic clock), started on every host's agent at once and its
        result taken after ``due`` (this machine's time.monotonic()): each host's result or
        the exception it raised (or a timeout, this long after ``due``: LINK_ANSWER_S). The
        wait for the time holds no Dask slot of the agents' (``agent.start_timed``)."""
        key = uuid.uuid4().hex
        started = self._on_hosts(
            agent.start_timed, {h: (key, a[0], function, *a[1:]) for h, a in args.items()},
            light=True, timeout_s=max(0.0, due - time.monotonic()) + LINK_ANSWER_S,
        )  # fmt: skip
        failed = {h: a for h, a in started.items() if isinstance(a, BaseException)}
        time.sleep(max(0.0, due - time.monotonic()))
        return failed | self._on_hosts(
            agent.timed_result, {h: (key,) for h in args if h not in failed},
            light=True, timeout_s=max(0.0, due - time.monotonic()) + LINK_ANSWER_S,
        )  # fmt: skip

    def _monotonic_offsets_ns(self, plan: Plan) -> dict[str, float]:
        """Each host's monotonic clock less this machine's, measured at swap-in: a change due
        at this machine's time t is due at t + offset there."""
        hosts = self.placement_facts(plan).get("hosts", {})
        return {h: (f.get("monotonic_offset_s") or 0.0) * 1e9 for h, f in hosts.items()}

    def simulator(self, plan: Plan) -> RemoteSimulator:
        """The experiment's nestbed-sim on the host its simulated nodes are on (found when
        first asked: an experiment without one has this too, unasked)."""

        def host() -> str:
            kept = self.placement(plan)
            where = None if kept is None else simulator_host(plan, kept[0])
            if where is None:
                raise EnvironmentProblem(
                    f"experiment {plan.experiment} has no simulated part on this cluster"
                )
            return where

        def on_host(function: Callable[..., Any], *args: Any) -> Any:
            only = agent.state_only(plan)
            (answer,) = self._on_hosts(function, {host(): (only, *args)}, light=True).values()
            if isinstance(answer, BaseException):
                raise answer
            return answer

        def at_host(lines: list[str], due: float) -> float:
            """As a link emulator's change (``linkd``): due on the host's clock, waited for
            until its time and the hop back, named by its host if it fails."""
            where = host()
            offset_ns = self._monotonic_offsets_ns(plan).get(where, 0.0)
            due_ns = round(due * 1e9 + offset_ns)
            only = agent.state_only(plan)
            (done,) = self._timed(request_on_host_at, due,
                                  {where: (due_ns, only, due_ns, lines)}).values()  # fmt: skip
            if isinstance(done, NestbedError):
                raise done
            if isinstance(done, BaseException):
                raise EnvironmentProblem(
                    f"host {where} did not apply the change: {reason(done)}"
                ) from done
            return float(done - offset_ns) / 1e9

        return RemoteSimulator(on_host, at_host, LINK_LEAD_S)

    def node_cgroup(self, plan: Plan, node: str) -> NodeCgroup | None:
        """The node's cgroup on its host, as its CPU time and memory read through the
        host's agent (``usage``); None if it has none there."""
        h = self._host_of(plan, node)
        reader = self._usage.get(plan.experiment)
        if reader is None:
            kept = self.placement(plan)
            on = {} if kept is None else kept[0]

            def read_hosts() -> dict[str, Any]:
                state = agent.state_only(plan)
                return self._on_hosts(agent.node_usage, {
                    host: (state, sorted(n for n, at in on.items() if at == host))
                    for host in sorted(set(on.values()))
                })  # fmt: skip

            reader = self._usage[plan.experiment] = UsageReader(read_hosts)
        try:
            found = reader.read(h, node)
        except OSError:
            return None
        return None if found is None else RemoteCgroup(reader, h, node)

    def wait_listening(
        self, process: subprocess.Popen, port: int, proto: str, timeout: float = 5
    ) -> None:
        if not isinstance(process, RemoteProcess):
            raise InternalError("wait_listening on a cluster takes a command it started")
        process.wait_listening(port, proto, timeout)

    # -- what is left ----------------------------------------------------------------------

    def leftovers(self) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        answers = self._on_hosts(agent.leftovers, {h: () for h in self.hosts()})
        for h, answer in answers.items():
            for tag, things in ({} if isinstance(answer, BaseException) else answer).items():
                found.setdefault(tag, []).extend(f"host {h}: {t}" for t in things)
        for directory in self._state_dirs():
            found.setdefault(experiment_tag(directory.name), []).append(f"state folder {directory}")
        return found

    def _state_dirs(self) -> list[Path]:
        """The experiments' state folders on this machine (the hidden ones are the life
        cycle's)."""
        if not self.state_root.exists():
            return []
        return sorted(
            d for d in self.state_root.iterdir() if d.is_dir() and not d.name.startswith(".")
        )

    def remove_leftovers(self, tags: set[str]) -> list[str]:
        answers = self._on_hosts(
            agent.remove_leftovers, {h: (tags,) for h in self.hosts()}, light=False
        )
        removed = [f"host {h}: {t}" for h, a in answers.items() if isinstance(a, list) for t in a]
        for directory in self._state_dirs():
            if experiment_tag(directory.name) in tags:
                _remove_state(directory)
                removed.append(f"state folder {directory}")
        return removed

    def traces(self) -> list[str]:
        answers = self._on_hosts(agent.traces, {h: () for h in self.hosts()})
        return [f"host {h}: {t}" for h, a in answers.items() if isinstance(a, list) for t in a]


class _Queued(TimeoutError):
    """Work a host did not do in time, left to run there when its turn comes."""


def _on_host(h: str, light: bool = True) -> dict[str, Any]:
    """Dask's placement of work for host ``h``: on its agent, and for work that is not
    ``light`` in the host's one slot too."""
    if light:
        return {"workers": [agent.resource(h)], "allow_other_workers": False}
    return {"resources": {agent.resource(h): 1}}


def _cut_delays_s(plan: Plan, nodes: dict[str, str]) -> list[float]:
    """The delays of the pipes of the links cut between hosts."""
    cut = cut_links(plan, nodes)
    return [
        pipe["delay"]["delay_ns"] / 1e9
        for link in plan.emulated if link.link in cut
        for port in link.ports for pipe in (port.egress, port.ingress) if "delay" in pipe
    ]  # fmt: skip


def _as_asked(done: subprocess.CompletedProcess, run: dict[str, Any]) -> Any:
    """A command's result, captured on its host, as ``subprocess.run(**run)`` would have
    given it here: output kept (PIPE, capture_output), written to the file or stream the
    caller gave (this process's own by default), or dropped (DEVNULL)."""
    kept = []
    for data, key, own in (
        (done.stdout, "stdout", sys.stdout),
        (done.stderr, "stderr", sys.stderr),
    ):
        target = subprocess.PIPE if run.get("capture_output") else run.get(key)
        if target == subprocess.PIPE:
            kept.append(data.decode(errors="replace") if run.get("text") else data)
            continue
        kept.append(None)
        if target == subprocess.DEVNULL:
            continue
        if target == subprocess.STDOUT:
            target = run.get("stdout")
        if target is None or target == subprocess.STDOUT:
            own.flush()
            target = own
        os.write(target if isinstance(target, int) else target.fileno(), data)
    result = subprocess.CompletedProcess(done.args, done.returncode, *kept)
    if run.get("check"):
        result.check_returncode()
    return result


def _own_files(argv: list[str], stdout: Any) -> dict[str, str]:
    """The paths in argv under the folder of the file given as stdout, each with a name of
    its own on the host."""
    if not hasattr(stdout, "fileno"):
        return {}
    folder = os.path.dirname(os.readlink(f"/proc/self/fd/{stdout.fileno()}")) + os.sep
    return {a: f"{i}-{os.path.basename(a)}" for i, a in enumerate(argv) if a.startswith(folder)}


def _remove_state(directory: Path) -> None:
    """Stops the experiment's controller on this machine, if it still runs, and removes its
    state folder."""
    with contextlib.suppress(OSError, ValueError):
        processes.stop(int((directory / CONTROLLER_PID).read_text().strip()), grace_s=2.0)
    shutil.rmtree(directory, ignore_errors=True)
