"""What an experiment has on this machine, for the fault tests: its traces (namespaces,
cgroups, state folder), its processes, and the `nestbed` command run as a real process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from nbtest import until as until  # the fault tests import it from here
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
