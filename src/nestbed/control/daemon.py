"""The controller of one active experiment: a background process that runs the event list on
time, starts programs and traffic in their nodes, applies link events through nestbed-linkd,
samples counters every second, answers on a root-only socket and writes the run's results."""

from __future__ import annotations

import argparse
import contextlib
import heapq
import itertools
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nestbed.backend import linux
from nestbed.backend.cgroups import NodeCgroup
from nestbed.backend.linkd import drops_by_kind, pipe_counters, set_changed_pipes
from nestbed.backend.plan import PipeSettings, Plan, pipe_params, plan
from nestbed.backend.sockets import SocketClient
from nestbed.binaries import built_binary
from nestbed.control.client import SOCKET
from nestbed.control.cpumon import CPU_COLUMNS, DEFAULT_DUTY, CpuMonitor
from nestbed.control.programs import ProgramRunner
from nestbed.control.traffic import CbrFlow, Flow, FtpFlow
from nestbed.errors import NestbedError
from nestbed.model import Action, Experiment, Link
from nestbed.model.events import LINKTEST_DEFAULT, check_event, link_after_event
from nestbed.results import manifest
from nestbed.results.tables import (
    EVENT_COLUMNS,
    FLOW_COLUMNS,
    FLOW_SERIES_COLUMNS,
    LINK_COLUMNS,
    NODE_COLUMNS,
    PROGRAM_COLUMNS,
    Table,
    write_table,
)

_SPIN_S = 0.002  # the scheduler sleeps until this close to an event, then spins
_DRAIN_S = 0.5  # after the last sender stops, time for packets in flight to arrive


@dataclass(order=True)
class Pending:
    due: float  # time.monotonic()
    seq: int
    action: Action = field(compare=False)
    source: str = field(compare=False)
    planned_s: float = field(compare=False)
    timeline: str | None = field(compare=False, default=None)


LINKTEST_WAIT_S = 120  # a run that ends during a linktest waits this long for its report


