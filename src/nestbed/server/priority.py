"""The server's CPU priority beside what it starts: the server's own threads run ``AHEAD``
nice steps ahead of the machine's other work, and everything it starts for an experiment
(controllers, linkd, the experiment's programs, the commands of a swap-in or swap-out) at
the priority the server was started with, as before.

Why (docs/server.md, "The server beside its experiments"): the server answers people, and
on one machine it competes for the cores with the experiments it runs; a request takes a
few milliseconds of CPU, and behind a busy machine's run queue it waits for hundreds. Nice
is per thread on Linux and a new thread or process inherits its creator's: the event
loop's thread is put ahead when the server starts (``serve_ahead``), so every thread of the
server is, and an operation's thread steps back (``step_back``) before it starts anything.
A process started straight from a request's thread (not through ``operations``) inherits
the server's priority: code that starts one for an experiment (a shell, an exec) starts it
inside ``behind()``, or the experiment's process runs ahead too.
A server that may not raise its priority (not root, no CAP_SYS_NICE) runs as before, and
``NESTBED_SERVER_AHEAD=0`` keeps it level with its experiments.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator

from nestbed.errors import UserError

log = logging.getLogger("nestbed.server")

ENV_VAR = "NESTBED_SERVER_AHEAD"

AHEAD = 5
"""Nice steps ahead, unless $NESTBED_SERVER_AHEAD says otherwise: at -5 against 0 a busy
thread gets about 3 times the share of a core (weights 3 121 and 1 024), not all of it, so
nothing else starves."""

_base: int | None = None  # the nice the server was started with, once it is ahead


def serve_ahead() -> bool:
    """Puts the calling thread (and every thread it starts from now on) ``AHEAD`` steps
    ahead; whether it could."""
    global _base
    ahead = _ahead()
    base = os.getpriority(os.PRIO_PROCESS, 0)
    if ahead == 0:
        return False
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), base - ahead)
    except PermissionError:
        log.info("the server runs at nice %d: it may not put itself ahead of its experiments "
                 "(it needs root or CAP_SYS_NICE)", base)  # fmt: skip
        return False
    _base = base
    log.info("the server's threads run at nice %d, what it starts at %d", base - ahead, base)
    return True


def _ahead() -> int:
    said = os.environ.get(ENV_VAR, str(AHEAD))
    if not said.isdigit() or int(said) > 19:
        raise UserError(f"{ENV_VAR}={said!r} is not a number of nice steps from 0 to 19; "
                        f"unset it for {AHEAD}")  # fmt: skip
    return int(said)


def step_back() -> None:
    """Puts the calling thread back at the server's starting priority (a thread about to
    start an experiment's processes, which inherit it)."""
    if _base is not None:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), _base)


@contextlib.contextmanager
def behind() -> Iterator[None]:
    """The block runs at the server's starting priority, so that a process it starts for an
    experiment inherits that; the thread is put ahead again after it."""
    ahead = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    step_back()
    try:
        yield
    finally:
        if _base is not None:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), ahead)
