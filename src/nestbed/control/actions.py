"""Carrying out one action of the run now, on whatever object it names (a link, a flow, a
program, a timeline, a sequence, a group, the simulator `ns`), and recording it as a row of
events.csv with its planned and actual time."""

from __future__ import annotations

import itertools
import signal
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any

from nestbed.control.links import LinkStates
from nestbed.control.linktests import Linktests
from nestbed.control.programs import ProgramRunner
from nestbed.control.scheduler import Scheduler
from nestbed.control.traffic import CbrFlow, Flow, FtpFlow
from nestbed.errors import NestbedError, Refused
from nestbed.model import Action, Experiment
from nestbed.model.events import LINKTEST_DEFAULT
from nestbed.results.tables import Table
from nestbed.units import UnitError

EndRun = Callable[[str, str, str], None]  # verb (halt, swapout ...), outcome, reason


class Actions:
    """The objects of one run, and what each verb does to them."""

    def __init__(
        self,
        exp: Experiment,
        scheduler: Scheduler,
        links: LinkStates,
        flows: dict[str, Flow],
        programs: dict[str, ProgramRunner],
        linktests: Linktests,
        events: Table,
        end_run: EndRun,
    ):
        self.exp, self.scheduler, self.links = exp, scheduler, links
        self.flows, self.programs, self.linktests = flows, programs, linktests
        self.events, self.end_run = events, end_run
        self.index = itertools.count()
        self.sequences: dict[str, threading.Event] = {}  # name -> stop flag, while running
        self.groups = {g.name: g for g in exp.groups}
        self.timelines = {t.name: t for t in exp.timelines}
        self.sequence_steps = {s.name: s for s in exp.sequences}
        self.agents = {a.name for a in exp.agents}
        # .at_s: when the action this thread carries out took effect, where that is not when
        # it began (a program's start: when its process began its command, by its own clock)
        self.took = threading.local()

    def perform(
        self, action: Action, source: str, planned_s: float | None, due: float | None = None
    ) -> dict[str, Any]:
        """Carries out ``action`` now, or at ``due`` (time.monotonic()) where it was handed
        over ahead of its time (a link's change to its emulators, a program's start to
        nestbed-spawn), and records it in events.csv; the row.

        An action refused (or one the machine could not do) is an event that failed: its
        row says why and the run goes on. Anything else is a bug of nestbed: the row says
        so and the controller's log keeps the traceback.
        """
        actual = self.scheduler.now_s()
        self.took.at_s = None
        try:
            if due is not None and action.object in self.programs:  # to nestbed-spawn
                message = self.program(self.programs[action.object], action.verb, (), source, due)
                actual = self.took.at_s
            elif due is not None:  # a link's: its time is when its emulators applied it
                message, applied = self.links.apply(action.object, action.verb, action.args, due)
                actual = applied - self.scheduler.t0
            else:
                message = self.execute(action, source)
                actual = self.took.at_s if self.took.at_s is not None else actual
            outcome = "ok"
        except (NestbedError, OSError, UnitError) as exc:
            message, outcome = str(exc), "error"
        except Exception as exc:
            traceback.print_exc(file=sys.stderr)
            message, outcome = f"internal error: {type(exc).__name__}: {exc}", "error"
        if due is not None and outcome != "ok":
            # Handed over ahead of its time, it failed when the answer came back, and never
            # before its time: it did not take effect then.
            actual = max(self.scheduler.now_s(), due - self.scheduler.t0)
        row = {
            "index": next(self.index),
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
        if due is None or self.scheduler.settle():
            self.events.add(row)  # (a late answer's row was written when the end gave up)
        return row

    def unanswered(self, action: Action, source: str, planned_s: float, due: float) -> None:
        """Records an action handed over ahead of its time that the run's end gave up on."""
        waited_s = self.scheduler.now_s() - (due - self.scheduler.t0)
        who = "nestbed-spawn" if action.object in self.programs else "its link emulators"
        self.events.add(
            {
                "index": next(self.index),
                "source": source,
                "planned_s": planned_s,
                "actual_s": self.scheduler.now_s(),
                "error_ms": (self.scheduler.now_s() - planned_s) * 1e3,
                "object": action.object,
                "verb": action.verb,
                "args": " ".join(action.args),
                "outcome": "error",
                "message": f"{who} had not answered {waited_s:.1f} s after its time when the run "
                "ended; whether it took effect is unknown",
            }
        )

    def skipped(self, action: Action, source: str, planned_s: float) -> None:
        """Records an action the run ended before."""
        self.events.add(
            {
                "index": next(self.index),
                "source": source,
                "planned_s": planned_s,
                "object": action.object,
                "verb": action.verb,
                "args": " ".join(action.args),
                "outcome": "skipped",
                "message": "the run ended before this event",
            }
        )

    def execute(self, action: Action, source: str) -> str:
        obj, verb, args = action.object, action.verb, action.args
        if obj in self.groups:
            return "; ".join(
                self.execute(action.model_copy(update={"object": member}), source)
                for member in self.groups[obj].members
            )
        if obj in self.links:
            return self.links.apply(obj, verb, args)[0]
        if obj in self.flows:
            return self.flow(self.flows[obj], verb, args)
        if obj in self.programs:
            return self.program(self.programs[obj], verb, args, source)
        if obj == "ns":
            return self.ns(verb, args)
        if obj in self.timelines:
            return self.timeline(obj, verb, source)
        if obj in self.sequence_steps:
            return self.sequence(obj, verb)
        if obj in self.agents:
            return f"{obj} {' '.join(args)} recorded; agent variables do not change a real stack"
        raise Refused(f"{obj} cannot be acted on by events")

    def flow(self, flow: Flow, verb: str, args: tuple[str, ...]) -> str:
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
            raise Refused(f"{flow.kind} {flow.name} has no verb {verb}")
        return ""

    def program(
        self,
        prog: ProgramRunner,
        verb: str,
        args: tuple[str, ...],
        source: str,
        due: float | None = None,
    ) -> str:
        if verb == "set":
            prog.set(args[0], args[1])
        elif verb in ("start", "run"):
            inv = prog.start(due)
            # The event's time is when the program's process began (of a group's, the last):
            # not when it was asked for, which a start due with others is often much before.
            self.took.at_s = inv.started_s
            if verb == "run" and source == "sequence":
                prog.wait()
            # (how long its first exec took after that, as seen: what the time leaves out)
            exec_ms = (inv.process.exec_at - inv.process.started_at) * 1e3
            return f"pid {inv.process.pid}, exec done {exec_ms:.1f} ms later"
        elif verb == "stop":
            prog.stop()
        else:  # kill [SIGNAL]
            name = (args[0] if args else "TERM").upper().removeprefix("SIG")
            prog.stop(signal.Signals[f"SIG{name}"])
        return ""

    def ns(self, verb: str, args: tuple[str, ...]) -> str:
        if verb in ("halt", "terminate", "swapout"):
            reason = "$ns halt" if verb != "swapout" else "$ns swapout"
            outcome = "halted" if verb != "swapout" else "completed"
            threading.Thread(target=self.end_run, args=(verb, outcome, reason)).start()
            return "the run ends"
        if verb in ("log", "message"):
            return " ".join(args)
        # linktest runs for seconds to minutes, in its own process: later events stay on time.
        return self.linktests.start(int(args[0]) if args else LINKTEST_DEFAULT)

    def timeline(self, name: str, verb: str, source: str) -> str:
        timeline = self.timelines[name]
        if verb in ("start", "run"):
            now = self.scheduler.now_s()
            for event in timeline.events:
                self.scheduler.push(event, "timeline", now + event.time_s, timeline=name)
            if verb == "run" and source == "sequence":
                self.scheduler.wait_timeline(name)
            return f"{len(timeline.events)} events scheduled"
        return f"{self.scheduler.drop_timeline(name)} pending events dropped"  # stop, reset

    def sequence(self, name: str, verb: str) -> str:
        sequence = self.sequence_steps[name]
        if verb in ("stop", "reset"):
            flag = self.sequences.get(name)
            if flag:
                flag.set()
            return ""
        if name in self.sequences:
            raise Refused(f"sequence {name} is already running")
        stop = self.sequences[name] = threading.Event()

        def steps() -> None:
            try:
                for step in sequence.steps:
                    if stop.is_set() or self.scheduler.ending:
                        break
                    self.perform(step, "sequence", None)
            finally:
                self.sequences.pop(name, None)

        threading.Thread(target=steps, name=f"sequence-{name}", daemon=True).start()
        return f"{len(sequence.steps)} steps"

    def stop_sequences(self) -> None:
        for flag in list(self.sequences.values()):
            flag.set()
