"""Runs the Rust analyzer (nestbed-analyze) on captures and returns its JSON report."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from nestbed.errors import InternalError, UserError


def analyzer_binary() -> str:
    """The nestbed-analyze binary: $NESTBED_ANALYZE, this checkout's release build, or PATH."""
    from nestbed.binaries import built_binary  # the one lookup of nestbed's Rust binaries

    return built_binary("nestbed-analyze")


def run_analyzer(pcaps: list[Path], tables: Path, *, bin_s: float = 1.0) -> dict[str, Any]:
    """Analyzes ``pcaps`` (each on its own), writing series/rtt/spacing/window CSVs into
    ``tables``; returns the report (docs/analyze.md, "The analyzer's output")."""
    argv = [analyzer_binary(), "--tables", str(tables), "--bin", repr(bin_s), "--"]
    argv += [str(p) for p in pcaps]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    message = done.stderr.strip().splitlines()[-1:] or [f"exit status {done.returncode}"]
    if done.returncode == 2:
        raise UserError(message[0].removeprefix("nestbed-analyze: "))
    if done.returncode != 0:
        raise InternalError(f"nestbed-analyze failed ({done.returncode}): {message[0]}")
    try:
        report = json.loads(done.stdout)
    except ValueError as exc:
        raise InternalError(f"nestbed-analyze printed no JSON report: {exc}") from exc
    if not isinstance(report, dict) or report.get("version") != 1:
        raise InternalError("nestbed-analyze printed a report of an unknown version")
    return report
