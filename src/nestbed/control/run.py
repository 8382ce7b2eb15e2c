"""One run of an active experiment, as its controller carries it out: built from a
``ControllerStart``, it writes the manifest, starts the flows' receivers, the captures and
the CPU monitors, runs the event list from t0, samples every second, answers `status`, and at
the end stops everything and writes every table and the report."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nestbed.backend import kept
from nestbed.backend.base import LOCAL_LEAD_S, Backend
from nestbed.backend.cgroups import NodeCgroup
from nestbed.backend.confine import user_command
from nestbed.backend.spawner import Spawner
from nestbed.binaries import built_binary
from nestbed.control.actions import Actions
from nestbed.control.captures import Captures
from nestbed.control.collector import close_run, collect_traffic, tcp_tables
from nestbed.control.cpumon import CPU_COLUMNS, CpuMonitor
from nestbed.control.links import LinkStates
from nestbed.control.linktests import Linktests
from nestbed.control.programs import OUTPUT_LIMIT, ProgramRunner, Pumped, Started
from nestbed.control.requests import Event
from nestbed.control.sampler import Sampler
from nestbed.control.scheduler import Pending, Scheduler
from nestbed.control.simlag import SimulationLag
from nestbed.control.simulated import SimulatedPart, SimulatedProcess
from nestbed.control.traffic import CbrFlow, Flow, FtpFlow
from nestbed.errors import Refused
from nestbed.model import Action, Experiment, Program
from nestbed.model.events import check_event
from nestbed.model.options import ControllerStart
from nestbed.results import manifest
from nestbed.results.folder import RunFolder
from nestbed.results.tables import EVENT_COLUMNS, PROGRAM_COLUMNS, Table

STARTCMD = "startcmd-"  # a node's startcmd runs as the program startcmd-NODE at t0


class Run:
    """One run: every object of the experiment and the tables they write."""

    def __init__(self, backend: Backend, start: ControllerStart):
        self.backend, self.start_doc, self.options = backend, start, start.options
        # The plan swap-in kept beside the IR (computing it again takes seconds on large ones).
        found = kept.load(start.ir.parent, start.ir.read_text())
        assert found is not None
        self.exp, self.plan = found
        self.run_id = start.run_id
        self.folder = RunFolder(start.results).make()
        self.finished = threading.Event()  # the run's results are all written
        self.outcome: dict[str, Any] = {}
        self.t0_unix = time.time()
        manifest.start(
            self.folder.root, self.exp, run_id=start.run_id,
            seeds={e.link: e.seed for e in self.plan.emulated},
            binaries=self._binaries(), options=self._manifest_options(),
            placement=(placement := backend.placement_facts(self.plan)),
        )  # fmt: skip
        # Each node's host's monotonic clock less this machine's (a cluster's, measured at
        # swap-in; on one host there is one clock): what the probes' stamps are corrected by.
        self.clock_offsets_ns = {
            node: (facts.get("monotonic_offset_s") or 0.0) * 1e9
            for facts in placement.get("hosts", {}).values() for node in facts.get("nodes", [])
        }  # fmt: skip
        self.scheduler = Scheduler(self._perform, self.lead_s)
        self.events = Table(self.folder.events, EVENT_COLUMNS)
        self.program_rows = Table(self.folder.programs_table, PROGRAM_COLUMNS)
        found = {n.name: backend.node_cgroup(self.plan, n.name) for n in self.plan.nodes}
        self.cgroups: dict[str, NodeCgroup] = {n: cg for n, cg in found.items() if cg}
        self.simulator = backend.simulator(self.plan)
        self.simulated = SimulatedPart(self.plan, self.simulator)
        self.links = LinkStates(self.exp, self.plan, backend, self.simulated)
        self.sampler = Sampler(
            backend, self.plan, self.folder, self.cgroups, self.now_s,
            lambda link: self.links.state.get(link, "up"), self.simulated.counters,
        )  # fmt: skip
        self.cpu_rows = Table(self.folder.node_cpu, CPU_COLUMNS) if self.options.cpumon else None
        addresses = self.exp.addresses()
        self.monitors = [
            CpuMonitor(node, addresses.get(node, []), self.cgroups.get(node), self.cpu_rows,
                       self.now_s)
            for node in self.options.cpumon if self.cpu_rows is not None
        ]  # fmt: skip
        self.workdirs = self._workdirs()
        self.programs = {
            p.name: ProgramRunner(p, self.folder, self.start_program, self.scheduler.since_t0,
                                  self.program_rows.add, workdir=self.workdirs.get(p.node))
            for p in (*self.exp.programs, *_startcmds(self.exp))
        }  # fmt: skip
        # How a command enters each node of a program from this machine (its cgroup and
        # namespace), found once: where it can, nestbed-spawn starts the program (``_start``).
        self.entering: dict[str, list[str]] = {
            node: found
            for node in {p.program.node for p in self.programs.values()} - self.simulated.nodes
            if (found := backend.entering(self.plan, node)) is not None
        }
        self.spawner: Spawner | None = None
        for program in self.programs.values() if self.options.run_as else ():
            self.writable(program.own, folder=True)  # metrics.json and the like
        self.flows = self._flows()
        self.captures = Captures(
            backend, self.plan, self.folder, self.options.capture_nodes, self.spawn
        )
        self.linktests = Linktests(backend.name, backend.run_dir(self.plan), self.folder)
        self.simulation_lag = SimulationLag(self.plan, self.simulator)
        self.actions = Actions(
            self.exp, self.scheduler, self.links, self.flows, self.programs, self.linktests,
            self.events, self._end_by_event,
        )  # fmt: skip

    def _binaries(self) -> dict[str, str]:
        names = ("nestbed-linkd", "nestbed-probe", "nestbed-spawn")
        found = {name: built_binary(name) for name in names}
        found["iperf3"] = "iperf3"
        if self.plan.simulation is not None:
            found["nestbed-sim"] = built_binary("nestbed-sim")
        if self.options.cpumon:
            found["nestbed-cpumon"] = built_binary("nestbed-cpumon")
        return found

    def _manifest_options(self) -> dict[str, Any]:
        options = self.options
        found: dict[str, Any] = {"capture": options.capture}
        if options.cpumon:
            found |= {"cpumon": list(options.cpumon), "cpumon_duty": options.cpumon_duty}
        if options.capture and options.capture_nodes:
            found["capture_nodes"] = list(options.capture_nodes)
        if self.start_doc.reused_runs:
            # A sweep's link-reuse mode: the network (and linkd's cumulative counters) served
            # this many runs before this one; only link shaping was reset in between.
            found["reused_network_runs_before"] = self.start_doc.reused_runs
        return found

    # -- processes in nodes (what flows, programs, captures and monitors start with) --------

    def spawn(
        self, node: str, argv: list[str], output: Path | None = None, **kwargs: Any
    ) -> subprocess.Popen | SimulatedProcess:
        """Starts argv in a node; ``output`` takes stdout, stderr beside it (.stderr). In a
        simulated node, nestbed-sim runs it (a traffic tool; nothing else runs there) and
        writes its summary to ``output``."""
        if node in self.simulated.nodes and output is not None:
            return self.simulated.spawn(node, argv, output)
        if output is not None:
            kwargs["stdout"] = output.open("wb")
            kwargs["stderr"] = output.with_name(output.name + ".stderr").open("wb")
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        try:
            return self.backend.start_in(self.plan, node, argv, **kwargs)
        finally:
            if output is not None:
                kwargs["stdout"].close()
                kwargs["stderr"].close()

    def spawn_user(
        self, node: str, argv: list[str], output: Path | None = None, **kwargs: Any
    ) -> subprocess.Popen | SimulatedProcess:
        """Starts one of the experiment's own processes (a program, a start command, a
        traffic tool) in a node: as the controller in a local run; on a server as the
        project's identity (``RunOptions.run_as``), with only the environment it needs."""
        if self.options.run_as is None or node in self.simulated.nodes:  # nestbed-sim plays it
            return self.spawn(node, argv, output, **kwargs)
        argv, kwargs["env"] = self._as_user(node, argv, kwargs.get("env") or os.environ)
        return self.spawn(node, argv, output, **kwargs)

    def _as_user(
        self, node: str, argv: list[str], env: Mapping[str, str]
    ) -> tuple[list[str], Mapping[str, str]]:
        """argv and its environment as one of the experiment's own processes in ``node``
        runs them: unchanged in a local run, confined on a server."""
        if self.options.run_as is None:
            return argv, env
        return user_command(self.backend, self.options.run_as, argv, env, self.workdirs[node])

    def start_program(
        self,
        node: str,
        argv: list[str],
        env: dict[str, str],
        stdout: Path,
        stderr: Path,
        due: float | None = None,
    ) -> Started:
        """Starts a program (``ProgramRunner``) in a node, its output into ``stdout`` and
        ``stderr`` (at most OUTPUT_LIMIT bytes each), in a process group of its own, once its
        process has begun. By nestbed-spawn where the node is entered from this machine, at
        ``due`` (``time.monotonic()``) if given (``lead_s``); by the back end otherwise (a
        cluster's host, a simulated node), its output copied here."""
        entering = self.entering.get(node)
        if self.spawner is None or entering is None:
            assert due is None  # (no lead: ``lead_s``)
            process = self.spawn_user(
                node, argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                start_new_session=True,  # its own process group, so stop reaches its children
            )  # fmt: skip
            assert not isinstance(process, SimulatedProcess)  # (given no output file)
            return Pumped(process, stdout, stderr)
        argv, user_env = self._as_user(node, argv, env)
        return self.spawner.start(
            [*entering, *argv], user_env, stdout, stderr, OUTPUT_LIMIT, at=due
        )

    def lead_s(self, action: Action) -> float:
        """How long ahead of its time the scheduler hands ``action`` over: a link's hop to
        its emulators (a cluster's), or a program's start to nestbed-spawn, which forks it
        at its time however late the controller's threads run then (``LOCAL_LEAD_S``)."""
        runner = self.programs.get(action.object)
        if runner is not None and action.verb in ("start", "run"):
            return LOCAL_LEAD_S if runner.program.node in self.entering else 0.0
        return self.links.lead_s(action.object)

    def writable(self, path: Path, *, folder: bool = False) -> None:
        """Makes ``path`` (a folder, or an empty file) for one of the experiment's own
        processes to write in: the project's on a server (its folder stays root's)."""
        if folder:
            path.mkdir(parents=True, exist_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()
        if self.options.run_as is not None:
            self.backend.hand_over(path, self.options.run_as)

    def _workdirs(self) -> dict[str, Path]:
        """Each node's working folder (``work/NODE``) on a server, or where programs run on
        other machines (a cluster's hosts, which have not the controller's folder); none in
        a local run, whose programs start in the controller's folder."""
        if self.options.run_as is None and not self.backend.work_elsewhere:
            return {}
        found = {n.name: self.folder.work(n.name) for n in self.plan.nodes}
        for path in found.values():
            path.mkdir(parents=True, exist_ok=True)
            self.backend.work_folder(path, self.options.run_as)
        return found

    def listening(
        self, process: subprocess.Popen | SimulatedProcess, port: int, proto: str
    ) -> None:
        if isinstance(process, SimulatedProcess):
            return  # nestbed-sim answers once the tool's socket is bound
        self.backend.wait_listening(process, port, proto)

    def now_s(self) -> float:
        return self.scheduler.now_s()

    def clock_offset_ns(self, node: str) -> float:
        return self.clock_offsets_ns.get(node, 0.0)

    def _flows(self) -> dict[str, Flow]:
        agents = {a.name: a for a in self.exp.agents}
        flows: dict[str, Flow] = {}
        for index, app in enumerate(self.exp.applications):
            agent = agents[app.agent]
            peer = agents[agent.peer] if agent.peer else None
            if peer is None:
                continue
            address = next(
                p.ip for link in self.exp.all_links for p in link.ports if p.node == peer.node
            )
            cls = CbrFlow if app.kind == "cbr" else FtpFlow
            flow = cls(app, agent, agent.node, peer.node, address, index, self)
            ends = [n for n in (agent.node, peer.node) if n in self.simulated.nodes]
            if ends:  # its table row says so
                flow.notes.append(f"simulated: {' and '.join(ends)} in nestbed-sim")
            flows[app.name] = flow
        return flows

    # -- start ------------------------------------------------------------------------------

    def start(self) -> None:
        """Gets everything ready, then begins the event list and the samples at t0; a run
        that cannot start is ended as failed (nothing it started is left) and the error
        raised."""
        try:
            self._start()
        except BaseException as exc:
            with contextlib.suppress(Exception):
                self.finish("failed", f"the run could not start: {exc}")
            raise

    def _start(self) -> None:
        if self.entering:  # before t0: its start is no event's lateness
            self.spawner = Spawner(built_binary("nestbed-spawn"))
        for flow in self.flows.values():
            flow.prepare()
        if self.options.capture:
            self.captures.start()
        if self.monitors:
            binary = built_binary("nestbed-cpumon")
            for monitor in self.monitors:
                monitor.start(self.spawn, binary, self.options.cpumon_duty)
        for event in self.exp.events:
            self.scheduler.push(event, "static", event.time_s)
        for name in self.programs:
            if name.startswith(STARTCMD):
                self.scheduler.push(Action(object=name, verb="start"), "static", 0.0)
        self.scheduler.begin()
        self.t0_unix = time.time()  # captures are stamped in Unix time
        self.sampler.start(self.scheduler.t0)

    def _perform(
        self, action: Action, source: str, planned_s: float | None, due: float | None
    ) -> object:
        return self.actions.perform(action, source, planned_s, due)

    # -- requests ---------------------------------------------------------------------------

    def event(self, request: Event) -> dict[str, Any]:
        """An event from outside: carried out now (its row) or scheduled (when)."""
        if self.scheduler.ending:
            raise Refused("the run has ended; no more events are accepted")
        problems = check_event(self.exp, request.object, request.verb, request.args)
        if problems:
            raise Refused(problems[0])
        action = Action(object=request.object, verb=request.verb, args=request.args)
        if request.after_s <= 0:
            return {"event": self.actions.perform(action, "dynamic", self.now_s())}
        at = self.now_s() + request.after_s
        self.scheduler.push(action, "dynamic", at)
        return {"scheduled_s": round(at, 3)}

    def status(
        self, links: tuple[str, ...] | None = None, top: int | None = None
    ) -> dict[str, Any]:
        """The run now; the pipes' counters of ``links`` only, or the ``top`` that matter
        most (see ``requests.Status``), with ``pipes_total`` saying how many there were."""
        counters, total, unanswered = self.sampler.chosen(links=links, top=top)
        upcoming = self.scheduler.upcoming()
        static = [p for p in upcoming if p.source in ("static", "timeline")]
        return {
            "experiment": self.exp.name,
            "run_id": self.run_id,
            "results": str(self.folder.root),
            "elapsed_s": round(self.now_s(), 3),
            "finished": self.finished.is_set(),
            "outcome": self.outcome,
            "pending_events": len(static),
            "upcoming": [
                {
                    "at_s": round(p.planned_s, 3),
                    "object": p.action.object,
                    "verb": p.action.verb,
                    "args": list(p.action.args),
                }
                for p in upcoming[:10]
            ],
            "busy": bool(static)
            or any(p.running for p in self.programs.values())
            or bool(self.actions.sequences),
            **self.links.now(),
            "linktests": self.linktests.finished(),
            "link_counters": counters,
            "link_counters_unanswered": unanswered,
            "pipes_total": total,
            "programs": [p.status() for p in self.programs.values()],
            "flows": [
                {
                    "flow": f.name,
                    "kind": f.kind,
                    "running": f.running,
                    "starts": sum(1 for s in f.sessions if s.sender),
                }
                for f in self.flows.values()
            ],
        }

    # -- the end ----------------------------------------------------------------------------

    def finish(self, outcome: str, reason: str | None) -> dict[str, Any]:
        """Ends the run (once; a second call waits for the first): stops programs, traffic,
        captures and monitors, writes every table, the manifest's end and the report."""
        skipped = self.scheduler.end()
        if skipped is None:
            self.finished.wait()
            return self.outcome
        try:
            self.outcome = self._wind_up(skipped, outcome, reason)
        except BaseException as exc:
            # A bug while ending: the manifest says so (keeping everything written until
            # then), later finish requests do not wait forever, the request gets the error.
            said = f"the controller failed while ending the run: {type(exc).__name__}: {exc}"
            with contextlib.suppress(Exception):
                self.sampler.stop()
            with contextlib.suppress(Exception):
                manifest.end(self.folder.root, "failed", said, self.now_s())
            self.outcome = {"outcome": "failed", "reason": said, "results": str(self.folder.root)}
            raise
        finally:
            self.finished.set()
        return self.outcome

    def _wind_up(self, skipped: list[Pending], outcome: str, reason: str | None) -> dict[str, Any]:
        for item in self.scheduler.unanswered:
            self.actions.unanswered(item.action, item.source, item.planned_s, item.due)
        for item in skipped:
            self.actions.skipped(item.action, item.source, item.planned_s)
        self.actions.stop_sequences()
        stopping = [
            threading.Thread(target=prog.stop_all, name=f"stop-{prog.name}")
            for prog in self.programs.values()
        ]  # each may wait its grace: all at once
        for thread in stopping:
            thread.start()
        for thread in stopping:
            thread.join()
        self.linktests.wait()
        problems = collect_traffic(self.flows.values(), self.folder, self.scheduler.t0)
        for monitor in self.monitors:
            monitor.stop()
        self.captures.stop()
        # Every process of the experiment has ended: what they left where they ran comes
        # into the results (a cluster's hosts), before the next run or swap-out removes it.
        problems += self.backend.bring_back(self.plan, self.workdirs, self.options.run_as)
        if self.options.capture:
            problems += tcp_tables(
                self.flows.values(), self.captures, self.exp, self.folder, self.t0_unix
            )
        problems += self.simulation_lag.record(self.folder)
        duration = self.now_s()
        self.sampler.stop()
        for table in (self.events, self.program_rows, self.cpu_rows):
            if table is not None:
                table.close()
        if problems:
            reason = "; ".join(filter(None, [reason, *problems]))
        reason = close_run(self.folder, outcome, reason, duration, report=self.options.report)
        return {"outcome": outcome, "reason": reason, "results": str(self.folder.root)}

    def _end_by_event(self, verb: str, outcome: str, reason: str) -> None:
        self.finish(outcome, reason)
        if verb == "swapout":
            # Swapping out stops this process, so it is left to a separate one.
            subprocess.Popen(
                [sys.executable, "-m", "nestbed", "swapout", self.exp.name],
                start_new_session=True,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )

    def retire(self) -> None:
        """After the run finished: ends its event threads and closes its connections."""
        self.scheduler.retire()
        if self.spawner is not None:
            self.spawner.close()
        self.links.close()
        self.sampler.close()
        self.simulated.close()


def _startcmds(exp: Experiment) -> list[Program]:
    return [
        Program(name=f"{STARTCMD}{node.name}", node=node.name, command=node.startcmd)
        for node in exp.nodes
        if node.startcmd
    ]
