"""The IR and plan a swap-in carried out, kept in the experiment's run folder (the back end's
``run_dir``) so that swap-out, status, exec and the controller undo or reach exactly that
network without computing its plan again (static routes of a large topology take seconds).

The plan is pickled: it is written and read only by nestbed, in a root-only folder of its own
(0700), and it is keyed by the IR's hash, so a plan kept for another IR is never used.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import pickle
from pathlib import Path
from typing import TYPE_CHECKING

from nestbed.backend.plan import Plan, plan

if TYPE_CHECKING:
    from nestbed.model import Experiment

IR = "ir.json"  # the IR a swap-in used, kept so swap-out undoes exactly that
PLAN = "plan.pickle"


def _key(ir_json: str) -> str:
    return hashlib.sha256(ir_json.encode()).hexdigest()


def keep(directory: Path, exp: Experiment, p: Plan) -> Path:
    """Writes the IR and its plan into ``directory``; the IR's path."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    ir_json = exp.to_json()
    tmp = directory / (PLAN + ".tmp")
    with tmp.open("wb") as out:
        pickle.dump((_key(ir_json), p), out, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, directory / PLAN)
    (directory / IR).write_text(ir_json)
    return directory / IR


CACHE = ".plans"  # under the back end's state root: plans by IR, for the next swap-ins
CACHED = 16  # plans kept there, the least recently used removed first


def cached_plan(root: Path, ir_json: str, exp: Experiment) -> Plan:
    """The plan of ``exp`` (stored as ``ir_json``): computed at its first swap-in, then read
    back at the next ones (a 1000-node chain's static routes take seconds). Keyed by the IR
    and the planning code itself, so a changed experiment or a new nestbed plans anew."""
    folder = root / CACHE
    path = folder / f"{_key(ir_json + _planning_code())}.pickle"
    with contextlib.suppress(OSError, pickle.UnpicklingError, ValueError, EOFError,
                             AttributeError, ImportError):  # fmt: skip
        with path.open("rb") as source:
            found = pickle.load(source)
        if isinstance(found, Plan):
            os.utime(path)  # recently used
            return found
    p = plan(exp)
    with contextlib.suppress(OSError):
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        with tmp.open("wb") as out:
            pickle.dump(p, out, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
        kept = sorted(folder.glob("*.pickle"), key=lambda f: f.stat().st_mtime, reverse=True)
        for old in kept[CACHED:]:
            old.unlink(missing_ok=True)
    return p


@functools.cache
def _planning_code() -> str:
    """A hash of the modules that compute plans."""
    from nestbed.backend import plan as planning
    from nestbed.backend import simplan

    return _key("".join(Path(m.__file__ or "").read_text() for m in (planning, simplan)))


def kept_plan(directory: Path, ir_json: str) -> Plan | None:
    """The plan kept in ``directory`` for exactly this IR, or None."""
    with contextlib.suppress(OSError, pickle.UnpicklingError, ValueError, EOFError,
                             AttributeError, ImportError):  # fmt: skip
        with (directory / PLAN).open("rb") as source:
            key, found = pickle.load(source)
        if key == _key(ir_json) and isinstance(found, Plan):
            return found
    return None


def plan_of(directory: Path) -> Plan | None:
    """The plan kept in ``directory`` for the IR kept there, or None: read without the IR's
    models (what swap-out, exec and status need is the plan alone)."""
    try:
        ir_json = (directory / IR).read_text()
    except FileNotFoundError:
        return None
    return kept_plan(directory, ir_json)


def load(directory: Path, ir_json: str | None = None) -> tuple[Experiment, Plan] | None:
    """The experiment kept in ``directory`` (or given as ``ir_json``) and its plan, kept or
    computed now; None when nothing is kept there."""
    from nestbed.model import Experiment

    if ir_json is None:
        try:
            ir_json = (directory / IR).read_text()
        except FileNotFoundError:
            return None
    exp = Experiment.from_json(ir_json)
    return exp, kept_plan(directory, ir_json) or plan(exp)
