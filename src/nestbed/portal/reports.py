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
    """Markdown as HTML (raw HTML in it is not passed through), CommonMark with tables."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False}).enable("table").render(text)


def render_to(report: Path, path: Path) -> None:
    """Renders ``report`` into ``path``, written whole or not at all."""
    html = markdown(report.read_text())
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as f:
        f.write(html)
    os.replace(f.name, path)


if __name__ == "__main__":
    os.nice(10)  # after the pages the server is answering meanwhile
    render_to(Path(sys.argv[1]), Path(sys.argv[2]))
