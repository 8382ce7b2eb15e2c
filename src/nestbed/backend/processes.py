"""Waiting for a process to end without sleeping in a loop: a pidfd (Linux 5.3) becomes
readable the moment its process exits, whoever its parent is.

A daemon started by an earlier command (linkd, the controller) is no child of the command that
stops it, and where the machine's init does not reap orphans it stays a zombie: ``kill(pid,
0)`` would still find it, so a poll on it waits out its whole timeout. The pidfd says "exited"
for a zombie too.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
from typing import Any


def _open(pid: int) -> int | None:
    """A pidfd of ``pid``; None when no such process exists any more."""
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        return None


def wait_gone(pidfd: int, timeout_s: float | None) -> bool:
    """Whether the process behind ``pidfd`` has exited within ``timeout_s`` (None: forever)."""
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    return bool(poller.poll(None if timeout_s is None else max(0, int(timeout_s * 1000))))


def stop(pid: int, grace_s: float = 2.0) -> bool:
    """Ends process ``pid``: SIGTERM, then SIGKILL if it is still there after ``grace_s``;
    returns once it has exited (reaped if it is our child). Whether it ended on SIGTERM."""
    pidfd = _open(pid)
    if pidfd is None:
        return True
    try:
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(pidfd, signal.SIGTERM)
        gentle = wait_gone(pidfd, grace_s)
        if not gentle:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            wait_gone(pidfd, None)
    finally:
        os.close(pidfd)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    return gentle


def exit_fd(process: Any) -> int:
    """A descriptor (the caller's to close) that becomes readable once ``process`` has
    exited: a Popen's pidfd, or the descriptor a back end's proxy of a command on another
    machine gives (``exit_fd``), where the pid is that machine's."""
    own = getattr(process, "exit_fd", None)
    return own() if own is not None else os.pidfd_open(process.pid)


def kill_group(process: Any) -> None:
    """SIGKILL to the process group of ``process`` (started in a session of its own), on
    this machine or, through a back end's proxy (``signal_group``), on another."""
    own = getattr(process, "signal_group", None)
    if own is not None:
        own(signal.SIGKILL)
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
