"""A run's manifest.json: what ran (file and IR hashes, parameters, seeds), on what (software
versions, host facts), when, and how it ended."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import socket
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nestbed import __version__
from nestbed.results.folder import RunFolder, write_whole

if TYPE_CHECKING:
    from nestbed.model import Experiment  # the IR's models load only where one is built


def _version(argv: list[str]) -> str | None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (done.stdout or done.stderr).strip().splitlines()
    return text[0] if text else None


def host_facts() -> dict[str, Any]:
    pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return {
        "hostname": socket.gethostname(),
        "kernel": platform.release(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "memory_bytes": pages,
        "cgroup": 2 if Path("/sys/fs/cgroup/cgroup.controllers").exists() else 1,
    }


def versions(binaries: dict[str, str]) -> dict[str, str | None]:
    """nestbed, Python and the given tools (name -> path), each by its own ``--version``."""
    found: dict[str, str | None] = {"nestbed": __version__, "python": platform.python_version()}
    for name, path in binaries.items():
        found[name] = _version([path, "--version"])
    return found


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def start(
    run: Path,
    exp: Experiment,
    *,
    run_id: int | None,
    seeds: dict[str, int],
    binaries: dict[str, str],
    options: dict[str, Any],
    placement: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Writes the manifest of a run that is starting (outcome ``running``) and returns it;
    ``placement``: where the experiment lives when that is more than this machine (a
    cluster's hosts and their clock offsets)."""
    ir = exp.to_json()
    RunFolder(run).ir.write_text(ir)
    manifest = {
        "experiment": exp.name,
        "run_id": run_id,
        "file": exp.source.file if exp.source else None,
        "file_sha256": exp.source.sha256 if exp.source else None,
        "ir_sha256": hashlib.sha256(ir.encode()).hexdigest(),
        "parameters": dict(exp.parameters),
        "seeds": seeds,
        "options": options,
        "versions": versions(binaries),
        "host": host_facts(),
        "started_at": now(),
        "ended_at": None,
        "duration_s": None,
        "outcome": "running",
        "reason": None,
    }
    if placement:
        manifest["placement"] = placement
    write(run, manifest)
    return manifest


def read(run: Path) -> dict[str, Any]:
    return json.loads(RunFolder(run).manifest.read_text())


def write(run: Path, manifest: dict[str, Any]) -> None:
    text = json.dumps(manifest, indent=2) + "\n"
    # The drawer and a run's end may write it at once, and the server reads it meanwhile.
    write_whole(RunFolder(run).manifest, lambda tmp: tmp.write_text(text))


def end(run: Path, outcome: str, reason: str | None, duration_s: float | None) -> dict[str, Any]:
    """Records how the run ended, once: a manifest that already has an outcome keeps it."""
    manifest = read(run)
    if manifest.get("outcome") != "running":
        return manifest
    manifest.update(outcome=outcome, reason=reason, ended_at=now(), duration_s=duration_s)
    name = RunFolder(run).manifest.name
    manifest["files"] = sorted(
        str(p.relative_to(run)) for p in run.rglob("*") if p.is_file() and p.name != name
    )
    write(run, manifest)
    return manifest