class Controller:
    def __init__(
        self,
        exp: Experiment,
        run: Path,
        *,
        run_id: int | None,
        capture: bool,
        reused: int = 0,
        report: bool = True,
        cpumon: tuple[str, ...] = (),
        cpumon_duty: float = DEFAULT_DUTY,
        capture_nodes: tuple[str, ...] = (),  # empty: every node's link ends
    ):
        self.exp, self.run, self.run_id, self.capture = exp, run, run_id, capture
        self.cpumon_duty, self.capture_nodes = cpumon_duty, capture_nodes
        self.report = report
        self.plan: Plan = plan(exp)
        self.directory = linux.run_dir(self.plan)
        self.lock = threading.RLock()
        self.wake = threading.Condition(self.lock)
        self.queue: list[Pending] = []
        self.workers: dict[str, queue.SimpleQueue[Pending | None]] = {}
        self.linkd_client: SocketClient | None = None  # for link events, kept open
        self.linkd_lock = threading.Lock()
        self.seq = itertools.count()
        self.ending = False
        self.finished = threading.Event()  # the run's results are all written
        self.sampling = threading.Event()  # set: the sampler stops
        self.outcome: dict[str, Any] = {}
        self.links = {link.name: link for link in exp.all_links}
        self.link_state = {name: "up" for name in self.links}
        self.emulated = {e.link for e in self.plan.emulated}
        self.cgroups = _cgroups(self.plan)
        self.timelines_pending: dict[str, int] = {}
        self.sequences: dict[str, threading.Event] = {}  # name -> stop flag, while running
        self.processes: list[subprocess.Popen] = []  # captures
        self.linktest_threads: list[threading.Thread] = []
        self.linktests: list[dict[str, Any]] = []  # summaries of finished linktests
        self.t0 = time.monotonic()
        run.mkdir(parents=True, exist_ok=True)
        binaries = {"nestbed-linkd": built_binary("nestbed-linkd")}
        binaries |= {"nestbed-probe": built_binary("nestbed-probe"), "iperf3": "iperf3"}
        if cpumon:
            binaries["nestbed-cpumon"] = built_binary("nestbed-cpumon")
        seeds = {e.link: e.seed for e in self.plan.emulated}
        options: dict[str, Any] = {"capture": capture}
        if cpumon:
            options |= {"cpumon": list(cpumon), "cpumon_duty": cpumon_duty}
        if capture and capture_nodes:
            options["capture_nodes"] = list(capture_nodes)
        if reused:
            # A sweep's link-reuse mode: the network (and linkd's cumulative counters) served
            # this many runs before this one; only link shaping was reset in between.
            options["reused_network_runs_before"] = reused
        manifest.start(run, exp, run_id=run_id, seeds=seeds, binaries=binaries, options=options)
        self.events = Table(run / "events.csv", EVENT_COLUMNS)
        self.program_rows = Table(run / "programs.csv", PROGRAM_COLUMNS)
        self.link_rows = Table(run / "links" / "counters.csv", LINK_COLUMNS)
        self.node_rows = Table(run / "nodes" / "usage.csv", NODE_COLUMNS)
        self.cpu_rows = Table(run / "nodes" / "cpu.csv", CPU_COLUMNS) if cpumon else None
        self.monitors = [
            CpuMonitor(node, exp.addresses().get(node, []), self.cgroups.get(node), self.cpu_rows,
                       self.now_s)
            for node in cpumon if self.cpu_rows is not None
        ]  # fmt: skip
        self.event_index = itertools.count()
        self.programs = {
            p.name: ProgramRunner(p, run, self.spawn, self.now_s, self.program_rows.add)
            for p in exp.programs
        }
        for node in exp.nodes:
            if node.startcmd:
                prog = _startcmd(node.name, node.startcmd)
                self.programs[prog.name] = ProgramRunner(
                    prog, run, self.spawn, self.now_s, self.program_rows.add
                )
        self.flows = self._flows()

    # -- processes in nodes -----------------------------------------------------------------

    def spawn(
        self, node: str, argv: list[str], output: Path | None = None, **kwargs: Any
    ) -> subprocess.Popen:
        """Starts argv in a node (and its cgroup); ``output`` takes stdout, stderr beside it."""
        if output is not None:
            kwargs["stdout"] = output.open("wb")
            kwargs["stderr"] = output.with_name(output.name + ".stderr").open("wb")
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        try:
            return linux.start_in(self.plan, node, argv, **kwargs)
        finally:
            for stream in ("stdout", "stderr"):
                if output is not None:
                    kwargs[stream].close()

    def listening(self, process: subprocess.Popen, port: int, proto: str) -> None:
        linux.wait_listening(process, port, proto)

    def now_s(self) -> float:
        return time.monotonic() - self.t0

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
            flows[app.name] = cls(app, agent, agent.node, peer.node, address, index, self)
        return flows

    # -- start ------------------------------------------------------------------------------

    def start(self) -> None:
        for flow in self.flows.values():
            flow.prepare()
        if self.capture:
            self._start_captures()
        binary = built_binary("nestbed-cpumon") if self.monitors else ""
        for monitor in self.monitors:
            monitor.start(self.spawn, binary, self.cpumon_duty)
        self.t0 = time.monotonic()
        self.t0_unix = time.time()  # captures are stamped in Unix time
        for event in self.exp.events:
            self.push(event, "static", event.time_s)
        for prog in self.programs.values():
            if prog.name.startswith("startcmd-"):
                self.push(Action(object=prog.name, verb="start"), "static", 0.0)
        for item in self.queue:
            self._worker(item.action.object)  # threads ready before their first event
        threading.Thread(target=self._schedule, name="scheduler", daemon=True).start()
        threading.Thread(target=self._sample, name="sampler", daemon=True).start()

    def _start_captures(self) -> None:
        folder = self.run / "pcaps"
        folder.mkdir(exist_ok=True)
        for (link, node), ifname in sorted(self.plan.interfaces().items()):
            if self.capture_nodes and node not in self.capture_nodes:
                continue
            argv = linux.capture_argv(ifname, folder / f"{link}-{node}.pcap")
            process = self.spawn(node, argv, folder / f"{link}-{node}.log")
            self.processes.append(process)
        time.sleep(0.3)  # tcpdump needs a moment before it captures

    # -- the event list ---------------------------------------------------------------------

    def push(self, action: Action, source: str, at_s: float, timeline: str | None = None) -> None:
        with self.wake:
            if self.ending:
                raise ValueError("the run has ended; no more events are accepted")
            item = Pending(self.t0 + at_s, next(self.seq), action, source, at_s, timeline)
            heapq.heappush(self.queue, item)
            if timeline:
                self.timelines_pending[timeline] = self.timelines_pending.get(timeline, 0) + 1
            self.wake.notify()

    def _schedule(self) -> None:
        while True:
            with self.wake:
                while not self.ending and (
                    not self.queue or self.queue[0].due - time.monotonic() > _SPIN_S
                ):
                    wait = self.queue[0].due - time.monotonic() - _SPIN_S if self.queue else None
                    self.wake.wait(wait)
                if self.ending:
                    return
                item = heapq.heappop(self.queue)
            while time.monotonic() < item.due:
                pass
            self._worker(item.action.object).put(item)

    def _worker(self, obj: str) -> queue.SimpleQueue[Pending | None]:
        """The thread that carries out one object's events, in order.

        Starting a process takes milliseconds; with a thread per object, events due at the
        same time on different objects all begin on time.
        """
        if obj not in self.workers:
            self.workers[obj] = queue.SimpleQueue()
            threading.Thread(
                target=self._work, args=(self.workers[obj],), name=f"events-{obj}", daemon=True
            ).start()
        return self.workers[obj]

    def _work(self, items: queue.SimpleQueue[Pending | None]) -> None:
        while True:
            item = items.get()
            if item is None:  # retired: the next run of this process has its own threads
                return
            self.perform(item.action, item.source, item.planned_s)
            if item.timeline:
                with self.wake:
                    self.timelines_pending[item.timeline] -= 1
                    self.wake.notify_all()

    def perform(self, action: Action, source: str, planned_s: float | None) -> dict[str, Any]:
        """Carries out one action now and records it in events.csv."""
        actual = self.now_s()
        try:
            message = self.execute(action, source)
            outcome = "ok"
        except (ValueError, KeyError, OSError, NestbedError) as exc:
            message, outcome = str(exc), "error"
        row = {
            "index": next(self.event_index),
            "source": source,
            "planned_s": planned_s,
            "actual_s": actual,
            "error_ms": (actual - planned_s) * 1e3 if planned_s is not None else None,
            "object": action.object,
            "verb": action.verb,
            "args": " ".join(action.args),
            "outcome": outcome,
            "message": message,
        }
        self.events.add(row)
        return row

    def execute(self, action: Action, source: str) -> str:
        group = next((g for g in self.exp.groups if g.name == action.object), None)
        if group is not None:
            return "; ".join(
                self.execute(action.model_copy(update={"object": m}), source) for m in group.members
            )
        obj, verb, args = action.object, action.verb, action.args
        if obj in self.links:
            return self.link_event(obj, verb, args)
        if obj in self.flows:
            return self.flow_event(self.flows[obj], verb, args)
        if obj in self.programs:
            return self.program_event(self.programs[obj], verb, args, source)
        if obj == "ns":
            return self.ns_event(verb, args)
        if any(t.name == obj for t in self.exp.timelines):
            return self.timeline_event(obj, verb, source)
        if any(s.name == obj for s in self.exp.sequences):
            return self.sequence_event(obj, verb)
        if any(a.name == obj for a in self.exp.agents):
            return f"{obj} {' '.join(args)} recorded; agent variables do not change a real stack"
        raise ValueError(f"{obj} cannot be acted on by events")

    def link_event(self, name: str, verb: str, args: tuple[str, ...]) -> str:
        if name not in self.emulated:
            raise ValueError(
                f"link {name} is not emulated (it is unshaped and no event in the file names "
                "it), so it cannot change while active; give it a shaping or an event in the file"
            )
        with self.linkd_lock:
            if self.linkd_client is None:
                self.linkd_client = linux.linkd(self.plan)
            client = self.linkd_client
            if verb in ("up", "down"):
                fields = {"mode": "blackhole"} if verb == "down" else {}
                client.request(verb, link=name, **fields)
                self.link_state[name] = verb
                return f"link {name} is {verb}"
            before = self.links[name]
            after = link_after_event(before, self._original(name), verb, args)
            self.links[name] = after
            changed = set_changed_pipes(client, name, _settings(before), _settings(after))
            return f"{changed} pipes of {name} changed"

    def _original(self, name: str) -> Link:
        return next(link for link in self.exp.all_links if link.name == name)

    def flow_event(self, flow: Flow, verb: str, args: tuple[str, ...]) -> str:
        if verb == "start":
            flow.start()
        elif verb == "stop":
            flow.stop()
        elif verb == "set" and isinstance(flow, CbrFlow):
            flow.set(args[0], args[1])
        elif verb in ("produce", "send") and isinstance(flow, FtpFlow):
            amount = int(args[0]) * (flow.segment_bytes() if verb == "produce" else 1)
            flow.start(amount)
        elif verb == "reset":
            if flow.running:
                flow.stop()
        else:
            raise ValueError(f"{flow.kind} {flow.name} has no verb {verb}")
        return ""

    def program_event(
        self, prog: ProgramRunner, verb: str, args: tuple[str, ...], source: str
    ) -> str:
        if verb == "set":
            prog.set(args[0], args[1])
        elif verb in ("start", "run"):
            inv = prog.start()
            if verb == "run" and source == "sequence":
                prog.wait()
            return f"pid {inv.process.pid}"
        elif verb == "stop":
            prog.stop()
        else:  # kill [SIGNAL]
            name = (args[0] if args else "TERM").upper().removeprefix("SIG")
            prog.stop(signal.Signals[f"SIG{name}"])
        return ""

    def ns_event(self, verb: str, args: tuple[str, ...]) -> str:
        if verb in ("halt", "terminate", "swapout"):
            reason = "$ns halt" if verb != "swapout" else "$ns swapout"
            outcome = "halted" if verb != "swapout" else "completed"
            threading.Thread(target=self._end_by_event, args=(verb, outcome, reason)).start()
            return "the run ends"
        if verb in ("log", "message"):
            return " ".join(args)
        # linktest runs for seconds to minutes: on its own thread, so later events stay on time.
        level = int(args[0]) if args else LINKTEST_DEFAULT
        thread = threading.Thread(target=self._linktest, args=(level,), name="linktest")
        self.linktest_threads.append(thread)
        thread.start()
        return f"linktest level {level} started; its report goes to linktest/ in the results"

    def current_experiment(self) -> tuple[Experiment, set[str]]:
        """The experiment with every link as events have left it, and the links now down."""
        from nestbed.linktest.expect import with_links

        with self.lock:
            return (
                with_links(self.exp, self.links.values()),
                {name for name, state in self.link_state.items() if state == "down"},
            )

    def _linktest(self, level: int) -> None:
        # Imported here: linktest's statistics (scipy) would add a second to every start.
        from nestbed.linktest.run import linktest, set_aside
        from nestbed.linktest.run import write as write_linktest

        exp, down = self.current_experiment()
        try:
            report = linktest(self.plan, exp, level, down=down)
            after, now_down = self.current_experiment()
            set_aside(report, {x.name for x in after.all_links if x not in exp.all_links}
                      | (down ^ now_down))  # fmt: skip
            folder = write_linktest(report, self.run)
            summary = {**report.to_json()["counts"], "level": level, "folder": str(folder)}
        except Exception as exc:  # reported in status; the run goes on
            summary = {"level": level, "error": f"{type(exc).__name__}: {exc}"}
        with self.lock:
            self.linktests.append(summary)

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

    def timeline_event(self, name: str, verb: str, source: str) -> str:
        timeline = next(t for t in self.exp.timelines if t.name == name)
        if verb in ("start", "run"):
            now = self.now_s()
            for event in timeline.events:
                self.push(event, "timeline", now + event.time_s, timeline=name)
            if verb == "run" and source == "sequence":
                with self.wake:
                    self.wake.wait_for(lambda: not self.timelines_pending.get(name))
            return f"{len(timeline.events)} events scheduled"
        with self.wake:  # stop, reset
            kept = [p for p in self.queue if p.timeline != name]
            dropped = len(self.queue) - len(kept)
            self.queue = kept
            heapq.heapify(self.queue)
            self.timelines_pending[name] = 0
            self.wake.notify_all()
        return f"{dropped} pending events dropped"

    def sequence_event(self, name: str, verb: str) -> str:
        sequence = next(s for s in self.exp.sequences if s.name == name)
        if verb in ("stop", "reset"):
            flag = self.sequences.get(name)
            if flag:
                flag.set()
            return ""
        if name in self.sequences:
            raise ValueError(f"sequence {name} is already running")
        stop = self.sequences[name] = threading.Event()

        def steps() -> None:
            try:
                for step in sequence.steps:
                    if stop.is_set() or self.ending:
                        break
                    self.perform(step, "sequence", None)
            finally:
                self.sequences.pop(name, None)

        threading.Thread(target=steps, name=f"sequence-{name}", daemon=True).start()
        return f"{len(sequence.steps)} steps"

    # -- sampling ---------------------------------------------------------------------------

    def _sample(self) -> None:
        client = None
        tick = 0
        while not self.sampling.is_set():
            if client is None and self.plan.needs_linkd:
                with contextlib.suppress(OSError):
                    client = linux.linkd(self.plan)
            self.sample(client)
            tick += 1
            delay = self.t0 + tick - time.monotonic()
            if self.sampling.wait(max(0.0, delay)):
                break
        if client:
            client.close()

    def sample(self, client: SocketClient | None) -> None:
        t = round(self.now_s(), 3)
        counters = pipe_counters(client) if client is not None else {}
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

    # -- status and the end -----------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        with self.lock:
            static = [p for p in self.queue if p.source in ("static", "timeline")]
            upcoming = sorted(self.queue)[:10]
        return {
            "experiment": self.exp.name,
            "run_id": self.run_id,
            "results": str(self.run),
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
                for p in upcoming
            ],
            "busy": bool(static)
            or any(p.running for p in self.programs.values())
            or bool(self.sequences),
            "links": {name: self.link_state[name] for name in self.links},
            "changed_links": [
                link.model_dump(mode="json")
                for name, link in self.links.items()
                if link != self._original(name)
            ],
            "linktests": list(self.linktests),
            "link_counters": self._live_counters(),
            "programs": [p.status() for p in self.programs.values()],
            "flows": [
                {"flow": f.name, "kind": f.kind, "running": f.running, "starts": _starts(f)}
                for f in self.flows.values()
            ],
        }

    def _live_counters(self) -> list[dict[str, Any]]:
        client = _linkd_or_none(self.plan)
        if client is None:
            return []
        try:
            counters = pipe_counters(client)
        finally:
            client.close()
        rows = []
        for (link, port, direction), c in counters.items():
            rows.append({
                "link": link, "state": self.link_state.get(link, "up"), "port": port,
                "direction": direction, "packets_out": c["packets_out"],
                "drops": sum(c["drops"].values()), "queue_packets": c["queue_packets"],
            })  # fmt: skip
        return rows

    def finish(self, outcome: str, reason: str | None) -> dict[str, Any]:
        """Ends the run (once): stops programs and traffic, writes every table and the report."""
        with self.wake:
            first = not self.ending
            self.ending = True
            self.wake.notify_all()
        if not first:
            self.finished.wait()
            return self.outcome
        with self.lock:
            skipped, self.queue = sorted(self.queue), []
        for item in skipped:
            self.events.add(
                {
                    "index": next(self.event_index),
                    "source": item.source,
                    "planned_s": item.planned_s,
                    "object": item.action.object,
                    "verb": item.action.verb,
                    "args": " ".join(item.action.args),
                    "outcome": "skipped",
                    "message": "the run ended before this event",
                }
            )
        for flag in list(self.sequences.values()):
            flag.set()
        for prog in self.programs.values():
            prog.stop_all()
        for thread in self.linktest_threads:
            thread.join(timeout=LINKTEST_WAIT_S)
        problems = self._collect_traffic()
        for monitor in self.monitors:
            monitor.stop()
        for process in self.processes:
            process.send_signal(signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(5)
        if self.capture:
            problems += self._tcp_tables()
        duration = self.now_s()
        self.sampling.set()
        final = _linkd_or_none(self.plan)
        try:
            self.sample(final)
        finally:
            if final is not None:
                final.close()
        for table in (self.events, self.program_rows, self.link_rows, self.node_rows):
            table.close()
        if self.cpu_rows is not None:
            self.cpu_rows.close()
        if problems:
            reason = "; ".join(filter(None, [reason, *problems]))
        manifest.end(self.run, outcome, reason, duration)
        try:
            if self.report:
                from nestbed.results.report import write_report

                write_report(self.run)
        except Exception as exc:
            (self.run / "report.error").write_text(traceback.format_exc())
            reason = f"{reason}; the report failed: {exc}" if reason else f"report failed: {exc}"
        self.outcome = {"outcome": outcome, "reason": reason, "results": str(self.run)}
        self.finished.set()
        return self.outcome

    def _collect_traffic(self) -> list[str]:
        problems = []
        for flow in self.flows.values():
            flow.stop_senders()
        if any(flow.sessions and flow.sessions[-1].sender for flow in self.flows.values()):
            time.sleep(_DRAIN_S)
        rows = []
        t0_ns = int(self.t0 * 1e9)
        for flow in self.flows.values():
            flow.stop_receivers()
            try:
                row, series = flow.results(t0_ns)
            except Exception as exc:
                problems.append(f"traffic of {flow.name} could not be read: {exc}")
                continue
            rows.append(row)
            write_table(self.run / "traffic" / f"{flow.name}.csv", FLOW_SERIES_COLUMNS, series)
        write_table(self.run / "traffic" / "flows.csv", FLOW_COLUMNS, rows)
        return problems

    def _tcp_tables(self) -> list[str]:
        """tcp/FLOW.csv of every FTP flow, from the captures at its two ends."""
        from nestbed.results.segments import write_tcp_table

        def pcaps(node: str) -> list[Path]:
            found = [self.run / "pcaps" / f"{link}-{n}.pcap" for link, n in self.plan.interfaces()
                     if n == node]  # fmt: skip
            return [p for p in found if p.is_file()]

        problems = []
        for flow in self.flows.values():
            if flow.kind != "ftp" or not any(s.sender for s in flow.sessions):
                continue
            try:
                write_tcp_table(
                    self.run / "tcp" / f"{flow.name}.csv",
                    pcaps(flow.source),
                    pcaps(flow.destination),
                    set(self.exp.addresses().get(flow.source, [])),
                    [(flow.address, s.port) for s in flow.sessions if s.sender],
                    self.t0_unix,
                )
            except (OSError, ValueError) as exc:
                problems.append(f"the TCP segments of {flow.name} could not be read: {exc}")
        return problems

    # -- the socket -------------------------------------------------------------------------

    def retire(self) -> None:
        """After the run finished: ends its event threads and closes its linkd client."""
        for items in self.workers.values():
            items.put(None)
        with self.linkd_lock:
            if self.linkd_client is not None:
                self.linkd_client.close()
                self.linkd_client = None

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        if op == "ping":
            return {"t0_monotonic": self.t0}
        if op == "status":
            return self.status()
        if op == "event":
            obj, verb = request["object"], request["verb"]
            args = tuple(str(a) for a in request.get("args", ()))
            problems = check_event(self.exp, obj, verb, args)
            if problems:
                raise ValueError(problems[0])
            action = Action(object=obj, verb=verb, args=args)
            delay = float(request.get("after_s", 0))
            if delay <= 0:
                return {"event": self.perform(action, "dynamic", self.now_s())}
            self.push(action, "dynamic", self.now_s() + delay)
            return {"scheduled_s": round(self.now_s() + delay, 3)}
        if op == "finish":
            return self.finish(request.get("outcome", "completed"), request.get("reason"))
        if op == "shutdown":
            return {"shutdown": True}
        raise ValueError(
            f"unknown request {op!r}; use ping, status, event, finish, next_run or shutdown"
        )


class Host:
    """The controller process: serves the control socket and hands each request to the
    current run's Controller. A sweep's link-reuse mode starts the next run in the same
    process (`next_run`), a few milliseconds instead of a new process's second."""

    def __init__(self, controller: Controller):
        self.current = controller

    def serve(self, path: Path) -> None:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o077)  # root only
        try:
            server.bind(str(path))
        finally:
            os.umask(old)
        server.listen(16)
        self.server = server
        (self.current.directory / "controller.pid").write_text(f"{os.getpid()}\n")
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return  # closed by shutdown
            threading.Thread(target=self._client, args=(conn,), daemon=True).start()

    def _client(self, conn: socket.socket) -> None:
        with conn, conn.makefile("r", encoding="utf-8") as reader:
            for line in reader:
                try:
                    reply = {"ok": True, **self.handle(json.loads(line))}
                except (ValueError, KeyError, TypeError) as exc:
                    reply = {"ok": False, "error": str(exc), "user": True}
                except Exception as exc:
                    reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
                conn.sendall((json.dumps(reply) + "\n").encode())
                if reply.get("shutdown"):
                    self.server.close()
                    return

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        if request.get("op") != "next_run":
            return self.current.handle(request)
        previous = self.current
        if not previous.finished.is_set():
            raise ValueError("the current run has not finished; finish it first")
        exp = Experiment.from_json(Path(request["ir"]).read_text())
        if plan(exp).tag != previous.plan.tag:
            raise ValueError(f"next_run of another experiment ({exp.name}) in {previous.exp.name}")
        previous.retire()
        following = Controller(
            exp,
            Path(request["results"]),
            run_id=request.get("run_id"),
            capture=False,
            reused=int(request.get("reused", 0)),
            report=bool(request.get("report", True)),
        )
        following.start()
        self.current = following
        return {"run_id": following.run_id, "results": str(following.run)}

    def finish_current(self, outcome: str, reason: str) -> None:
        self.current.finish(outcome, reason)


