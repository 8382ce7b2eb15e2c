"""A run's whole report as HTML, rendered once per version of its report.md and kept on disk.

A 1 000-node run's report has a row per pipe: some 230 kB of Markdown, which markdown-it
renders in half a second on an idle machine and two to four under load. The run's page
shows its first part at once (``results.report_head``) and starts the whole one rendering
in the background, in a process of its own at a low priority (in the server's process it
would hold the interpreter's lock, slowing every other page meanwhile); the HTML is kept
under the server's results root, named by a digest of the report's path, modification
time and size, so that a report drawn anew is rendered anew and a server restarted finds
what it had. "Show the whole report" reads that file, or waits for its rendering.

    python -P .../nestbed/portal/reports.py REPORT.md OUT.html    (what the background runs:
        by path, so that it imports neither the portal's package nor FastAPI)
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

KEPT = 64
"""Rendered reports kept at most; the least recently written go first."""
RENDER_TIMEOUT_S = 300.0

_RENDERING = ThreadPoolExecutor(max_workers=1, thread_name_prefix="portal-report")
_lock = threading.Lock()
_pending: dict[Path, Future[Path]] = {}


def kept_path(cache: Path, report: Path) -> Path:
    """Where the HTML of this version of ``report`` is kept (``OSError``: no report)."""
    info = report.stat()
    said = f"{report.resolve()}\0{info.st_mtime_ns}\0{info.st_size}".encode()
    return cache / f"{hashlib.sha256(said).hexdigest()[:32]}.html"


def start(cache: Path, report: Path) -> Future[Path]:
    """The rendering of ``report`` to its kept file: done if it is kept, else started (once,
    however many ask at the same time)."""
    path = kept_path(cache, report)
    with _lock:
        if path in _pending:
            return _pending[path]
        done: Future[Path] = Future()
        if path.is_file():
            done.set_result(path)
            return done
        found = _pending[path] = _RENDERING.submit(_render, report, path)
    found.add_done_callback(lambda _: _forget(path))
    return found


def whole(cache: Path, report: Path) -> str:
    """The whole report's HTML: the kept one, or rendered now (waiting for a rendering
    already under way rather than starting another)."""
    return start(cache, report).result(timeout=RENDER_TIMEOUT_S).read_text()


def _forget(path: Path) -> None:
    with _lock:
        _pending.pop(path, None)


def _render(report: Path, path: Path) -> Path:
    from nestbed.errors import InternalError  # here: the rendering process needs no nestbed

    path.parent.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-P", __file__, str(report), str(path)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=RENDER_TIMEOUT_S,
                          check=False)  # fmt: skip
    if done.returncode != 0 or not path.is_file():
        raise InternalError(f"rendering {report} failed: {done.stderr.strip()[-500:]}")
    _prune(path.parent)
    return path


def _prune(cache: Path) -> None:
    with contextlib.suppress(OSError):
        found = sorted(cache.glob("*.html"), key=lambda p: p.stat().st_mtime_ns, reverse=True)
        for old in found[KEPT:]:
            old.unlink(missing_ok=True)


@functools.lru_cache(maxsize=16)
def markdown(text: str) -> str:
    """Markdown as HTML (raw HTML in it is not passed through), CommonMark with tables.

    A report's big tables (a row per pipe) are most of its text and of markdown-it's time:
    a table whose cells are plain text (no character Markdown or HTML gives a meaning to)
    is written here, as markdown-it writes it, and the rest of the text is left to
    markdown-it, cut at the blank lines around those tables (so nothing spans the cuts;
    a text with link reference definitions, which could, goes to markdown-it whole)."""
    from markdown_it import MarkdownIt

    render = MarkdownIt("commonmark", {"html": False}).enable("table").render
    if REFERENCE.search(text):
        return render(text)
    lines = text.splitlines()
    parts, plain, fenced, i = [], [], False, 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        table = None if fenced or (plain and plain[-1].strip()) else _table(lines, i)
        if table is None:
            plain.append(line)
            i += 1
            continue
        html, i = table
        parts += [render("\n".join(plain) + "\n") if plain else "", html]
        plain = []
    parts.append(render("\n".join(plain) + "\n") if plain else "")
    return "".join(parts)


REFERENCE = re.compile(r"^ {0,3}\[[^\]]*\]:", re.MULTILINE)
PLAIN_CELL = re.compile(r"[^\\`*_\[\]!<>&~|\"'\x00-\x1f]*")
DELIMITER = re.compile(r"\s*(:?)-+(:?)\s*")


def _cells(line: str) -> list[str] | None:
    line = line.strip()
    if len(line) < 2 or line[0] != "|" or line[-1] != "|":
        return None
    cells = [c.strip() for c in line[1:-1].split("|")]
    return cells if all(PLAIN_CELL.fullmatch(c) for c in cells) else None


def _table(lines: list[str], start: int) -> tuple[str, int] | None:
    """The plain table at ``start`` as HTML and the line after it (None: not one, or not
    plain: markdown-it's). It is followed by a blank line or the end."""
    head = _cells(lines[start])
    if head is None or start + 1 >= len(lines):
        return None
    rule = lines[start + 1].strip()
    aligns = []
    for cell in rule[1:-1].split("|") if rule.startswith("|") and rule.endswith("|") else [""]:
        found = DELIMITER.fullmatch(cell)
        if found is None:
            return None
        left, right = found.groups()
        aligns.append("center" if left and right else "right" if right else "left" if left else "")
    rows, end = [], start + 2
    while end < len(lines) and lines[end].strip():
        row = _cells(lines[end])
        if row is None or len(row) != len(head):
            return None
        rows.append(row)
        end += 1
    if len(aligns) != len(head) or not rows:
        return None
    tags = [f' style="text-align:{a}"' if a else "" for a in aligns]

    def row_html(cells: list[str], tag: str) -> str:
        said = "".join(f"<{tag}{t}>{c}</{tag}>\n" for t, c in zip(tags, cells, strict=True))
        return f"<tr>\n{said}</tr>\n"

    body = "".join(row_html(r, "td") for r in rows)
    head_html = row_html(head, "th")
    return f"<table>\n<thead>\n{head_html}</thead>\n<tbody>\n{body}</tbody>\n</table>\n", end


def render_to(report: Path, path: Path) -> None:
    """Renders ``report`` into ``path``, written whole or not at all."""
    html = markdown(report.read_text())
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as f:
        f.write(html)
    os.replace(f.name, path)


if __name__ == "__main__":
    os.nice(10)  # after the pages the server is answering meanwhile
    render_to(Path(sys.argv[1]), Path(sys.argv[2]))
