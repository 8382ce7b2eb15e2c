"""Long operations on experiments (swap in, swap out, a whole run), each in a worker thread,
so the API answers at once with the experiment's state while the work goes on.

At most one operation per experiment runs at a time: a second request while one runs is
refused (``Busy``) before anything is touched, so a delete cannot slip in between a
swap-in's acceptance and its first state change. What each operation ended with is kept
in memory for ``status`` (the store keeps the state and the error, which outlive a
restart) and written to the audit log by the ``done`` callback. ``stop`` asks running
runs to end as interrupted (a server shutting down) and waits for every worker.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from nestbed.errors import NestbedError, UserError
from nestbed.lifecycle import signals
from nestbed.server import priority


class Busy(UserError):
    """An experiment already has an operation running on this server."""


@dataclass
class Operation:
    """One long operation on one experiment."""

    kind: str
    experiment: str  # the stored name
    actor: str | None
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    ended_at: datetime | None = None
    error: str | None = None

    @property
    def status(self) -> str:
        if self.ended_at is None:
            return "running"
        return "failed" if self.error is not None else "done"


Done = Callable[[Operation], None]


class Operations:
    """The worker threads of one server, by experiment."""

    def __init__(self, done: Done) -> None:
        self._done = done
        self._lock = threading.Lock()
        self._last: dict[str, Operation] = {}
        self._threads: dict[str, threading.Thread] = {}

    def start(self, op: Operation, work: Callable[[], object]) -> Operation:
        """Runs ``work`` for ``op`` in a new thread; ``Busy`` if the experiment has one."""
        return self.launch(self.reserve(op), work)

    def reserve(self, op: Operation) -> Operation:
        """Marks the experiment busy with ``op`` (``Busy`` if it has one running), to be
        ``launch``ed or ``release``d."""
        with self._lock:
            running = self._last.get(op.experiment)
            if running is not None and running.ended_at is None:
                raise Busy(
                    f"experiment {op.experiment} is busy with a {running.kind} asked by "
                    f"{running.actor or 'the server'}; wait for it to end"
                )
            self._last[op.experiment] = op
        return op

    def release(self, op: Operation) -> None:
        """Gives up a reservation never launched (the request failed after it)."""
        with self._lock:
            if self._last.get(op.experiment) is op:
                del self._last[op.experiment]

    def launch(self, op: Operation, work: Callable[[], object]) -> Operation:
        """Runs ``work`` for the reserved ``op`` in a new thread."""
        thread = threading.Thread(target=self._run, args=(op, work),
                                  name=f"{op.kind} {op.experiment}")  # fmt: skip
        with self._lock:
            self._threads[op.experiment] = thread
        thread.start()
        return op

    def _run(self, op: Operation, work: Callable[[], object]) -> None:
        priority.step_back()  # what the work starts runs behind the server (``priority``)
        try:
            work()
        except (NestbedError, KeyboardInterrupt) as exc:
            op.error = str(exc) or type(exc).__name__
        except Exception as exc:  # a bug: kept whole for the log and the status
            op.error = f"internal error: {type(exc).__name__}: {exc}"
            raise
        finally:
            try:
                # Audited before it is seen to end: a client that saw it end (its status,
                # or a next request no longer busy) finds its end in the audit log.
                self._done(op)
            finally:
                op.ended_at = datetime.now(UTC)

    def last(self, experiment: str) -> Operation | None:
        """The last operation on ``experiment`` (the stored name) since the server started."""
        return self._last.get(experiment)

    def seen(self, experiment: str) -> Operation | None:
        """A copy of the last operation on ``experiment`` as it is now, which its worker
        will not change: read *before* the experiment's record, so that an operation seen
        ended has already written the state the record then shows."""
        found = self._last.get(experiment)
        return None if found is None else replace(found)

    def seen_all(self) -> dict[str, Operation]:
        """``seen`` for every experiment at once (for a list)."""
        with self._lock:
            return {name: replace(op) for name, op in self._last.items()}

    def running(self, *kinds: str) -> set[str]:
        """The experiments with an operation of one of ``kinds`` under way."""
        with self._lock:
            return {op.experiment for op in self._last.values()
                    if op.ended_at is None and op.kind in kinds}  # fmt: skip

    def busy(self, experiment: str) -> bool:
        found = self._last.get(experiment)
        return found is not None and found.ended_at is None

    def forget(self, experiment: str) -> None:
        """Drops a deleted experiment's last operation."""
        with self._lock:
            if not self.busy(experiment):
                self._last.pop(experiment, None)

    def wait(self, timeout_s: float | None = None) -> None:
        """Until every worker has ended (for tests and shutdown)."""
        for thread in list(self._threads.values()):
            thread.join(timeout_s)

    def stop(self) -> None:
        """Running runs end as interrupted (SIGTERM), keeping what they measured; swap-ins
        and swap-outs finish; returns when every worker has ended."""
        signals.stop_everywhere(signal.SIGTERM)
        try:
            self.wait()
        finally:
            signals.carry_on()
