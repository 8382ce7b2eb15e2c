"""The cluster back end: the ``Backend`` protocol over several hosts, each served by an agent
(a Dask worker pinned to its host, see ``agent``), reached through a Dask scheduler.

Swap-in asks every agent for its host's facts, places the nodes with the mapper, cuts the
plan into each host's share (``share``) and has every host build its share at once; if any
host fails (or does not answer in time), every host removes its share and swap-in fails with
the first host's reason. The placement is kept in the experiment's state folder on this
machine, so swap-out and commands reach the same hosts.

Not yet on a cluster (each says so in one sentence): starting a long-running command in a
node (the controller's programs), a node's socket, the experiment's link emulators as one
channel, and node cgroups seen from here. So the life cycle's controller cannot run on it yet;
swap-in, swap-out, commands in nodes and cleanup by tag can.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nestbed.backend.cgroups import NodeCgroup
from nestbed.backend.cluster import agent, host
from nestbed.backend.cluster.placement import HostFacts, place
from nestbed.backend.cluster.share import DEFAULT_PORT, DEFAULT_UNDERLAY_MTU, Underlay, shares
from nestbed.backend.linkd import Channel
from nestbed.backend.plan import Plan
from nestbed.errors import EnvironmentProblem, NestbedError, UserError

STATE_ROOT = Path(os.environ.get("NESTBED_RUN_DIR", "/run/nestbed")) / ".cluster"
PLACEMENT = "placement.json"
DEFAULT_TIMEOUT_S = 300.0  # for one host's part of a swap-in or swap-out


class ClusterBackend:
    """Experiments over the hosts whose agents are connected to the scheduler at ``scheduler``."""

    name = "cluster"

    def __init__(
        self,
        scheduler: str,
        *,
        underlay_mtu: int = DEFAULT_UNDERLAY_MTU,
        port: int = DEFAULT_PORT,
        state_root: Path = STATE_ROOT,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ):
        self.scheduler = scheduler
        self.underlay_mtu, self.port = underlay_mtu, port
        self.state_root = state_root
        self.timeout_s = timeout_s
        self._client: Any = None

    # -- connection ------------------------------------------------------------------------

    def client(self) -> Any:
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
        if self._client is not None:
            self._client.close()
            self._client = None

    def __enter__(self) -> ClusterBackend:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def hosts(self) -> list[str]:
        """The hosts whose agents are connected now."""
        workers = self.client().scheduler_info(n_workers=-1)["workers"].values()
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

    def _on_hosts(self, function: Callable[..., Any], args: dict[str, tuple[Any, ...]]) -> dict:
        """``function(*args[h])`` on every host ``h`` at once; each host's result or the
        exception it raised (or a timeout)."""
        client = self.client()
        live = set(self.hosts())
        results: dict[str, Any] = {
            h: EnvironmentProblem(f"host {h} has no agent connected; start `nestbed agent` there")
            for h in args
            if h not in live
        }  # rather than wait for one until the timeout: work for it would never start
        futures = {
            h: client.submit(function, *a, resources={agent.resource(h): 1}, pure=False)
            for h, a in args.items()
            if h in live
        }
        from distributed import wait

        with contextlib.suppress(TimeoutError):  # one deadline for all hosts together
            wait(list(futures.values()), timeout=self.timeout_s)
        for h, future in futures.items():
            if not future.done():
                future.cancel()
                results[h] = TimeoutError(f"no answer within {self.timeout_s:g} s")
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
            raise EnvironmentProblem(f"host {h} did not report its facts: {_reason(exc)}") from exc
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
        return kept["nodes"], Underlay(kept["addresses"], kept["mtu"], kept["port"])

    def swap_in(self, plan: Plan) -> None:
        if plan.simulation is not None:
            raise UserError(
                f"experiment {plan.experiment} has simulated nodes (make-simulated), which run "
                "on one machine so far; swap it in with the linux back end"
            )
        facts = self.facts()
        if not facts:
            self.require_ready()
        nodes = place(plan, facts)
        underlay = Underlay({f.name: f.address for f in facts}, self.underlay_mtu, self.port)
        parts = shares(plan, nodes, underlay)
        directory = self.run_dir(plan)
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        (directory / PLACEMENT).write_text(json.dumps({
            "nodes": nodes, "addresses": underlay.addresses, "mtu": underlay.mtu,
            "port": underlay.port,
        }))  # fmt: skip
        answers = self._on_hosts(host.swap_in, {h: (part,) for h, part in parts.items()})
        failed = {h: a for h, a in answers.items() if isinstance(a, BaseException)}
        if failed:
            undone = self._on_hosts(host.swap_out, {h: (part,) for h, part in parts.items()})
            stuck = sorted(h for h, a in undone.items() if isinstance(a, BaseException))
            if stuck:  # the placement stays, so that swap-out can try again
                after = (f"host {', '.join(stuck)} could not remove its part; run "
                         "`nestbed swapout` again")  # fmt: skip
            else:
                shutil.rmtree(directory, ignore_errors=True)
                after = "every host removed what it had created"
            h, exc = next(iter(failed.items()))
            raise EnvironmentProblem(
                f"swap-in of experiment {plan.experiment} failed on host {h}: {_reason(exc)}; "
                + after
            ) from exc

    def swap_out(self, plan: Plan) -> None:
        kept = self.placement(plan)
        if kept is None:
            # Never swapped in from here (or its state is gone): every host removes whatever
            # it has of the experiment.
            self.remove_leftovers({plan.tag})
            return
        nodes, underlay = kept
        parts = shares(plan, nodes, underlay)
        answers = self._on_hosts(host.swap_out, {h: (part,) for h, part in parts.items()})
        failed = {h: a for h, a in answers.items() if isinstance(a, BaseException)}
        if failed:
            h, exc = next(iter(failed.items()))
            raise EnvironmentProblem(
                f"swap-out of experiment {plan.experiment} failed on host {h}: {_reason(exc)}; "
                "run `nestbed swapout` again"
            ) from exc
        shutil.rmtree(self.run_dir(plan), ignore_errors=True)

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
        h = self._host_of(plan, node)
        only = agent.node_only(plan, node)
        (answer,) = self._on_hosts(agent.exec_in, {h: (only, node, argv, run)}).values()
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def start_in(self, plan: Plan, node: str, argv: list[str], **popen: Any) -> subprocess.Popen:
        raise _not_yet("starting a long-running command in a node")

    def capture_argv(self, ifname: str, path: Path) -> list[str]:
        from nestbed.backend.linux import capture_argv

        return capture_argv(ifname, path)

    def open_socket(self, plan: Plan, node: str, kind: socket.SocketKind) -> socket.socket:
        raise _not_yet("opening a socket in a node")

    def linkd(self, plan: Plan) -> Channel:
        raise _not_yet("reaching the link emulators")

    def node_cgroup(self, plan: Plan, node: str) -> NodeCgroup | None:
        return None

    def wait_listening(
        self, process: subprocess.Popen, port: int, proto: str, timeout: float = 5
    ) -> None:
        raise _not_yet("waiting for a command in a node to listen")

    # -- what is left ----------------------------------------------------------------------

    def leftovers(self) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        answers = self._on_hosts(agent.leftovers, {h: () for h in self.hosts()})
        for h, answer in answers.items():
            for tag, things in ({} if isinstance(answer, BaseException) else answer).items():
                found.setdefault(tag, []).extend(f"host {h}: {t}" for t in things)
        return found

    def remove_leftovers(self, tags: set[str]) -> list[str]:
        answers = self._on_hosts(agent.remove_leftovers, {h: (tags,) for h in self.hosts()})
        return [f"host {h}: {t}" for h, a in answers.items() if isinstance(a, list) for t in a]

    def traces(self) -> list[str]:
        answers = self._on_hosts(agent.traces, {h: () for h in self.hosts()})
        return [f"host {h}: {t}" for h, a in answers.items() if isinstance(a, list) for t in a]


def _reason(exc: BaseException) -> str:
    """A host's failure as a sentence: nestbed's own as it is, anything else with its type
    (a timeout says nothing by its message alone)."""
    return str(exc) if isinstance(exc, NestbedError) else f"{type(exc).__name__}: {exc}"


def _not_yet(what: str) -> EnvironmentProblem:
    return EnvironmentProblem(
        f"{what} is not possible on a cluster yet; run this experiment on one host"
    )
