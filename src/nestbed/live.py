"""Live experiments from Python: ``with nestbed.swapin(exp) as live:`` swaps in, hands back an
object to run commands and events in the experiment, and swaps out however the block ends."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nestbed import api
from nestbed.backend import linux
from nestbed.backend.plan import Plan
from nestbed.control import client as control
from nestbed.errors import UserError
from nestbed.model import Experiment
from nestbed.store import Store
from nestbed.swap import swap_in, swap_out


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

    def __init__(self, name: str, plan: Plan, results: Path):
        self.name, self.plan, self.results = name, plan, results

    @property
    def nodes(self) -> list[str]:
        return [n.name for n in self.plan.nodes]

    def exec(
        self, node: str, command: str | Sequence[str], *, timeout: float | None = None
    ) -> Completed:
        """Runs a command in a node (a string goes through ``sh -c``) and waits for it."""
        if node not in self.nodes:
            nodes = ", ".join(self.nodes)
            raise UserError(f"experiment {self.name} has no node '{node}'; its nodes are {nodes}")
        argv = ["sh", "-c", command] if isinstance(command, str) else list(command)
        done = linux.exec_in(
            self.plan,
            node,
            argv,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        return Completed(done.returncode, done.stdout, done.stderr)

    def event(self, obj: str, verb: str, *args: object, after: float = 0) -> dict[str, Any]:
        """Sends an event now (the row it left in events.csv) or ``after`` seconds from now."""
        reply = control.request(
            self.plan, "event", object=obj, verb=verb, args=[str(a) for a in args], after_s=after
        )
        row = reply.get("event")
        if row is not None and row["outcome"] != "ok":
            raise UserError(f"event {obj} {verb} failed: {row['message']}")
        return row or {"scheduled_s": reply["scheduled_s"]}

    def status(self) -> dict[str, Any]:
        reply = control.request(self.plan, "status")
        reply.pop("ok", None)
        return reply


def _ir(experiment: Experiment | api.Experiment | str | Path) -> tuple[Experiment, str, str]:
    """The IR, the source text and its format."""
    if isinstance(experiment, api.Experiment):
        experiment = experiment.build()
    if isinstance(experiment, Experiment):
        return experiment, experiment.to_json(), "python"
    from nestbed.spec import load

    loaded = load(Path(experiment))
    return loaded.experiment, loaded.text, loaded.format


@contextlib.contextmanager
def swapin(
    experiment: Experiment | api.Experiment | str | Path,
    *,
    store: Store | str | None = None,
    results: Path | None = None,
    capture: bool = False,
) -> Iterator[Live]:
    """``with nestbed.swapin(exp) as live:`` — an experiment (builder, IR or file) swapped in
    for the block; it is swapped out when the block ends, also on exceptions and Ctrl-C."""
    exp, text, fmt = _ir(experiment)
    own = not isinstance(store, Store)
    db = Store.open(store) if own else store  # type: ignore[arg-type]
    try:
        fields = dict(
            source_text=text,
            source_format=fmt,
            source_file=exp.source.file if exp.source else None,
            ir_json=exp.to_json(),
        )
        if db.find(exp.name) is None:
            db.create_experiment(exp.name, **fields)  # type: ignore[arg-type]
        else:
            db.update_ir(exp.name, **fields)  # type: ignore[arg-type]
        active = swap_in(db, exp.name, results=results, capture=capture)
        try:
            yield Live(exp.name, active.plan, active.results)
        finally:
            swap_out(db, exp.name)
    finally:
        if own:
            db.close()
