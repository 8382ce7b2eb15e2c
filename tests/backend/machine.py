"""What an experiment has on this machine, for the fault tests: its traces (namespaces,
cgroups, state folder), its processes, and the `nestbed` command run as a real process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nestbed.backend.linux import RUN_DIR, traces
from nestbed.backend.plan import experiment_tag

SRC = Path(__file__).resolve().parents[2] / "src"
DEADLINE_S = 180  # generous: the machine is shared and loaded; never a measured threshold


def nestbed(db: Path, *args: str, **popen: Any) -> subprocess.Popen:
    """``nestbed --db DB ARGS`` as its own process (this tree's sources)."""
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    argv = [sys.executable, "-m", "nestbed", "--db", str(db), *args]
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, **popen)  # fmt: skip


def until(condition: Callable[[], Any], what: str, deadline_s: float = DEADLINE_S) -> Any:
    """Waits for ``condition`` to be true (its value), failing with ``what`` at the deadline."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"still waiting after {deadline_s} s for {what}")


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
