"""The fake back end: records what a swap-in would create instead of creating it, so the
life cycle, the controller and the instruments are tested without root.

Its state is files under its root (``$NESTBED_FAKE_ROOT``), so the controller process of an
experiment sees the same fake machine as the command that swapped it in: ``journal.jsonl``
lists every operation in order; ``EXP/network.json`` is a swapped-in network;
``EXP/linkd.jsonl`` every request its link emulator got. Commands "in a node" run as plain
local processes (no namespace, no cgroup). ``fail`` names operations that raise, as the Linux
back end does when the machine refuses, to test rollback.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nestbed.backend.cgroups import NodeCgroup
from nestbed.backend.plan import Plan
from nestbed.backend.sockets import wait_listening as _wait_listening
from nestbed.errors import EnvironmentProblem, UserError

if TYPE_CHECKING:
    from nestbed.model.options import RunAs

ROOT_ENV = "NESTBED_FAKE_ROOT"
FAIL_ENV = "NESTBED_FAKE_FAIL"  # comma-separated operations that fail, for child processes
_ZERO = {
    "packets_in": 0, "bytes_in": 0, "packets_out": 0, "bytes_out": 0, "queue_packets": 0,
    "queue_bytes": 0,
    "drops": {"loss": 0, "queue_full": 0, "red_early": 0, "red_forced": 0, "ordinal": 0},
}  # fmt: skip


class FakeBackend:
    """A machine that only writes down what it was asked to do."""

    name = "fake"
    link_lead_s = 0.0  # its link emulator records requests at once
    work_elsewhere = False  # its commands are local processes

    def __init__(self, root: Path | None = None, fail: Iterable[str] = ()):
        found = root or os.environ.get(ROOT_ENV) or Path(tempfile.gettempdir()) / "nestbed-fake"
        self.state_root = Path(found)
        self.state_root.mkdir(parents=True, exist_ok=True)
        env_fail = os.environ.get(FAIL_ENV, "")
        self.fail = set(fail) | {f for f in env_fail.split(",") if f}

    # -- the journal ------------------------------------------------------------------------

    def _record(self, op: str, **fields: Any) -> None:
        with (self.state_root / "journal.jsonl").open("a") as journal:
            journal.write(json.dumps({"op": op, **fields}, default=str) + "\n")
        if op in self.fail:
            raise EnvironmentProblem(f"the fake machine refused {op} (as asked by the test)")

    def journal(self) -> list[dict[str, Any]]:
        path = self.state_root / "journal.jsonl"
        return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []

    # -- Backend ----------------------------------------------------------------------------

    def placement_facts(self, plan: Plan) -> dict[str, Any]:
        return {}

    def require_ready(self) -> None:
        self._record("require_ready")

    def run_dir(self, plan: Plan) -> Path:
        return self.state_root / plan.experiment

    def swap_in(self, plan: Plan) -> None:
        directory = self.run_dir(plan)
        if (directory / "network.json").exists():
            raise EnvironmentProblem(
                f"the fake network of experiment {plan.experiment} already exists"
            )
        directory.mkdir(parents=True, exist_ok=True)
        try:
            self._record("swap_in", experiment=plan.experiment, nodes=len(plan.nodes))
            network = {"tag": plan.tag, "namespaces": list(plan.namespaces),
                       "links": [e.link for e in plan.emulated]}  # fmt: skip
            (directory / "network.json").write_text(json.dumps(network))
        except BaseException:
            shutil.rmtree(directory, ignore_errors=True)
            raise

    def swap_out(self, plan: Plan) -> None:
        self._record("swap_out", experiment=plan.experiment)
        shutil.rmtree(self.run_dir(plan), ignore_errors=True)

    def start_in(self, plan: Plan, node: str, argv: list[str], **popen: Any) -> subprocess.Popen:
        self._node(plan, node)
        self._record("start_in", experiment=plan.experiment, node=node, argv=argv)
        return subprocess.Popen(argv, **popen)

    def entering(self, plan: Plan, node: str) -> list[str] | None:
        # Its nodes are this machine as it is: a command enters them unchanged.
        self._node(plan, node)
        self._record("entering", experiment=plan.experiment, node=node)
        return []

    def exec_in(
        self, plan: Plan, node: str, argv: list[str], **run: Any
    ) -> subprocess.CompletedProcess:
        self._node(plan, node)
        self._record("exec_in", experiment=plan.experiment, node=node, argv=argv)
        return subprocess.run(argv, **run)

    def confine(self, run_as: RunAs, argv: list[str]) -> list[str]:
        # The fake has no users: its commands run as whoever runs the tests. It writes down
        # who they were to run as, and runs them unchanged.
        self._record("confine", uid=run_as.uid, gid=run_as.gid, argv=argv)
        return argv

    def hand_over(self, path: Path, run_as: RunAs) -> None:
        self._record("hand_over", path=str(path), uid=run_as.uid, gid=run_as.gid)

    def work_folder(self, path: Path, run_as: RunAs | None) -> None:
        if run_as is not None:
            self.hand_over(path, run_as)

    def bring_back(self, plan: Plan, folders: dict[str, Path], run_as: RunAs | None) -> list[str]:
        self._record("bring_back", folders={n: str(f) for n, f in folders.items()})
        return []

    def capture_argv(self, ifname: str, path: Path) -> list[str]:
        # An empty capture that lasts until it is stopped, as tcpdump's would on a quiet link.
        # The path is an argument, never part of the script: no name can become a command.
        return ["sh", "-c", ': > "$1"; exec sleep 86400', "sh", str(path)]

    def open_socket(self, plan: Plan, node: str, kind: socket.SocketKind) -> socket.socket:
        self._node(plan, node)
        return socket.socket(socket.AF_INET, kind)

    def linkd(self, plan: Plan) -> FakeLinkd:
        if not (self.run_dir(plan) / "network.json").exists():
            raise FileNotFoundError(f"no fake network of experiment {plan.experiment}")
        return FakeLinkd(self.run_dir(plan) / "linkd.jsonl", plan)

    def simulator(self, plan: Plan) -> Any:
        from nestbed.backend.sim import LocalSimulator

        return LocalSimulator(self.run_dir(plan))  # none runs: a request finds no socket

    def node_cgroup(self, plan: Plan, node: str) -> NodeCgroup | None:
        return None

    def wait_listening(
        self, process: subprocess.Popen, port: int, proto: str, timeout: float = 5
    ) -> None:
        _wait_listening(process, port, proto, timeout)

    def leftovers(self) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        for network in sorted(self.state_root.glob("*/network.json")):
            data = json.loads(network.read_text())
            found.setdefault(data["tag"], []).extend(data["namespaces"])
        return found

    def remove_leftovers(self, tags: set[str]) -> list[str]:
        removed = []
        for network in sorted(self.state_root.glob("*/network.json")):
            data = json.loads(network.read_text())
            if data["tag"] in tags:
                self._record("remove", experiment=network.parent.name)
                shutil.rmtree(network.parent, ignore_errors=True)
                removed += data["namespaces"]
        return removed

    def traces(self) -> list[str]:
        return [f"{tag}: {', '.join(objs)}" for tag, objs in self.leftovers().items()]

    def _node(self, plan: Plan, node: str) -> None:
        if node not in {n.name for n in plan.nodes}:
            raise UserError(f"experiment {plan.experiment} has no node '{node}'")


class FakeLinkd:
    """The fake link emulator: accepts linkd's requests, writes them down, counts nothing."""

    def __init__(self, log: Path, plan: Plan):
        self.log, self.plan = log, plan

    def request(self, op: str, **fields: Any) -> dict[str, Any]:
        with self.log.open("a") as out:
            out.write(json.dumps({"op": op, **fields}) + "\n")
        if op == "counters":
            links = {
                e.link: {"ports": {p.port: {"egress": {"counters": dict(_ZERO)},
                                            "ingress": {"counters": dict(_ZERO)}}
                                   for p in e.ports}}
                for e in self.plan.emulated
            }  # fmt: skip
            return {"ok": True, "links": links}
        return {"ok": True}

    def requests(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(x) for x in self.log.read_text().splitlines()]

    def close(self) -> None:
        pass
