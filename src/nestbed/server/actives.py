"""The swapped-in experiments the live pages and counters follow, kept open between requests.

Opening an experiment's ``Active`` reads its kept plan (a pickle of a few megabytes for
1 000 nodes) and connects to its controller: tens of milliseconds, paid once a second by
every live page otherwise. One ``Active`` per experiment is kept while its kept plan is the
same file: a new swap-in writes a new one, and the next request opens that. Its controller
client serialises the requests of concurrent viewers on its one connection.

What a request does with an ``Active`` runs at the server's starting priority
(``priority.behind``): a process it starts in a node (an exec or a shell) is the
experiment's, and must not run ahead of the experiment's other processes as the server's
own threads do.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from nestbed.backend import kept
from nestbed.lifecycle import Testbed
from nestbed.server import priority


class Actives:
    """Open ``Active``s by stored experiment name, each with the identity of its plan file."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.kept: dict[str, tuple[tuple[int, int], Any]] = {}

    @contextlib.contextmanager
    def of(self, testbed: Testbed, stored: str) -> Iterator[Any]:
        """The experiment's ``Active`` (``testbed.active``'s errors if it is not active),
        used behind the server's priority (module docstring). One that fails while in use
        is closed and forgotten: the next is opened afresh."""
        try:
            found = (testbed.backend.state_root / stored / kept.PLAN).stat()
            key: tuple[int, int] | None = (found.st_ino, found.st_mtime_ns)
        except OSError:
            key = None  # no kept plan: an Active of its own each time
        with self.lock:  # held while opening: two first viewers open it once
            had = self.kept.get(stored)
            if had is not None and had[0] == key:
                active = had[1]
            else:
                active = testbed.active(stored)
                self.kept.pop(stored, None)
                if had is not None:
                    had[1].close()
                if key is not None:
                    self.kept[stored] = (key, active)
        try:
            with priority.behind():
                yield active
        except BaseException:
            self.forget(stored)
            active.close()
            raise
        if key is None:
            active.close()

    def forget(self, stored: str) -> None:
        """Closes the experiment's kept ``Active`` (it was swapped out or failed)."""
        with self.lock:
            had = self.kept.pop(stored, None)
        if had is not None:
            had[1].close()

    def close(self) -> None:
        for stored in list(self.kept):
            self.forget(stored)
