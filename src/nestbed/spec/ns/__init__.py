"""The ns-2 / Emulab front end: runs an experiment script in tclsh and reads back a document.

The script runs in a real Tcl interpreter with nestbed's own definitions of the ns-2 and Emulab
commands (``nestbed.tcl`` beside this module), so loops, procs and arrays work as in Emulab.
Parsing runs nothing: the script is evaluated in a Tcl safe interpreter (``sandbox.tcl``) that can
read only files in the experiment file's folder, and the tclsh process is bounded in time
(``TIMEOUT_S``) and address space (``MEMORY_LIMIT_BYTES``).
The Tcl side prints one JSON object: the document (``nestbed.spec.document.ExperimentDoc``) with
the user's raw values, the file:line of every object and field, and the warnings and errors it
found. Resolving the document into the IR (units, addresses, event verbs) is
``nestbed.spec.resolve``'s job.

``tb_compat.tcl`` beside this module is the stub that lets the same file run in plain ns-2.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from nestbed.errors import EnvironmentProblem, InternalError, Problem, UserError
from nestbed.spec.document import ExperimentDoc
from nestbed.spec.problems import Problems, describe_validation_error

HERE = Path(__file__).resolve().parent
LIBRARY = HERE / "nestbed.tcl"
STUB = HERE / "tb_compat.tcl"
SANDBOX = HERE / "sandbox.tcl"  # tclsh's entry point: it loads LIBRARY into a safe interpreter
TIMEOUT_S = 30.0
MEMORY_LIMIT_BYTES = 1 << 30  # address space of the tclsh child; a parse needs a few tens of MB


def _limit(pid: int) -> None:
    """Bounds the address space of process PID and forbids its core files."""
    try:
        resource.prlimit(pid, resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))
        resource.prlimit(pid, resource.RLIMIT_CORE, (0, 0))
    except ProcessLookupError:  # it already ended (tclsh failed to start); its output says why
        pass


@dataclass(frozen=True)
class Translation:
    """What the Tcl side said about one file."""

    document: ExperimentDoc
    locations: dict[str, tuple[str, int]] = field(default_factory=dict)
    warnings: list[Problem] = field(default_factory=list)
    errors: list[Problem] = field(default_factory=list)
    link_order: list[str] = field(default_factory=list)  # "links.0", "lans.0", ... as created


def translate(
    path: Path,
    *,
    parameters: dict[str, str] | None = None,
    tclsh: str = "tclsh",
    timeout_s: float = TIMEOUT_S,
) -> Translation:
    """Runs the ns file PATH in tclsh and returns its document, locations and problems.

    ``parameters`` override ``set opt(NAME) V`` and ``$ns define-template-parameter NAME V``.
    Raises ``UserError`` when the file does not exist, ``EnvironmentProblem`` when tclsh is
    missing and ``InternalError`` when the Tcl side breaks; problems in the script itself are
    returned in ``errors``.
    """
    path = Path(path)
    if not path.is_file():
        raise UserError(f"experiment file {path} does not exist; check the path")
    executable = shutil.which(tclsh)
    if executable is None:
        raise EnvironmentProblem(
            "tclsh is not installed; run `make setup` or `apt-get install tcl`"
        )
    argv = [executable, str(SANDBOX), str(path.resolve())]
    for name, value in (parameters or {}).items():
        argv += ["-p", str(name), str(value)]
    env = {
        **os.environ,
        "NESTBED_PARSE_MEMORY_MB": str(MEMORY_LIMIT_BYTES >> 20),
        "NESTBED_PARSE_WAIT": "1",
    }
    with tempfile.TemporaryDirectory(prefix="nestbed-ns-") as scratch:
        child = subprocess.Popen(
            argv,
            env=env,
            cwd=scratch,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            # tclsh waits for a line on stdin before it reads the file, so the limits hold
            # from the first line of the script. (A preexec_fn would make Python fork itself
            # in full for every parse, some milliseconds of CPU time, instead of spawning.)
            _limit(child.pid)
            stdout, stderr_bytes = child.communicate(b"go\n", timeout=timeout_s)
        except subprocess.TimeoutExpired:
            child.kill()
            child.communicate()
            message = (
                f"the script did not finish within {timeout_s:g} s (an endless loop?); "
                "fix the loop or make the experiment smaller"
            )
            return Translation(ExperimentDoc(), errors=[Problem(message, path.name)])
        except BaseException:
            child.kill()
            child.communicate()
            raise
    done = subprocess.CompletedProcess(argv, child.returncode, stdout, stderr_bytes)
    stderr = done.stderr.decode(errors="replace")
    if done.returncode != 0 and ("alloc" in stderr or "max size for a Tcl value" in stderr):
        message = (
            f"the script needs more than {MEMORY_LIMIT_BYTES >> 20} MB of memory (a huge list or "
            "string?); make the experiment's lists and strings smaller"
        )
        return Translation(ExperimentDoc(), errors=[Problem(message, path.name)])
    if done.returncode != 0:
        raise InternalError(
            f"the ns front end (tclsh nestbed.tcl) failed with exit code {done.returncode}: "
            f"{stderr.strip()}"
        )
    return _read_output(done.stdout, path.name)


def _read_output(stdout: bytes, file: str) -> Translation:
    try:
        raw = json.loads(stdout.decode("ascii"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InternalError(f"the ns front end printed something that is not JSON: {exc}") from exc
    locations = {path: (loc[0], int(loc[1])) for path, loc in raw["locations"].items()}
    warnings = [_problem(p) for p in raw["warnings"]]
    errors = [_problem(p) for p in raw["errors"]]
    try:
        document = ExperimentDoc.model_validate(raw["document"])
    except ValidationError as exc:
        problems = Problems(file, locations)
        describe_validation_error(exc, problems)
        return Translation(ExperimentDoc(), locations, warnings, errors + problems.errors)
    return Translation(document, locations, warnings, errors, list(raw.get("link_order", [])))


def _problem(raw: dict[str, object]) -> Problem:
    line = raw.get("line")
    return Problem(str(raw["message"]), str(raw.get("file") or ""), int(line) if line else None)  # type: ignore[call-overload]


__all__ = ["LIBRARY", "STUB", "Translation", "translate"]
