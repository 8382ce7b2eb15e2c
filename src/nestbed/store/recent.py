"""A small cache of recent answers of the store, for what every request of a server asks
again: whose a token is, a user's role in a project. An answer is kept ``ttl_s`` at most, so
a change made by another process (``nestbed server member-add`` beside a running server) is
seen within that time; changes made through the same ``Accounts`` forget everything at once
(``clear``), so a token revoked over the API stops working at the next request. None (no
such token, not a member) is never kept: what a caller invents cannot fill the cache, and
a token or member added elsewhere counts at once."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from typing import Any

TTL_S = 5.0
"""How long an answer is trusted: the longest a change from another process goes unseen."""
MAX_ENTRIES = 10_000
"""Past this many the cache starts afresh (a bound, should there be that many tokens)."""


class Recent:
    """Answers by key, each for ``ttl_s`` (thread-safe)."""

    def __init__(self, ttl_s: float = TTL_S, max_entries: int = MAX_ENTRIES) -> None:
        self.ttl_s, self.max_entries = ttl_s, max_entries
        self._lock = threading.Lock()
        self._kept: dict[Hashable, tuple[float, Any]] = {}
        self._generation = 0  # bumped by ``clear``: an answer read before it is not kept

    def get(self, key: Hashable, load: Callable[[], Any]) -> Any:
        """The answer kept for ``key`` if fresh, else ``load()``'s (then kept unless None)."""
        now = time.monotonic()
        with self._lock:
            found = self._kept.get(key)
            if found is not None and now - found[0] < self.ttl_s:
                return found[1]
            generation = self._generation
        value = load()
        with self._lock:
            if value is not None and generation == self._generation:  # nothing changed since
                if len(self._kept) >= self.max_entries:
                    self._kept.clear()
                self._kept[key] = (now, value)
        return value

    def clear(self) -> None:
        """Forgets every answer (after a change to accounts)."""
        with self._lock:
            self._kept.clear()
            self._generation += 1
