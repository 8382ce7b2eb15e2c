"""Signals that stop a long command: SIGTERM and SIGHUP handled as SIGINT (Ctrl-C) is.

`timeout`, systemd, a batch system and a closing SSH session stop a program with SIGTERM or
SIGHUP, whose default action kills Python at once, before any ``finally`` could swap an
experiment out. ``install`` turns the three into ``Interrupted``, a ``KeyboardInterrupt``
that names its signal, so every path written for Ctrl-C (keep what was measured, write the
manifest, swap out) serves them too. ``deferred`` holds signals while a network is torn
down, so that a second signal cannot leave half an experiment behind; they are delivered
when the teardown is over.
"""

from __future__ import annotations

import _thread
import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

STOPPING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
RETRY_S = 0.005  # a signal that came in an import is handled again after this long


class Interrupted(KeyboardInterrupt):
    """A stop asked by a signal; ``summary`` is what a run measured before it stopped."""

    def __init__(self, signum: int, summary: dict[str, Any] | None = None):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.summary = summary

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        """The shell's code for a program that a signal ended (130 for SIGINT)."""
        return 128 + self.signum


def signum_of(exc: BaseException) -> int:
    """The signal behind an interrupt (a plain KeyboardInterrupt is Ctrl-C's SIGINT)."""
    return exc.signum if isinstance(exc, Interrupted) else signal.SIGINT


def outcome(exc: BaseException) -> str:
    """A run's outcome after ``exc``: ``interrupted (SIGTERM)``."""
    return f"interrupted ({signal.Signals(signum_of(exc)).name})"


# Python's own import system, written in Python: its steps take and give back the import
# locks by hand, so an exception between two of them leaves a lock held for good.
_IMPORT_SYSTEM = frozenset({"importlib._bootstrap", "importlib._bootstrap_external", "zipimport"})


def _in_import_system(frame: FrameType | None) -> bool:
    return frame is not None and frame.f_globals.get("__name__") in _IMPORT_SYSTEM


def _in_handler(signum: int, frame: FrameType | None) -> bool:
    """Whether ``frame`` runs inside a handler of this signal: a second signal that came
    while the first was handled (Python calls the handler again at its next step)."""
    installed = getattr(signal.getsignal(signum), "__code__", None)
    while frame is not None:
        if frame.f_code is _raise.__code__ or frame.f_code is installed:
            return True
        frame = frame.f_back
    return False


def _raise(signum: int, frame: FrameType | None) -> None:
    if _in_handler(signum, frame):
        return  # the stop the first one is handling
    # The stop is kept apart from the exception raised: that one carries the frames it
    # went through, which would live as long as this module and hold what they held (an
    # unread query's lock on the store, among others).
    _held.last = Interrupted(signum)
    # Sticky too: Python swallows an exception raised while a finalizer (``__del__``, a
    # weakref callback) runs, so long loops also ask ``check`` at their own pace.
    stop_everywhere(signum)
    if not _in_import_system(frame):
        raise Interrupted(signum)
    # Raised here, the exception could leave the global import lock or a module's lock
    # held: this thread goes on (they are its own), but every later import in another
    # thread waits forever (a run's summary waited so on pandas, which a thread of its own
    # was importing). The signal is handled again in a moment, until the import system's
    # code has returned into the code that imported; asked from this thread, it would be
    # handled at once, in this very handler.
    if not _held.retrying:
        _held.retrying = True
        retry = threading.Timer(RETRY_S, _retry, (signum,))
        retry.daemon = True
        retry.start()


def _retry(signum: int) -> None:
    _held.retrying = False
    if signal.getsignal(signum) in (_raise, _hold):
        # A real signal, to the main thread: it interrupts a wait the main thread went into
        # meanwhile (a lock, a sleep), which a stop only flagged to Python would not.
        signal.pthread_kill(threading.main_thread().ident or 0, signum)
    else:  # its handler is no longer ours (``handled`` ended): the default would kill
        _thread.interrupt_main(signum)


def last() -> Interrupted | None:
    """The last stop a signal asked for in this process (None: none yet)."""
    return _held.last


class _Held:
    last: Interrupted | None = None
    retrying = False  # a signal that came in an import is to be handled again
    depth = 0
    pending: list[int] = []
    saved: dict[int, Any] = {}


_held = _Held()


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def install() -> None:
    """From now on SIGINT, SIGTERM and SIGHUP raise ``Interrupted`` in the main thread."""
    if _main_thread():
        for signum in STOPPING:
            signal.signal(signum, _raise)


@contextlib.contextmanager
def handled() -> Iterator[None]:
    """``install`` for the block only, for a library's caller (the Python API): handlers
    the program set itself are kept; only the defaults (which would kill the process before
    the block could clean up) are replaced."""
    if not _main_thread():
        yield
        return
    replaced = {}
    for signum in STOPPING:
        current = signal.getsignal(signum)
        if current in (signal.SIG_DFL, signal.default_int_handler):
            replaced[signum] = current
            signal.signal(signum, _raise)
    try:
        yield
    finally:
        for signum, previous in replaced.items():
            signal.signal(signum, previous)
        carry_on()


def _hold(signum: int, _frame: FrameType | None) -> None:
    _held.pending.append(signum)


@contextlib.contextmanager
def deferred(*, deliver: bool = True) -> Iterator[None]:
    """Signals that arrive in the block are held and, if ``deliver``, delivered again when
    it ends (unless it ends by an exception, which already stops the program). Nested
    blocks hold until the outermost ends. Outside the main thread no signal is delivered
    anyway, and the block runs as it is."""
    if not _main_thread():
        yield
        return
    if _held.depth == 0:
        _held.pending = []
        _held.saved = {signum: signal.getsignal(signum) for signum in STOPPING}
        for signum in STOPPING:
            signal.signal(signum, _hold)
    _held.depth += 1
    failed = False
    try:
        yield
    except BaseException:
        failed = True
        raise
    finally:
        _held.depth -= 1
        if _held.depth == 0:
            for signum, previous in _held.saved.items():
                signal.signal(signum, previous)
            if deliver and not failed and _held.pending:
                os.kill(os.getpid(), _held.pending[0])


class _Everywhere:
    """A stop for runs in other threads (a parallel sweep's): signals reach the main thread
    only, which passes the stop on through this event."""

    event = threading.Event()
    signum = signal.SIGINT


def stop_everywhere(signum: int) -> None:
    """Runs waiting in any thread end as interrupted by ``signum`` at their next poll."""
    _Everywhere.signum = signum
    _Everywhere.event.set()


def carry_on() -> None:
    """Clears a stop passed on by ``stop_everywhere`` (the stopped work is over)."""
    _Everywhere.event.clear()


def check() -> None:
    """Raises ``Interrupted`` in a thread whose program has been asked to stop."""
    if _Everywhere.event.is_set():
        raise Interrupted(_Everywhere.signum)
