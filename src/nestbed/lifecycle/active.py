"""An active experiment: its plan, its controller and its run, and what any user does with
it — commands in nodes, events, status, captures, linktest. The CLI, the Python API and the
instruments all come through here."""

from __future__ import annotations

import functools
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nestbed.backend.base import Backend
from nestbed.backend.plan import Plan
from nestbed.control.client import ControllerClient
from nestbed.errors import EnvironmentProblem, UserError
from nestbed.lifecycle import signals

if TYPE_CHECKING:
    from nestbed.model import Experiment

POLL_S = 0.05  # a status request costs well under a millisecond
QUIET_S = 1.0  # how long linktest watches the counters for other traffic, before and after
SETTLE_S = 0.5  # a full 100-packet queue at 10 Mb/s drains in 0.06 s
LISTEN_WAIT_S = 30.0  # for a capture to start listening (on a busy cluster's host, too)


@dataclass
class Active:
    """One swapped-in experiment, as the back end made it."""

    name: str
    plan: Plan
    # The experiment as swapped in, or how to read it (on first use: exec and status need
    # the plan alone, not the IR's models).
    source: Experiment | Callable[[], Experiment]
    backend: Backend
    results: Path | None = None  # the current run's folder (None: not known here)
    run_id: int | None = None
    linktest: Any = None  # the linktest.run.Report of a linktest at swap-in, if one was asked

    def __post_init__(self) -> None:
        self.controller = ControllerClient(self.backend, self.plan)

    @functools.cached_property
    def experiment(self) -> Experiment:
        return self.source() if callable(self.source) else self.source

    @property
    def nodes(self) -> list[str]:
        return [n.name for n in self.plan.nodes]

    def node(self, name: str) -> str:
        """``name`` if the experiment has that node, else one UserError listing its nodes."""
        if name not in self.nodes:
            raise UserError(
                f"experiment '{self.name}' has no node '{name}'; its nodes are "
                f"{', '.join(self.nodes)}"
            )
        return name

    def request(self, op: str, timeout: float | None = 60, **fields: Any) -> dict[str, Any]:
        return self.controller.request(op, timeout=timeout, **fields)

    def link_emulator_gone(self) -> bool:
        """Whether the experiment's link emulator is gone for good: its socket refuses (a
        busy one that answers late is not gone)."""
        if not self.plan.needs_linkd:
            return False
        try:
            self.backend.linkd(self.plan).close()
        except (ConnectionRefusedError, FileNotFoundError):
            return True
        except OSError:
            return False
        return False

    # -- commands in nodes ------------------------------------------------------------------

    def exec(self, node: str, argv: list[str], **run: Any) -> subprocess.CompletedProcess:
        return self.backend.exec_in(self.plan, self.node(node), argv, **run)

    def start(self, node: str, argv: list[str], **popen: Any) -> subprocess.Popen:
        return self.backend.start_in(self.plan, self.node(node), argv, **popen)

    # -- the controller ---------------------------------------------------------------------

    def event(
        self, obj: str, verb: str, args: list[str] | tuple[str, ...] = (), after_s: float = 0
    ) -> dict[str, Any]:
        """Sends an event now or ``after_s`` seconds from now; the controller's reply."""
        return self.request("event", object=obj, verb=verb, args=list(args), after_s=after_s)

    def status(self) -> dict[str, Any]:
        reply = self.request("status")
        reply.pop("ok", None)
        return reply

    # -- captures ---------------------------------------------------------------------------

    def capture(self, link: str, folder: Path, duration_s: float | None) -> list[Path]:
        """A capture at every member's end of a link or LAN until ``duration_s`` or Ctrl-C,
        counted from when every capture is listening.

        Each capture's output goes to a file beside its pcap, removed at the end: on a
        cluster that makes the pcap the command's own file, written on the node's host and
        brought back here when it ends (``Backend.start_in``), and its stderr says when it
        listens, which a start on another host does a round trip after it was asked."""
        ends = {node: ifname for (name, node), ifname in self.plan.interfaces().items()
                if name == link}  # fmt: skip
        if not ends:
            links = sorted({name for name, _ in self.plan.interfaces()})
            raise UserError(
                f"experiment {self.name} has no link '{link}'; its links are {', '.join(links)}"
            )
        folder = folder.resolve()
        folder.mkdir(parents=True, exist_ok=True)
        files: list[Path] = []
        processes: list[subprocess.Popen] = []
        said: list[Path] = []  # each capture's stdout and stderr
        try:
            for node, ifname in sorted(ends.items()):
                path = folder / f"{link}-{node}.pcap"
                out, err = (folder / f".{link}-{node}.{kind}" for kind in ("out", "err"))
                said += [out, err]
                argv = self.backend.capture_argv(ifname, path)
                with out.open("wb") as stdout, err.open("wb") as stderr:
                    processes.append(self.start(node, argv, stdout=stdout, stderr=stderr))
                files.append(path)
            _until_listening(processes, said[1::2])
            if duration_s is None:
                while all(proc.poll() is None for proc in processes):
                    time.sleep(POLL_S)
            else:
                time.sleep(duration_s)
        except KeyboardInterrupt:
            pass
        finally:
            for proc in processes:
                proc.send_signal(signal.SIGINT)
            for proc in processes:
                proc.wait()
            for path in said:
                path.unlink(missing_ok=True)
        return files

    # -- linktest ---------------------------------------------------------------------------

    def run_linktest(self, level: int, progress: Any = None) -> tuple[Any, Path | None]:
        """linktest against the links as events have left them; the report also goes into
        the run's results folder (returned). The experiment itself never fails a check: a
        link that one of its events changes during a level, or that its traffic shares (its
        schedule, or linkd's counters just before and after the test), is reported as not
        tested at that level, with the reason."""
        from nestbed.linktest import around
        from nestbed.linktest.expect import with_links
        from nestbed.linktest.levels import check_level
        from nestbed.linktest.run import linktest, set_aside, write
        from nestbed.model import Link

        check_level(level)
        before = self.request("status")
        quiet_before = self._quiet(before)
        changed = [Link.model_validate(x) for x in before.get("changed_links") or []]
        down = {link for link, state in (before.get("links") or {}).items() if state == "down"}
        exp = with_links(self.experiment, changed)
        report = linktest(self.plan, exp, level, down=down, progress=progress,
                          backend=self.backend)  # fmt: skip
        signals.check()  # a stop that a finalizer swallowed while linktest ran
        if not before.get("finished"):
            time.sleep(SETTLE_S)  # the last probes leave the queues before counters are read
        after = self.request("status")
        if not before.get("finished"):
            said = (f"other traffic crossed it in the {QUIET_S:g} s before or after the test, "
                    "when no probe was sent")  # fmt: skip
            busy = dict.fromkeys(quiet_before | self._quiet(after), said)
            spans = around.windows(before["elapsed_s"], after["elapsed_s"], report.level_seconds)
            running = [f["flow"] for f in before.get("flows") or [] if f.get("running")]
            around.set_aside(report, around.not_tested(exp, self.plan, spans, running, busy))
        set_aside(report, _differ(_link_settings(before), _link_settings(after)))
        results = after.get("results")
        folder = write(report, Path(results)) if results else None
        return report, folder

    def _quiet(self, status: dict[str, Any]) -> set[str]:
        """Links whose counters grow over ``QUIET_S`` from ``status`` while linktest sends
        nothing (none when the run has finished: nothing of the experiment sends then)."""
        from nestbed.linktest.around import counted_traffic

        if status.get("finished") or not status.get("link_counters"):
            return set()
        time.sleep(QUIET_S)
        later = self.request("status")
        return counted_traffic(status["link_counters"], later.get("link_counters") or [])

    def close(self) -> None:
        self.controller.close()


