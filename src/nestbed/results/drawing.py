"""Drawing a run's report (report.md and plots/) after the run, in a process of its own, or on
demand (`nestbed report RUN`), and saying in the manifest which it was and how it went.

The report is read from the run's tables only, so drawing it later loses nothing measured; it
takes pandas and matplotlib a second or more, which a swap-out need not wait for. One drawer
process per machine (and user) draws the reports one after another at the lowest CPU priority
(a sweep's next run goes on meanwhile): a run's end hands its folder over the drawer's socket,
with the folder's report lock (SCM_RIGHTS), or starts the drawer when none listens. So a
thousand runs ending faster than reports are drawn queue a thousand file descriptors, not a
thousand processes. The lock stays held until the folder's report is drawn: ``wait_drawn``
blocks on it, not a poll.

The manifest's ``report`` says ``{"state": "drawing" | "written" | "failed" | "off",
"drawn_by": ...}``; a failed drawing leaves its traceback in report.error.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import fcntl
import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from nestbed import places
from nestbed.results import manifest
from nestbed.results.folder import RunFolder

LOCK = ".report.lock"  # held by whoever is drawing the folder's report
ERROR = "report.error"
DRAWER_LOCK = ".drawer.lock"  # held by the drawer for its whole life
DRAWER_SOCKET = ".drawer.sock"  # where the drawer takes folders to draw
HANDOVER_TIMEOUT_S = 10
HANDOVER_TRIES = 50  # 20 ms apart: a drawer closing down lets its lock go within a second
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


def drawer_home() -> Path:
    """The drawer's lock and socket: root's in nestbed's state folder (mode 0700); another
    user's in a folder of its own under the temporary directory, so nobody else can pose as
    the drawer and take the folders."""
    uid = os.geteuid()
    home = Path(places.run_root()) if uid == 0 else Path(tempfile.gettempdir()) / f"nestbed-{uid}"
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    if home.stat().st_uid != uid:
        raise OSError(f"{home} belongs to another user; remove it")
    return home


def draw_detached(folder: Path) -> subprocess.Popen | None:
    """Has the machine's drawer draw the folder's report and returns at once: the folder is
    handed to the drawer that runs, or a drawer is started for it (the process, then). The
    folder's report lock is taken here and travels with the folder until it is drawn.

    Where an earlier drawing of the same folder (a results folder used again) still holds
    the lock, the drawer waits for it itself: the run's end never waits for a report.
    """
    _note(folder, state="drawing", drawn_by=DETACHED)
    handle = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            lock: int | None = handle
        except BlockingIOError:
            lock = None
        home = drawer_home()
        # A drawer closing down answers no more and holds its lock a moment longer.
        for _ in range(HANDOVER_TRIES):
            if _hand_over(home, folder, lock):
                return None
            if (alone := _try_lock(home / DRAWER_LOCK)) is not None:
                return _start_drawer(home, folder, lock, alone)
            time.sleep(0.02)
        return _start_drawer(home, folder, lock, None)
    except BaseException:
        _note(folder, state="failed", drawn_by=DETACHED, error="the drawing process did not start")
        raise
    finally:
        os.close(handle)  # the lock stays with the drawer's copy


def _try_lock(path: Path) -> int | None:
    handle = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(handle)
        return None
    return handle


def _listen(home: Path) -> socket.socket:
    """The drawer's socket, bound by whoever holds the drawer lock (a dead drawer's file is
    replaced)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    (home / DRAWER_SOCKET).unlink(missing_ok=True)
    listener.bind(str(home / DRAWER_SOCKET))
    listener.listen(64)
    return listener


def _start_drawer(
    home: Path, folder: Path, lock: int | None, alone: int | None
) -> subprocess.Popen:
    """Starts a drawer for ``folder``. With the drawer lock (``alone``) its socket is bound
    here, before it starts: the runs that end while it loads its modules queue with it
    instead of starting drawers of their own."""
    argv = [sys.executable, "-m", "nestbed.results.drawing", str(folder)]
    fds = []
    if lock is not None:
        argv += ["--lock-fd", str(lock)]
        fds.append(lock)
    else:
        argv.append("--take-lock")
    listener = _listen(home) if alone is not None else None
    if alone is not None and listener is not None:
        argv += ["--alone-fd", str(alone), "--listen-fd", str(listener.fileno())]
        fds += [alone, listener.fileno()]
    try:
        # A process that dies before it can say so leaves its traceback in report.error
        # (which a drawing that gets going removes first).
        with (folder / ERROR).open("ab") as log:
            return subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                start_new_session=True, pass_fds=fds,
            )  # fmt: skip
    finally:  # the drawer has its copies
        if listener is not None:
            listener.close()
        if alone is not None:
            os.close(alone)


