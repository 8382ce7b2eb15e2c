"""The one narrow interface between the experiment life cycle and a place where experiments
live (this machine with Linux namespaces, a recording fake for tests, a cluster next).

A back end makes a swap-in plan real and takes it away again, starts and runs commands in a
plan's nodes, and reaches the plan's link emulator; everything it makes carries the
experiment's tag, so it can also say what is left of experiments nobody owns any more.
Everything above it (lifecycle, controller, instruments) reaches the machine only through
this protocol, and picks an implementation by name with ``nestbed.backend.get``.
"""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from nestbed.backend.cgroups import NodeCgroup
from nestbed.backend.linkd import Channel
from nestbed.backend.plan import Plan

if TYPE_CHECKING:
    from nestbed.backend.sim import Simulator
    from nestbed.model.options import RunAs


# How long ahead of its time the controller hands a change to a daemon on this machine that
# makes it at that time itself (a program's start to nestbed-spawn, a link event to
# nestbed-linkd): more than the controller's threads take to get it there on a loaded
# machine, little enough that a program's start refused as still running (its last
# invocation ending within it) stays rare.
LOCAL_LEAD_S = 0.05


class Backend(Protocol):
    """Where an experiment's network lives."""

    name: str  # "linux", "fake": recorded with the experiment, read by its controller
    state_root: Path  # where run_dir()s and the life cycle's locks live
    # How long ahead of its time a link event is handed to the link emulators, which take it
    # with its time and apply it then (``linkd.TimedChannel``): a hop for a cluster's hosts,
    # ``LOCAL_LEAD_S`` for this machine's nestbed-linkd; 0 where they take it only at once.
    link_lead_s: float
    # Whether a node's programs may run where the results folder is not (a cluster's other
    # hosts): then every run gives each node a working folder (``work_folder``), confined or
    # not, and ``bring_back`` copies what was left there into the results at the run's end.
    work_elsewhere: bool

    def require_ready(self) -> None:
        """One sentence (EnvironmentProblem) if this back end cannot build networks here."""

    def run_dir(self, plan: Plan) -> Path:
        """The experiment's private state folder while it is swapped in (sockets, pids)."""

    def swap_in(self, plan: Plan) -> None:
        """Creates everything in ``plan``; on failure removes what it made and re-raises."""

    def swap_out(self, plan: Plan) -> None:
        """Removes everything ``plan`` creates; safe on a partial or absent swap-in."""

    def start_in(self, plan: Plan, node: str, argv: list[str], **popen: Any) -> subprocess.Popen:
        """Starts a command in a node (its namespace and cgroup) without waiting for it."""

    def entering(self, plan: Plan, node: str) -> list[str] | None:
        """The argv that, followed by a command, runs it in a node from a process on this
        machine, as ``start_in`` does (for nestbed-spawn, which starts programs outside the
        controller: ``backend.spawner``); None where the node's commands start only through
        ``start_in`` (a cluster's hosts)."""

    def exec_in(
        self, plan: Plan, node: str, argv: list[str], **run: Any
    ) -> subprocess.CompletedProcess:
        """Runs a command in a node and waits for it, keeping argv, status and output."""

    def confine(self, run_as: RunAs, argv: list[str]) -> list[str]:
        """argv as the command that runs it in a node as ``run_as`` (no groups, no
        capabilities, no new privileges), for ``start_in``: an experiment's own processes."""

    def hand_over(self, path: Path, run_as: RunAs) -> None:
        """Makes a folder or file the controller made (as root) ``run_as``'s own, for the
        experiment's processes to write in."""

    def work_folder(self, path: Path, run_as: RunAs | None) -> None:
        """Makes ``path`` (made by the controller, in the results) a node's working folder of
        the run: ``run_as``'s own if confined (``hand_over``); where the node's programs run
        elsewhere, also the folder whose host's own the commands that name it start in."""

    def bring_back(self, plan: Plan, folders: dict[str, Path], run_as: RunAs | None) -> list[str]:
        """At the run's end, copies what the experiment's processes left in each node's
        working folder where they ran into ``folders[node]`` (``run_as``'s own if confined),
        never following what they planted, and removes it there; one sentence per node for
        what was left out. Nothing where they wrote in ``folders[node]`` itself."""

    def capture_argv(self, ifname: str, path: Path) -> list[str]:
        """The command that captures every frame on a node's interface into ``path``."""

    def open_socket(self, plan: Plan, node: str, kind: socket.SocketKind) -> socket.socket:
        """An IPv4 socket of ``kind`` in the node's network (unbound)."""

    def linkd(self, plan: Plan) -> Channel:
        """A client of the experiment's running link emulator."""

    def simulator(self, plan: Plan) -> Simulator:
        """The experiment's nestbed-sim (its simulated nodes), connected when first asked."""

    def node_cgroup(self, plan: Plan, node: str) -> NodeCgroup | None:
        """The node's cgroup, or None where it has none."""

    def wait_listening(
        self, process: subprocess.Popen, port: int, proto: str, timeout: float = 5
    ) -> None:
        """Waits until ``process`` has a ``proto`` socket bound to ``port``."""

    def placement_facts(self, plan: Plan) -> dict[str, Any]:
        """Where the swapped-in experiment lives, for its runs' manifests (a cluster's hosts,
        their nodes and clock offsets); empty on one machine."""

    def leftovers(self) -> dict[str, list[str]]:
        """What experiments of this back end have on the machine now, by experiment tag."""

    def remove_leftovers(self, tags: set[str]) -> list[str]:
        """Removes everything of the experiments with these tags (their namespaces, daemons,
        cgroups, state folders); returns what it removed. Nothing of any other tag."""

    def traces(self) -> list[str]:
        """Everything of any experiment that exists now (what a leak test compares)."""
