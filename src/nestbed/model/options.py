"""How one run of an experiment is made: the options a user gives (CLI, Python API, sweep),
validated once, and the document a controller is started with.

``RunOptions`` is frozen and travels unchanged from the command line or the API down to the
controller as one JSON document (``ControllerStart``), so no layer re-spells an option.
Node names are checked against the experiment by ``for_experiment``, which also expands
``all``; nothing else here needs the experiment.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from nestbed.errors import UserError
from nestbed.model.base import Frozen
from nestbed.model.ir import Experiment

DEFAULT_CPUMON_DUTY = 0.1  # of each second the CPU monitor loops; the rest is the node's
LINKTEST_LEVELS = (1, 2, 3, 4)


def node_names(text: str | None, option: str) -> tuple[str, ...]:
    """The names in a comma-separated option value ("all" kept as is); () when not given."""
    if text is None:
        return ()
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    if not names:
        raise UserError(f"{option} {text!r} names no node; give node names or all")
    return names


class RunAs(Frozen):
    """The unprivileged Unix identity an experiment's own processes (programs, start commands,
    traffic tools) run as: a project's on a shared server, with no supplementary groups and no
    capabilities. Never root: the server allocates it from a range of its own."""

    uid: int = Field(gt=0)
    gid: int = Field(gt=0)


class RunOptions(Frozen):
    """Everything a user may choose about one run (defaults: a plain run)."""

    results: Path | None = None  # the run's folder; None: results/NAME-TIME
    capture: bool = False  # pcaps of link ends (all, or those of capture_nodes)
    capture_nodes: tuple[str, ...] = ()
    cpumon: tuple[str, ...] = ()  # nodes where nestbed-cpumon runs ("all" before expansion)
    cpumon_duty: float = Field(default=DEFAULT_CPUMON_DUTY, gt=0, le=1)
    report: bool = True  # report.md and its plots at the end of the run
    linktest: int | None = Field(default=None, ge=1, le=4)  # a linktest before the run
    linktest_strict: bool = False  # ... whose failed check fails the swap-in
    duration_s: float | None = Field(default=None, gt=0)
    timeout_s: float | None = Field(default=None, gt=0)  # cut a run that goes on longer
    keep: bool = False  # stay active after `run`
    # Who the experiment's own processes run as; None: as the controller (root, a local run).
    # Only the server sets it (its project's identity), never a user's request.
    run_as: RunAs | None = None

    @classmethod
    def make(cls, **fields: object) -> RunOptions:
        """Options from a user's values (None: not given); a bad one is one UserError
        naming its option and what it must be."""
        given = {k: v for k, v in fields.items() if v is not None}
        duty = given.get("cpumon_duty")
        if duty is not None and not 0 < duty <= 1:  # type: ignore[operator]
            raise UserError(f"--cpumon-duty {duty} is not a fraction in (0, 1]; write e.g. 0.1")
        for name in ("duration_s", "timeout_s"):
            value = given.get(name)
            if value is not None and not value > 0:  # type: ignore[operator]
                option = "--" + name.removesuffix("_s")
                raise UserError(f"{option} {value} is not a positive number of seconds")
        level = given.get("linktest")
        if level is not None and level not in LINKTEST_LEVELS:
            raise UserError(f"linktest level {level} does not exist; use 1 to 4")
        return cls(**given)  # type: ignore[arg-type]

    def for_experiment(self, exp: Experiment) -> RunOptions:
        """These options with node names checked against ``exp`` and "all" expanded; a
        capture of some nodes implies a capture."""
        captured = self._nodes(exp, self.capture_nodes, "--capture-nodes")
        return self.model_copy(
            update={
                "cpumon": self._nodes(exp, self.cpumon, "--cpumon"),
                "capture_nodes": captured,
                "capture": self.capture or bool(captured),
            }
        )

    @staticmethod
    def _nodes(exp: Experiment, wanted: tuple[str, ...], option: str) -> tuple[str, ...]:
        nodes = [n.name for n in exp.nodes if not n.simulated]  # no process runs in those
        if "all" in wanted:
            return tuple(nodes)
        unknown = [n for n in wanted if n not in nodes]
        if unknown:
            raise UserError(
                f"experiment {exp.name} has no node '{unknown[0]}' for {option}; its nodes are "
                f"{', '.join(nodes)} (or write all)"
            )
        return wanted


class ControllerStart(Frozen):
    """What an experiment's controller starts a run with (as a process, or for the next run
    of a reused network): one JSON document."""

    backend: str  # the back end's name (nestbed.backend.get)
    ir: Path  # the experiment as swapped in (ir.json in the back end's run folder)
    results: Path  # the run's folder (resolved)
    run_id: int | None = None  # the store's run
    reused_runs: int = 0  # runs this network served before (a sweep's link-reuse mode)
    options: RunOptions
