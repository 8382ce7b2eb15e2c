"""A run's results folder: the one place that names every file in it.

Writers (the controller, the ns-2 back end) and readers (report, compare, sweep metrics,
analysis) ask a ``RunFolder`` for a path instead of spelling it, so the layout below is
written down once::

    manifest.json       what ran, with what, when, and how it ended
    ir.json             the experiment as it ran
    events.csv          planned and actual time of every event
    programs.csv        programs' starts and exits; programs/NAME.stdout and .stderr (NAME.1
                        ... for later starts); programs/NAME/ the program's own folder
    traffic/flows.csv   one row per flow; traffic/FLOW.csv per second; traffic/raw/ what the
                        controller's traffic agents wrote
    tcp/FLOW.csv        segment table of a TCP flow (simulated, or from captures)
    links/counters.csv  every pipe's counters each second
    nodes/usage.csv     CPU and memory per node; nodes/cpu.csv with --cpumon
    simulation/lag.csv  the simulated part's lag behind real time each second (make-simulated)
    simulation/nestbed-sim.log  what the simulator said during the run
    pcaps/              captures (--capture), LINK-NODE.pcap
    linktest/           linktest reports (linktest-2/ ... for later ones)
    analysis/           `nestbed analyze` of this run
    work/NODE/          on a server: where the node's programs start, the one folder they
                        may write in (their project's own)
    report.md, plots/   the report and its plots; report.error when the report failed
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nestbed.errors import UserError


@dataclass(frozen=True)
class RunFolder:
    """The paths of one run's results."""

    root: Path

    @property
    def manifest(self) -> Path:
        return self.root / "manifest.json"

    @property
    def ir(self) -> Path:
        return self.root / "ir.json"

    @property
    def events(self) -> Path:
        return self.root / "events.csv"

    @property
    def programs_table(self) -> Path:
        return self.root / "programs.csv"

    @property
    def programs(self) -> Path:
        return self.root / "programs"

    def program(self, name: str) -> Path:
        """The program's own folder ($NESTBED_PROGRAM_DIR), for the files it leaves."""
        return self.programs / name

    @property
    def traffic(self) -> Path:
        return self.root / "traffic"

    @property
    def flows(self) -> Path:
        return self.traffic / "flows.csv"

    def flow(self, name: str) -> Path:
        return self.traffic / f"{name}.csv"

    @property
    def tcp(self) -> Path:
        return self.root / "tcp"

    def tcp_flow(self, name: str) -> Path:
        return self.tcp / f"{name}.csv"

    @property
    def link_counters(self) -> Path:
        return self.root / "links" / "counters.csv"

    @property
    def nodes(self) -> Path:
        return self.root / "nodes"

    @property
    def node_usage(self) -> Path:
        return self.nodes / "usage.csv"

    @property
    def node_cpu(self) -> Path:
        return self.nodes / "cpu.csv"

    @property
    def simulation_lag(self) -> Path:
        return self.root / "simulation" / "lag.csv"

    @property
    def pcaps(self) -> Path:
        return self.root / "pcaps"

    @property
    def linktest(self) -> Path:
        return self.root / "linktest"

    @property
    def analysis(self) -> Path:
        return self.root / "analysis"

    def work(self, node: str) -> Path:
        return self.root / "work" / node

    @property
    def report(self) -> Path:
        return self.root / "report.md"

    @property
    def plots(self) -> Path:
        return self.root / "plots"

    def relative(self, path: Path) -> str:
        """A path in the folder as reports and messages name it (``traffic/flows.csv``)."""
        return path.relative_to(self.root).as_posix()

    def make(self) -> RunFolder:
        """Creates the folder (with its parents); one UserError naming it when it cannot."""
        make_folder(self.root)
        return self


RESULTS = Path("results")


def default_results(name: str, kind: str = "") -> Path:
    """results/NAME[-KIND]-TIME under the working folder: where a run, sweep, instrument or
    study writes when not told."""
    stem = f"{name}-{kind}" if kind else name
    return (RESULTS / f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}").resolve()


def make_folder(path: Path) -> Path:
    """``path`` as a directory (with its parents), or a UserError naming it and the reason."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(
            f"cannot create the results folder {path} ({exc.strerror}); give another one"
        ) from None
    return path


def write_whole(path: Path, write: Callable[[Path], None]) -> None:
    """Has ``write`` write a file of its own beside ``path`` (the umask's mode, as the folder's
    other files), then puts it in place: whoever reads ``path`` meanwhile (the server, a
    download) finds the old file or the new, never half of one. The file is the writer's
    own (process and thread), so two writers never rename each other's half-written file into
    place; it is removed if ``write`` fails."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        write(tmp)
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
