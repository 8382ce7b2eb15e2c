"""Live experiments from Python: ``with nestbed.swapin(exp) as live:`` swaps in, hands back an
object to run commands and events in the experiment, and swaps out however the block ends."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nestbed import api, settings
from nestbed.backend import get as get_backend
from nestbed.errors import UserError
from nestbed.lifecycle import signals
from nestbed.lifecycle.active import Active
from nestbed.lifecycle.testbed import Testbed
from nestbed.model import Experiment
from nestbed.model.options import RunOptions
from nestbed.store import Store


@dataclass(frozen=True)
class Completed:
    """A command's exit status and its whole output."""

    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0


class Live:
    """An active experiment: its nodes, its controller and its results folder."""

    def __init__(self, active: Active):
        self.active = active
        self.name, self.plan, self.results = active.name, active.plan, active.results

    @property
    def nodes(self) -> list[str]:
        return self.active.nodes

    def exec(
        self, node: str, command: str | Sequence[str], *, timeout: float | None = None
    ) -> Completed:
        """Runs a command in a node (a string goes through ``sh -c``) and waits for it; after
        ``timeout`` seconds the command and every process it started are killed and
        ``subprocess.TimeoutExpired`` is raised."""
        argv = ["sh", "-c", command] if isinstance(command, str) else list(command)
        # A session of its own: on a timeout (or Ctrl-C) the whole group goes, not only the
        # shell, whose children would otherwise run on in the experiment.
        process = self.active.start(node, argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    stdin=subprocess.DEVNULL, text=True,
                                    start_new_session=True)  # fmt: skip
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            raise
        return Completed(process.returncode, stdout, stderr)

    def event(self, obj: str, verb: str, *args: object, after: float = 0) -> dict[str, Any]:
        """Sends an event now (the row it left in events.csv) or ``after`` seconds from now."""
        reply = self.active.event(obj, verb, [str(a) for a in args], after_s=after)
        row = reply.get("event")
        if row is not None and row["outcome"] != "ok":
            raise UserError(f"event {obj} {verb} failed: {row['message']}")
        return row or {"scheduled_s": reply["scheduled_s"]}

    def status(self) -> dict[str, Any]:
        return self.active.status()


def _definition(experiment: Experiment | api.Experiment | str | Path) -> dict[str, Any]:
    """The IR and its source, as ``Testbed.define`` takes them."""
    if isinstance(experiment, api.Experiment):
        experiment = experiment.build()
    if isinstance(experiment, Experiment):
        return {"exp": experiment, "source_text": experiment.to_json(), "source_format": "python",
                "source_file": experiment.source.file if experiment.source else None}  # fmt: skip
    from nestbed.spec import load

    loaded = load(Path(experiment))
    return {"exp": loaded.experiment, "source_text": loaded.text, "source_format": loaded.format,
            "source_file": str(experiment)}  # fmt: skip


@contextlib.contextmanager
def swapin(
    experiment: Experiment | api.Experiment | str | Path,
    *,
    store: Store | str | None = None,
    results: Path | None = None,
    capture: bool = False,
    options: RunOptions | None = None,
    backend: str | None = None,
) -> Iterator[Live]:
    """``with nestbed.swapin(exp) as live:`` — an experiment (builder, IR or file) swapped in
    for the block; it is swapped out when the block ends, also on exceptions and Ctrl-C.
    ``options`` are a run's options (``results`` and ``capture`` are shorthands). The
    store and back end default as the CLI's do: the environment, then the configuration
    file (``nestbed.settings``)."""
    settings.apply()
    options = (options or RunOptions()).model_copy(
        update={k: v for k, v in {"results": results, "capture": capture or None}.items() if v}
    )
    own = not isinstance(store, Store)
    db = Store.open(store) if own else store  # type: ignore[arg-type]
    try:
        testbed = Testbed(db, get_backend(backend))  # type: ignore[arg-type]
        name = testbed.define(**_definition(experiment))
        # SIGTERM and SIGHUP (if the program left them to their default, which kills at once)
        # end the block as Ctrl-C does, so the experiment is swapped out.
        with signals.handled():
            active = testbed.swap_in(name, options)
            outcome = "completed"
            try:
                yield Live(active)
            except KeyboardInterrupt as exc:
                outcome = signals.outcome(exc)
                raise
            finally:
                testbed.swap_out(name, outcome=outcome)
    finally:
        if own:
            db.close()  # type: ignore[union-attr]
