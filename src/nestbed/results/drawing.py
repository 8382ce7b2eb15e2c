"""Drawing a run's report (report.md and plots/) after the run, in a process of its own, or on
demand (`nestbed report RUN`), and saying in the manifest which it was and how it went.

The report is read from the run's tables only, so drawing it later loses nothing measured; it
takes pandas and matplotlib a second or more, which a swap-out need not wait for. The detached
process runs at the lowest CPU priority (a sweep's next run goes on meanwhile), one at a time
on the machine, and holds the folder's report lock until it has finished: ``wait_drawn``
blocks on that lock, not a poll.

The manifest's ``report`` says ``{"state": "drawing" | "written" | "failed" | "off",
"drawn_by": ...}``; a failed drawing leaves its traceback in report.error.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

from nestbed.results import manifest
from nestbed.results.folder import RunFolder

LOCK = ".report.lock"  # held by whoever is drawing the folder's report
ERROR = "report.error"
MACHINE_LOCK = "nestbed-drawing.lock"
DETACHED = "a detached process after the run"
ON_DEMAND = "nestbed report"


def _note(folder: Path, **report: Any) -> None:
    """Records the report's state in the manifest (and, once drawn, its files)."""
    with contextlib.suppress(OSError, ValueError):
        found = manifest.read(folder)
        found["report"] = report
        if report["state"] in ("written", "failed") and "files" in found:
            found["files"] = sorted(
                str(p.relative_to(folder))
                for p in folder.rglob("*")
                if p.is_file() and p.name not in (RunFolder(folder).manifest.name, LOCK)
            )
        manifest.write(folder, found)


def draw(folder: Path, drawn_by: str = ON_DEMAND) -> Path | None:
    """Writes folder/report.md and its plots now; the report, or None if drawing failed (the
    traceback in report.error, the manifest saying so)."""
    from nestbed.results.report import write_report

    (folder / ERROR).unlink(missing_ok=True)
    try:
        path = write_report(folder)
    except Exception as exc:  # the run's results stand without their report
        (folder / ERROR).write_text(traceback.format_exc())
        _note(folder, state="failed", drawn_by=drawn_by, error=f"{type(exc).__name__}: {exc}")
        return None
    _note(folder, state="written", drawn_by=drawn_by)
    return path


def draw_detached(folder: Path) -> subprocess.Popen:
    """Starts drawing the report in a process of its own and returns at once (the process);
    it holds the folder's report lock (taken here, before it starts) until it is done.

    Where an earlier drawing of the same folder (a results folder used again) still holds
    the lock, the new process waits for it itself: the run's end never waits for a report.
    """
    _note(folder, state="drawing", drawn_by=DETACHED)
    handle = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            lock = ["--lock-fd", str(handle)]
        except BlockingIOError:
            lock = ["--take-lock"]
        # A process that dies before it can say so leaves its traceback in report.error
        # (which a drawing that gets going removes first).
        with (folder / ERROR).open("ab") as log:
            return subprocess.Popen(
                [sys.executable, "-m", "nestbed.results.drawing", str(folder), *lock],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                start_new_session=True, pass_fds=(handle,) if "--lock-fd" in lock else (),
            )  # fmt: skip
    except BaseException:
        _note(folder, state="failed", drawn_by=DETACHED, error="the drawing process did not start")
        raise
    finally:
        os.close(handle)  # the lock stays with the drawing process's copy


def _take_lock(folder: Path) -> int:
    """The folder's report lock, waited for: the file locked is the one at its path (an
    earlier drawing removes it before it lets go)."""
    while True:
        handle = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(handle, fcntl.LOCK_EX)
        with contextlib.suppress(FileNotFoundError):
            if os.stat(folder / LOCK).st_ino == os.fstat(handle).st_ino:
                return handle
        os.close(handle)


def wait_drawn(folder: Path) -> dict[str, Any]:
    """Waits until nobody is drawing the folder's report (blocking on its lock); the
    manifest's ``report`` entry then."""
    with contextlib.suppress(FileNotFoundError):
        handle = os.open(folder / LOCK, os.O_RDONLY)
        try:
            fcntl.flock(handle, fcntl.LOCK_SH)
        finally:
            os.close(handle)
    with contextlib.suppress(OSError, ValueError):
        return dict(manifest.read(folder).get("report") or {})
    return {}


def note_off(folder: Path) -> None:
    """The run asked for no report: the manifest says so (`nestbed report RUN` draws it)."""
    _note(folder, state="off", drawn_by=None)


def _lowest_priority() -> None:
    with contextlib.suppress(OSError):
        os.nice(19)
    with contextlib.suppress(OSError, AttributeError):
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nestbed.results.drawing")
    parser.add_argument("folder", type=Path)
    parser.add_argument("--lock-fd", type=int, help="the report lock, held until done")
    parser.add_argument("--take-lock", action="store_true", help="wait for the report lock")
    args = parser.parse_args(argv)
    _lowest_priority()
    folder = RunFolder(args.folder).root
    if args.take_lock:
        args.lock_fd = _take_lock(folder)
    try:
        # One drawing at a time on the machine: a sweep's runs end faster than pandas and
        # matplotlib draw, and each waiting process stays small until its turn.
        with (Path(tempfile.gettempdir()) / MACHINE_LOCK).open("a") as turn:
            fcntl.flock(turn, fcntl.LOCK_EX)
            return 0 if draw(folder, DETACHED) is not None else 1
    finally:
        # Gone before it is released: a waiter that comes later finds nobody drawing.
        (folder / LOCK).unlink(missing_ok=True)
        if args.lock_fd is not None:
            os.close(args.lock_fd)


if __name__ == "__main__":
    sys.exit(main())
