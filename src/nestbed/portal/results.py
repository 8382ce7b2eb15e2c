"""A run's results as its page shows them: manifest, tables (sorted as asked), plots, the
report as HTML, linktest reports failures first, captures. Reads the run's folder through
``RunFolder`` and the server's ``runs`` helpers."""

from __future__ import annotations

import contextlib
import functools
import json
from pathlib import Path
from typing import Any

from nestbed.portal import reports
from nestbed.server import runs
from nestbed.store.records import RunRecord

ROWS_SHOWN = 200  # rows of a table on the page (the file, downloadable, has them all)


def _key(value: str) -> tuple[int, float, str]:
    try:
        return (0, float(value), "")
    except ValueError:
        return (1, 0.0, value)


def _stamp(path: Path) -> tuple[str, int, int]:
    info = path.stat()
    return str(path), info.st_mtime_ns, info.st_size


@functools.lru_cache(maxsize=64)
def _table(stamp: tuple[str, int, int]) -> dict[str, Any]:
    return runs.read_table(Path(stamp[0]), limit=runs.TABLE_ROWS)


def sorted_table(path: Path, column: str, descending: bool) -> dict[str, Any]:
    """The table's first rows (read once per version of the file), sorted as asked."""
    cached = _table(_stamp(path))
    found = {**cached, "rows": list(cached["rows"])}
    if column in found["columns"]:
        i = found["columns"].index(column)
        found["rows"].sort(key=lambda r: _key(r[i] if i < len(r) else ""), reverse=descending)
    found["rows"] = found["rows"][:ROWS_SHOWN]
    return found


def report_html(text: str, files_url: str) -> str:
    """The report's Markdown as HTML (raw HTML in it is not passed through; rendered once
    per text), its relative images pointing at the run's files."""
    return with_files(reports.markdown(text), files_url)


def with_files(html: str, files_url: str) -> str:
    """A report's HTML with its relative images pointing at the run's files."""
    return html.replace('src="plots/', f'src="{files_url}/plots/')


REPORT_HEAD_BYTES = 16_000
"""How much of a report's Markdown a run's page renders at once. A 1 000-node run's report
has a row per pipe (hundreds of kB, seconds to render); the rest comes on demand."""


def report_head(text: str, budget: int = REPORT_HEAD_BYTES) -> tuple[str, bool]:
    """The report's first ``budget`` characters or so, cut where the Markdown stays whole:
    at a blank line, before a heading or between a table's rows, never inside a fenced
    block (a cut table keeps its head, so it is still a table). Whether it was cut."""
    if len(text) <= budget:
        return text, False
    lines = text.splitlines(keepends=True)
    size, fenced = 0, False
    for i, line in enumerate(lines):
        if size >= budget and not fenced and i > 0:
            before = lines[i - 1]
            if (not line.strip() or line.startswith("#")
                    or (line.startswith("|") and before.startswith("|"))):  # fmt: skip
                return "".join(lines[:i]), True
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        size += len(line)
    return text, False


def view(run: RunRecord, table: str, sort: str, descending: bool) -> dict[str, Any]:
    folder = runs.folder_of(run)
    shown = runs.summary(run)
    shown["linktest"] = runs.linktest_reports(folder)
    shown["manifest_text"] = json.dumps(shown["manifest"], indent=2) if shown["manifest"] else ""
    shown["sorted"] = {"table": table, "sort": sort, "desc": descending}
    shown["table_data"] = {}
    for name in shown["tables"]:
        try:
            path = runs.inside(folder.root, name)
            by = sort if name == table else ""
            shown["table_data"][name] = sorted_table(path, by, descending and bool(by))
        except (OSError, runs.NotFound):
            continue
    shown["report_text"] = ""
    if shown["has_report"]:
        with contextlib.suppress(OSError):
            shown["report_text"] = folder.report.read_text()
    return shown
