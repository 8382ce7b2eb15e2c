"""The figures a sweep takes from each run's results folder: per flow throughput, loss and
delay; per program run time and exit code, and whatever it wrote to its metrics.json."""

from __future__ import annotations

import contextlib
import csv
import json
from pathlib import Path
from typing import Any

from nestbed.results import manifest
from nestbed.results.folder import RunFolder
from nestbed.results.report import summary

# A program may write figures of its own to $NESTBED_PROGRAM_DIR/metrics.json (a flat JSON
# object); they become columns program.NAME.KEY of the sweep's table.
METRICS_FILE = "metrics.json"


def metrics(run: Path) -> dict[str, Any]:
    found: dict[str, Any] = {}
    with contextlib.suppress(Exception):  # a run that failed early has no tables
        for flow in summary(run)["flows"]:
            for key in ("throughput_bps", "loss", "delay_mean_ms"):
                found[f"flow.{flow['flow']}.{key}"] = flow.get(key)
    folder = RunFolder(run)
    programs = folder.programs_table
    if programs.exists():
        with programs.open() as f:
            for row in csv.DictReader(f):
                prefix = f"program.{row['program']}"
                with contextlib.suppress(ValueError, TypeError):
                    found[f"{prefix}.seconds"] = float(row["ended_s"]) - float(row["started_s"])
                found[f"{prefix}.exit_code"] = row.get("exit_code")
    for path in sorted(folder.programs.glob(f"*/{METRICS_FILE}")):
        with contextlib.suppress(OSError, ValueError):
            data = json.loads(path.read_text())
            if isinstance(data, dict):
                for key, value in data.items():
                    if isinstance(value, int | float | str | bool) or value is None:
                        found[f"program.{path.parent.name}.{key}"] = value
    with contextlib.suppress(OSError, ValueError):
        found["seeds"] = json.dumps(manifest.read(run).get("seeds"), sort_keys=True)
    return found