def _starts(flow: Flow) -> int:
    return sum(1 for s in flow.sessions if s.sender)


def _startcmd(node: str, command: str):  # type: ignore[no-untyped-def]
    from nestbed.model import Program

    return Program(name=f"startcmd-{node}", node=node, command=command)


def _linkd_or_none(p: Plan) -> SocketClient | None:
    if not p.needs_linkd:
        return None
    with contextlib.suppress(OSError):
        return linux.linkd(p)
    return None


def _settings(link: Link) -> list[PipeSettings]:
    return [(p.node, pipe_params(p.egress), pipe_params(p.ingress)) for p in link.ports]


def _cgroups(p: Plan) -> dict[str, NodeCgroup]:
    found = {n.name: linux.node_cgroup(p, n.name) for n in p.nodes}
    return {node: cg for node, cg in found.items() if cg is not None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nestbed.control")
    parser.add_argument("--ir", type=Path, required=True)
    parser.add_argument("--results", type=Path, required=True)
    parser.add_argument("--run-id", type=int)
    parser.add_argument("--capture", action="store_true")
    parser.add_argument("--no-report", action="store_true")
    parser.add_argument("--cpumon", action="append", default=[], metavar="NODE")
    parser.add_argument("--cpumon-duty", type=float, default=DEFAULT_DUTY)
    parser.add_argument("--capture-node", action="append", default=[], metavar="NODE")
    args = parser.parse_args(argv)
    exp = Experiment.from_json(args.ir.read_text())
    controller = Controller(
        exp,
        args.results,
        run_id=args.run_id,
        capture=args.capture,
        report=not args.no_report,
        cpumon=tuple(args.cpumon),
        cpumon_duty=args.cpumon_duty,
        capture_nodes=tuple(args.capture_node),
    )

    host = Host(controller)

    def on_signal(signum: int, _frame: Any) -> None:
        threading.Thread(
            target=host.finish_current,
            args=("interrupted", f"the controller got {signal.Signals(signum).name}"),
        ).start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    controller.start()
    host.serve(controller.directory / SOCKET)
    return 0
