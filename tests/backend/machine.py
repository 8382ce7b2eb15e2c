"""What an experiment has on this machine, for the fault tests: its traces (namespaces,
cgroups, state folder), its processes, and the `nestbed` command run as a real process."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from nbtest import until as until  # the fault tests import it from here
from nestbed.backend.linux import RUN_DIR, traces
from nestbed.backend.plan import experiment_tag

SRC = Path(__file__).resolve().parents[2] / "src"
DEADLINE_S = 180  # generous: the machine is shared and loaded; never a measured threshold


# `python -m nestbed` that writes every thread's stack to stderr on SIGUSR1: a command that
# does not exit in time says where it is stuck (a CI log is all there is to read then).
_BOOT = (
    "import faulthandler, runpy, signal, sys; "
    "faulthandler.register(signal.SIGUSR1, all_threads=True); "
    "sys.argv[0] = 'nestbed'; runpy.run_module('nestbed', run_name='__main__', alter_sys=True)"
)


class Command(subprocess.Popen):
    """A `nestbed` process; one that outlives a ``communicate`` timeout fails the test with
    the stacks of its threads, and is killed."""

    def communicate(self, input: Any = None, timeout: float | None = None) -> Any:  # noqa: A002
        try:
            return super().communicate(input, timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                self.send_signal(signal.SIGUSR1)
            try:
                _, stderr = super().communicate(timeout=5)
            except subprocess.TimeoutExpired:
                self.kill()
                _, stderr = super().communicate()
            else:  # it ended meanwhile: the stacks may be partial, the code is kept
                stderr = f"(it exited with {self.returncode} after SIGUSR1)\n{stderr}"
            raise AssertionError(
                f"{' '.join(map(str, self.args[3:]))} did not exit within {timeout} s; "
                f"its stderr and threads:\n{stderr}"
            ) from None


def nestbed(db: Path, *args: str, **popen: Any) -> Command:
    """``nestbed --db DB ARGS`` as its own process (this tree's sources)."""
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    argv = [sys.executable, "-c", _BOOT, "--db", str(db), *args]
    return Command(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                   **popen)  # fmt: skip


def left(name: str) -> list[str]:
    """Everything of experiment ``name`` still on the machine: traces and processes."""
    tag = experiment_tag(name)
    found = [t for t in traces() if tag in t or t.endswith(f"/{name}")]
    return found + [f"process {pid}: {cmd}" for pid, cmd in processes(str(RUN_DIR / name))]


def processes(needle: str) -> list[tuple[int, str]]:
    """Processes whose command line names ``needle`` (the controller, linkd, probes)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if needle in cmd:
            found.append((int(entry.name), cmd.strip()))
    return found


def manifest(folder: Path) -> dict[str, Any]:
    try:
        return json.loads((folder / "manifest.json").read_text())
    except (OSError, ValueError):
        return {}


def state(db: Path, name: str) -> str | None:
    from nestbed.store import Store

    if not db.exists():
        return None
    with Store.open(str(db)) as store:
        record = store.find(name)
        return str(record.state) if record else None