def _link_settings(status: dict[str, Any]) -> dict[str, Any]:
    return {k: status.get(k) or {} for k in ("links", "changed_links")}


def _differ(before: dict[str, Any], after: dict[str, Any]) -> set[str]:
    """Links whose state or settings differ between two statuses."""
    names = {n for n in before["links"] if before["links"][n] != after["links"].get(n)}
    settings = [{x["name"]: x for x in s["changed_links"]} for s in (before, after)]
    return names | {n for n in settings[0].keys() | settings[1].keys()
                    if settings[0].get(n) != settings[1].get(n)}  # fmt: skip


def _until_listening(processes: list[subprocess.Popen], stderr: list[Path]) -> None:
    """Waits until every capture's stderr (tcpdump's) says it is listening; one sentence
    naming the capture that ended or did not listen in time, and what it said."""
    waiting = dict(zip(stderr, processes, strict=True))
    deadline = time.monotonic() + LISTEN_WAIT_S
    while waiting:
        for path, proc in list(waiting.items()):
            ended = proc.poll() is not None  # first: what it said before it ended is read
            said = path.read_text(errors="replace")
            if "listening on" in said:
                del waiting[path]
            elif ended or time.monotonic() > deadline:
                what = "ended" if ended else "did not start listening"
                raise EnvironmentProblem(
                    f"the capture {path.name[1:-4]} {what}: {said.strip() or 'it said nothing'}"
                )
        if waiting:
            time.sleep(POLL_S)
