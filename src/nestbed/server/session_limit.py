"""The limit on each user's open exec and shell sessions (``server.sessions``): on a shared
machine every session is a process tree in a node, so one user opening sessions without end
could use up the machine's processes and memory and starve every other project.

A session holds a ``Place`` among its user's, counted across all their projects: taken,
under the server's limit (``nestbed serve --max-sessions``), before its command starts, and
given back however the session ends (its command exits, its client leaves, its timeout,
an error of the server), exactly once. A place taken over the limit is refused with
``TooMany`` (429).
"""

from __future__ import annotations

import threading
from collections import Counter

from nestbed.server.auth import TooMany


class UserSessions:
    """The sessions open now, per user (thread-safe: places are taken in worker threads and
    given back in the event loop)."""

    def __init__(self) -> None:
        self._open: Counter[str] = Counter()
        self._lock = threading.Lock()

    def place(self, user: str) -> Place:
        """A place for one session of ``user``, not taken yet."""
        return Place(self, user)

    def count(self, user: str) -> int:
        """The user's sessions open now."""
        with self._lock:
            return self._open[user]

    def _take(self, user: str, limit: int | None) -> None:
        with self._lock:
            held = self._open[user]
            if limit is not None and held >= limit:
                raise TooMany(
                    f"user {user!r} already has {held} exec or shell session"
                    f"{'' if held == 1 else 's'} open (across all their projects), the most "
                    f"this server allows one user (nestbed serve --max-sessions {limit}); end "
                    "one of them, or ask the server's admin to raise --max-sessions"
                )
            self._open[user] = held + 1

    def _give_back(self, user: str) -> None:
        with self._lock:
            self._open[user] -= 1
            if self._open[user] <= 0:
                del self._open[user]


class Place:
    """One session's place among its user's: taken at most once, given back at most once;
    once given back (the session over) it can no longer be taken, so a session whose start
    finishes after its end cannot hold a place for good."""

    def __init__(self, sessions: UserSessions, user: str) -> None:
        self._sessions, self._user = sessions, user
        self._held = self._over = False
        self._lock = threading.Lock()

    def take(self, limit: int | None) -> None:
        """Counts the session as open; ``TooMany`` if its user has ``limit`` open already
        (None: no limit)."""
        with self._lock:
            if self._over:
                raise TooMany(f"the session of user {self._user!r} ended before it started")
            if not self._held:
                self._sessions._take(self._user, limit)
                self._held = True

    def give_back(self) -> None:
        """The session is over: its place is free again (once, however often called)."""
        with self._lock:
            self._over = True
            if self._held:
                self._held = False
                self._sessions._give_back(self._user)