def _hand_over(home: Path, folder: Path, lock: int | None) -> bool:
    """Whether the running drawer took the folder (and its lock, if held): it answers once
    the folder is in its queue. No drawer, or one closing down, is a no."""
    path = os.fsencode(folder.resolve())
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as sock:
        sock.settimeout(HANDOVER_TIMEOUT_S)
        try:
            sock.connect(str(home / DRAWER_SOCKET))
            socket.send_fds(sock, [path], [lock] if lock is not None else [])
            return sock.recv(16) == b"queued"
        except OSError:  # absent, refused, reset, timed out: start a drawer
            return False


class _Drawer:
    """The machine's drawer: a queue of folders (with their report locks, when held) filled
    from its socket by a thread while the main thread draws them one by one."""

    def __init__(self, home: Path, listener: socket.socket):
        self.home, self.listener = home, listener
        self.queue: collections.deque[tuple[Path, int | None]] = collections.deque()
        self.lock = threading.Lock()
        self.closing = False
        threading.Thread(target=self._accept, daemon=True).start()

    def add(self, folder: Path, lock: int | None) -> None:
        with self.lock:
            self.queue.append((folder, lock))

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return  # shut down: the drawer is closing
            with conn:
                if _peer_uid(conn) != os.geteuid():
                    continue  # only this user's runs hand folders to this user's drawer
                with contextlib.suppress(OSError):
                    data, fds, _, _ = socket.recv_fds(conn, 4096, 1)
                    with self.lock:
                        if self.closing:
                            for fd in fds:
                                os.close(fd)
                            continue
                        self.queue.append((Path(os.fsdecode(data)), fds[0] if fds else None))
                    conn.send(b"queued")

    def next(self) -> tuple[Path, int | None] | None:
        """The next folder; None once the queue is empty, and then nothing more is taken: a
        sender that comes after gets no answer and starts a drawer of its own."""
        with self.lock:
            if self.queue:
                return self.queue.popleft()
            self.closing = True
        (self.home / DRAWER_SOCKET).unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        return None


def _peer_uid(conn: socket.socket) -> int:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


def _draw_one(folder: Path, lock: int | None) -> bool:
    """Draws one folder's report, holding its report lock (waited for when not handed
    over), and lets the lock go with its file."""
    if lock is None:
        lock = _take_lock(folder)
    try:
        return draw(folder, DETACHED) is not None
    finally:
        # Gone before it is released: a waiter that comes later finds nobody drawing.
        (folder / LOCK).unlink(missing_ok=True)
        os.close(lock)


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
    """The calling thread (on Linux, nice and the scheduling policy are a thread's) at the
    lowest priority; threads it starts later inherit it."""
    with contextlib.suppress(OSError):
        os.nice(19)
    with contextlib.suppress(OSError, AttributeError):
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nestbed.results.drawing")
    parser.add_argument("folder", type=Path)
    parser.add_argument("--lock-fd", type=int, help="the report lock, held until done")
    parser.add_argument("--take-lock", action="store_true", help="wait for the report lock")
    parser.add_argument("--alone-fd", type=int, help="the drawer lock, taken by the starter")
    parser.add_argument("--listen-fd", type=int, help="the drawer's socket, bound by the starter")
    args = parser.parse_args(argv)
    home = drawer_home()
    if args.alone_fd is None:
        # Started while another drawer held the lock: wait for it, then bind the socket.
        args.alone_fd = os.open(home / DRAWER_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(args.alone_fd, fcntl.LOCK_EX)
        listener = _listen(home)
    else:
        listener = socket.socket(fileno=args.listen_fd)
    drawer = _Drawer(home, listener)
    # Only the drawing runs at the lowest priority: the thread that takes folders keeps the
    # starter's, so a run's end is answered at once however busy the machine is. Before, a
    # drawer starved by a busy machine answered after the sender's 10 s timeout, which the
    # sender tried again, and a run's swap-out waited minutes (a fresh clone's full run).
    _lowest_priority()
    drawer.add(RunFolder(args.folder).root, None if args.take_lock else args.lock_fd)
    ok = True
    while (item := drawer.next()) is not None:
        try:
            ok = _draw_one(*item) and ok
        except Exception:  # one folder (gone, unwritable) is not the queue's
            # Before, a folder removed while it waited ended the drawer, and every folder
            # queued behind it stayed "drawing" for good.
            traceback.print_exc()
            ok = False
    return 0 if ok else 1  # the drawer lock goes with the process


if __name__ == "__main__":
    sys.exit(main())
