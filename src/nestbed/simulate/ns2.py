"""Runs an experiment file unchanged in ns-2 with the stub and nestbed's tracing, and streams
its trace, line by line, to whoever reads it (no trace file is ever stored whole)."""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from nestbed.errors import EnvironmentProblem, UserError
from nestbed.model import Experiment, Shaping
from nestbed.model.formulas import default_queue_packets
from nestbed.spec.ns import STUB

DRIVER = Path(__file__).resolve().parent / "ns2.tcl"
_STDERR_KEEP = 64 * 1024  # the end of ns-2's stderr kept for error messages
_CONNECT_POLL_S = 0.1


@dataclass(frozen=True)
class Ended:
    """How the ns process ended: its exit status and the end of what it printed."""

    returncode: int
    stdout: str
    stderr: str
    wall_s: float


def find_ns(ns: str = "ns") -> str:
    path = shutil.which(ns)
    if path is None:
        raise EnvironmentProblem(
            "ns-2 (`ns`) is not installed; run `make setup` or `apt-get install ns2`"
        )
    return path


def default_queue_limit(shaping: Shaping) -> int:
    """The queue limit nestbed-linkd uses when the file gives none (so ns-2 uses it too)."""
    return default_queue_packets(shaping.bandwidth_bps, shaping.delay_s)


def _settings(s: Shaping) -> str:
    """One direction's shaping as a Tcl dict (numbers only, so no quoting is needed)."""
    q = s.queue
    limit = q.limit if q.limit is not None else default_queue_limit(s)
    pairs = {
        "bw": s.bandwidth_bps,
        "delay": repr(s.delay_s),
        "loss": repr(s.loss),
        "drops": "{" + " ".join(str(n) for n in s.drop_ordinals) + "}",
        "limit": limit,
        "bytes": int(q.limit is not None and q.limit_unit == "bytes"),
        "thresh": repr(q.thresh),
        "maxthresh": repr(q.maxthresh),
        "q_weight": repr(q.q_weight),
        "linterm": repr(q.linterm),
        "mean": q.mean_packet_size_bytes,
        "gentle": "true" if q.gentle else "false",
    }
    return "{" + " ".join(f"{k} {v}" for k, v in pairs.items()) + "}"


def shaping_table(exp: Experiment) -> str:
    """Every link's shaping, keyed as ns2.tcl finds it: the creation indexes of its two nodes
    (smaller first) and which link between them it is, then the index of the sending node."""
    index = {node.name: i for i, node in enumerate(exp.nodes)}
    seen: dict[tuple[int, int], int] = {}
    entries = []
    for link in exp.links:
        a, b = (index[p.node] for p in link.ports)
        pair = (min(a, b), max(a, b))
        k = seen.get(pair, 0)
        seen[pair] = k + 1
        by_from = " ".join(f"{index[p.node]} {_settings(p.egress)}" for p in link.ports)
        entries.append(f"    {{{pair[0]} {pair[1]} {k}}} {{{by_from}}}")
    return "{\n" + "\n".join(entries) + "\n}"


def tcl_word(text: str) -> str:
    """TEXT as one Tcl word, whatever characters it holds."""
    escaped = "".join("\\" + c if c in '\\"$[]{};' else c for c in text)
    return '"' + escaped.replace("\n", "\\n") + '"'


def main_script(
    file: Path,
    trace: Path,
    *,
    shaping: str,
    parameters: dict[str, str],
    duration: float | None,
) -> str:
    overrides = " ".join(f"{tcl_word(k)} {tcl_word(v)}" for k, v in parameters.items())
    return "\n".join(
        [
            f"set nb_sim(trace) {tcl_word(str(trace))}",
            f"set nb_sim(file) {tcl_word(str(file.resolve()))}",
            f"set nb_sim(overrides) [list {overrides}]",
            f"set nb_sim(duration) {'{}' if duration is None else repr(float(duration))}",
            f"set nb_sim(shaping) {shaping}",
            f"source {tcl_word(str(STUB))}",
            f"source {tcl_word(str(DRIVER))}",
            "nb_sim_main",
            "",
        ]
    )


class NsRun:
    """A running ns: the trace's lines as ns writes them, and its end."""

    def __init__(self, process: subprocess.Popen, fifo: Path, out: Path, err: Path):
        self.process, self.fifo, self.out, self.err = process, fifo, out, err
        self.started = time.monotonic()
        self.ended: Ended | None = None

    def lines(self) -> Iterator[str]:
        return _lines(self.fifo, self.process)

    def stop(self) -> None:
        """Kills ns (and anything the file started) if it still runs."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def wait(self) -> Ended:
        if self.ended is None:
            self.process.wait()
            wall = time.monotonic() - self.started
            self.ended = Ended(self.process.returncode, _tail(self.out), _tail(self.err), wall)
        return self.ended


@contextmanager
def running(
    file: Path,
    exp: Experiment,
    *,
    parameters: dict[str, str] | None = None,
    duration: float | None = None,
    ns: str = "ns",
) -> Iterator[NsRun]:
    """Starts ns-2 on FILE; ns is killed if it still runs when the block ends."""
    executable = find_ns(ns)
    with tempfile.TemporaryDirectory(prefix="nestbed-ns2-") as scratch:
        work = Path(scratch)
        fifo = work / "trace.fifo"
        os.mkfifo(fifo)
        script = work / "main.tcl"
        script.write_text(
            main_script(
                file,
                fifo,
                shaping=shaping_table(exp),
                parameters=dict(parameters or {}),
                duration=duration,
            )
        )
        out, err = work / "stdout", work / "stderr"
        with out.open("wb") as o, err.open("wb") as e:
            # ns-2 runs in the scratch folder, where the file's own output files land; in its
            # own process group, so a stop also reaches anything the file started with exec.
            process = subprocess.Popen(
                [executable, script.name],
                cwd=work,
                stdin=subprocess.DEVNULL,
                stdout=o,
                stderr=e,
                start_new_session=True,
            )
        run = NsRun(process, fifo, out, err)
        try:
            yield run
        finally:
            run.stop()


def _lines(fifo: Path, process: subprocess.Popen) -> Iterator[str]:
    """The FIFO's lines; nothing when ns ends without ever opening it (an early error)."""
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        # Until ns opens the FIFO for writing, poll() reports nothing; check ns meanwhile.
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLHUP)
        while not poller.poll(_CONNECT_POLL_S * 1000):
            if process.poll() is not None and not poller.poll(0):
                return
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    with open(fd, encoding="ascii", errors="replace", newline="\n", buffering=1 << 20) as f:
        yield from f


def _tail(path: Path) -> str:
    with path.open("rb") as f:
        f.seek(0, os.SEEK_END)
        f.seek(max(0, f.tell() - _STDERR_KEEP))
        return f.read().decode(errors="replace")


def check_file(file: Path) -> None:
    if not file.is_file():
        raise UserError(f"{file}: no such experiment file; check the path")
    if file.suffix.lower() not in {".ns", ".tcl"}:
        raise UserError(
            f"{file}: only ns-2 files (.ns, .tcl) can run in the simulator; "
            "convert a YAML file with `nestbed convert FILE --to ns`"
        )
