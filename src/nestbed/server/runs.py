"""The API of an experiment's results on the server: its runs with their manifests, the files
of a run's folder (one at a time, or all of it or its captures as a tar), its linktest
reports (failures first), and the project's sweeps.

A file is named by its path inside the run's folder; ``inside`` admits only a relative path
of plain parts that stays inside the folder with no symbolic link on the way, and
``open_inside`` opens a file so (component by component, ``O_NOFOLLOW``), so nothing in a
request, nor a link a program swaps in meanwhile, reaches a file outside the run folders the
store records for that experiment.
Runs are found through the store (``Store.runs``) and read with ``RunFolder``.
"""

from __future__ import annotations

import csv
import json
import os
import stat
import tarfile
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter
from fastapi import Path as PathParam
from fastapi.responses import FileResponse, StreamingResponse

from nestbed.backend.nofollow import NotBelow, open_below, plain_parts
from nestbed.results.folder import RunFolder
from nestbed.server.accounts import AccountName
from nestbed.server.auth import Caller, NotFound, Who
from nestbed.server.experiments import ExperimentName, owned_experiment
from nestbed.store.records import RunRecord

router = APIRouter(prefix="/v1/projects/{project}", tags=["results"])

TABLE_ROWS = 2000  # the rows of one table a reply carries (the file has them all)
SWEEP_NAME = r"^[A-Za-z0-9][-A-Za-z0-9_.]{0,199}$"
SweepName = Annotated[str, PathParam(pattern=SWEEP_NAME)]


# -- paths ------------------------------------------------------------------------------------


def inside(root: Path, relative: str) -> Path:
    """``root/relative`` if it is a file or folder inside ``root`` reached through no symbolic
    link; ``NotFound`` for anything else (``..``, an absolute path, a link, nothing there)."""
    parts = plain_parts(relative)
    if parts is None:
        raise NotFound(f"there is no file {relative!r} in this run")
    path = root
    try:
        if stat.S_ISLNK(os.lstat(root).st_mode):
            raise NotFound("this run's folder is a symbolic link; it is not served")
        for part in parts:
            path = path / part
            if stat.S_ISLNK(os.lstat(path).st_mode):
                raise NotFound(f"{relative!r} is a symbolic link; it is not served")
    except OSError:
        raise NotFound(f"there is no file {relative!r} in this run") from None
    return path


def open_inside(root: Path, relative: str) -> int:
    """A file descriptor of the regular file ``root/relative``, opened one component at a
    time with ``O_NOFOLLOW`` from a descriptor of ``root`` (``nofollow.open_below``): a
    symbolic link put in place after ``inside`` looked (an experiment's program racing the
    server) is refused by the kernel, not followed. ``NotFound`` for anything but a regular
    file reached so."""
    try:
        return open_below(root, relative)
    except NotBelow:
        raise NotFound(f"there is no file {relative!r} here") from None


# A run's files are written by the experiment's own programs too: a page among them must not
# run scripts on the portal's origin (where a viewer's session cookie lives), nor may a
# browser guess a type the file does not claim.
_UNTRUSTED = {"Content-Security-Policy": "sandbox", "X-Content-Type-Options": "nosniff"}


def served(root: Path, relative: str) -> FileResponse:
    """A file of a run, shown in the browser but sandboxed: no script of it runs. It is
    served from the descriptor ``open_inside`` opened (its /proc/self/fd name reopens that
    very file), closed once the response ends, however it ends (``FromDescriptor``)."""
    fd = open_inside(root, relative)
    try:
        return FromDescriptor(fd, filename=relative.rsplit("/", 1)[-1],
                              content_disposition_type="inline", headers=_UNTRUSTED)  # fmt: skip
    except BaseException:
        os.close(fd)
        raise


class FromDescriptor(FileResponse):
    """A file response read from an open descriptor, which it closes when it has been sent
    or given up: a client that goes away mid-download ends the sending with an error, and a
    background task would then never run (Starlette runs it only after a whole send), so the
    descriptor is closed in ``finally``; one never sent at all closes when collected."""

    def __init__(self, fd: int, **options: Any) -> None:
        super().__init__(f"/proc/self/fd/{fd}", **options)
        self._close = weakref.finalize(self, os.close, fd)

    def close(self) -> None:
        """Closes the descriptor, once."""
        self._close()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.close()


def files(root: Path) -> Iterator[tuple[str, int]]:
    """Every regular file under ``root`` (links neither listed nor followed): its path
    relative to ``root`` and its size, in name order. A file gone between the listing and
    its stat (a run or its report still writing the folder) is left out."""
    for folder, dirs, names in os.walk(root, followlinks=False):
        dirs.sort()
        base = Path(folder)
        for name in sorted(names):
            try:
                info = os.lstat(base / name)
            except OSError:  # gone, or the folder closed since it was listed
                continue
            if stat.S_ISREG(info.st_mode):
                yield (base / name).relative_to(root).as_posix(), info.st_size


def tar_stream(root: Path, under: str, prefix: str) -> Iterator[bytes]:
    """The regular files of ``root`` (only those under ``under``, when given) as an
    uncompressed tar whose names start with ``prefix/``, produced as it is sent."""
    chunks: list[bytes] = []

    class Sink:
        def write(self, data: bytes) -> int:
            chunks.append(bytes(data))
            return len(data)

    with tarfile.open(fileobj=Sink(), mode="w|", format=tarfile.PAX_FORMAT) as tar:  # type: ignore[call-overload]
        for relative, _size in files(root):
            if under and not relative.startswith(under + "/"):
                continue
            try:
                fd = open_inside(root, relative)
            except NotFound:
                continue  # changed since it was listed: a link now, or gone
            with os.fdopen(fd, "rb") as f:
                info = tar.gettarinfo(arcname=f"{prefix}/{relative}", fileobj=f)
                info.uname = info.gname = ""
                tar.addfile(info, f)
            yield b"".join(chunks)
            chunks.clear()
    yield b"".join(chunks)


# -- what a run holds -------------------------------------------------------------------------


def experiment_runs(who: Caller, project: str, name: str) -> list[RunRecord]:
    """The experiment's runs, newest first (``NotFound`` as for the experiment)."""
    owned = owned_experiment(who, project, name)
    return list(reversed(who.server.store.runs(owned.experiment.name)))


def run_of(who: Caller, project: str, name: str, run_id: int) -> RunRecord:
    for run in experiment_runs(who, project, name):
        if run.id == run_id:
            return run
    raise NotFound(f"experiment {name!r} has no run {run_id}")


def folder_of(run: RunRecord) -> RunFolder:
    return RunFolder(Path(run.results_dir))


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def read_table(path: Path, limit: int = TABLE_ROWS) -> dict[str, Any]:
    """A CSV file as its columns and up to ``limit`` rows (``total`` says how many)."""
    with path.open(newline="") as f:
        reader = csv.reader(f)
        columns = next(reader, [])
        rows, total = [], 0
        for row in reader:
            total += 1
            if len(rows) < limit:
                rows.append(row)
    return {"columns": columns, "rows": rows, "total": total}


_VERDICT_ORDER = {"fail": 0, "skip": 1, "pass": 2}


def _failures_first(check: dict[str, Any]) -> int:
    verdict = check.get("verdict")
    return _VERDICT_ORDER.get(verdict, 3) if isinstance(verdict, str) else 3


def linktest_reports(folder: RunFolder) -> list[dict[str, Any]]:
    """The run's linktest reports (linktest/, linktest-2/ ...), each with its checks
    failures first, then skips, then passes."""
    found = []
    for path in sorted(folder.root.glob("linktest*/linktest.json")):
        if path.parent.is_symlink() or path.is_symlink():
            continue
        report = read_json(path)
        if not isinstance(report, dict):
            continue
        checks = report.get("checks")
        # The folder is the experiment's too: a file made there must not fail the request.
        checks = [c for c in checks if isinstance(c, dict)] if isinstance(checks, list) else []
        report["checks"] = sorted(checks, key=_failures_first)
        report["folder"] = path.parent.name
        found.append(report)
    return found


def summary(run: RunRecord) -> dict[str, Any]:
    """A run as the API lists it, with its manifest and the files its folder holds."""
    folder = folder_of(run)
    listed = list(files(folder.root)) if folder.root.is_dir() else []
    return {
        "id": run.id, "started_at": run.started_at, "ended_at": run.ended_at,
        "outcome": run.outcome, "results_dir": run.results_dir,
        "manifest": read_json(folder.manifest),
        "files": [{"path": p, "bytes": size} for p, size in listed],
        "tables": [p for p, _ in listed if p.endswith(".csv")],
        "plots": [p for p, _ in listed if p.startswith("plots/") and p.endswith(".png")],
        "pcaps": [p for p, _ in listed if p.startswith("pcaps/")],
        "has_report": folder.report.is_file(),
    }  # fmt: skip


# -- sweeps -----------------------------------------------------------------------------------


def sweeps_root(who: Caller, project: str) -> Path:
    who.role(project)
    return who.server.config.results_root / project


def sweeps(who: Caller, project: str) -> list[dict[str, Any]]:
    """The sweeps kept in the project's results folder (a folder with a sweep.json)."""
    root = sweeps_root(who, project)
    found = []
    for path in sorted(root.glob("*/sweep.json")) if root.is_dir() else []:
        if path.parent.name.startswith(".") or path.parent.is_symlink():
            continue
        found.append({"name": path.parent.name, "description": read_json(path)})
    return found


def sweep(who: Caller, project: str, name: str) -> dict[str, Any]:
    """One sweep: its description, its table (table.csv), summary and plots."""
    folder = inside(sweeps_root(who, project), name)
    if not (folder / "sweep.json").is_file():
        raise NotFound(f"project {project!r} has no sweep {name!r}")
    tables = {t: read_table(folder / f"{t}.csv") for t in ("table", "summary")
              if (folder / f"{t}.csv").is_file()}  # fmt: skip
    plots = [p for p, _ in files(folder) if p.endswith(".png")]
    return {"name": name, "description": read_json(folder / "sweep.json"), "tables": tables,
            "plots": plots}  # fmt: skip


# -- routes -----------------------------------------------------------------------------------

Prefix = "/experiments/{name}/runs"


@router.get(Prefix)
def list_runs(project: AccountName, name: ExperimentName, who: Who) -> list[dict[str, Any]]:
    """The experiment's runs, newest first, each with its manifest and files."""
    return [summary(r) for r in experiment_runs(who, project, name)]


@router.get(Prefix + "/{run_id}")
def show_run(project: AccountName, name: ExperimentName, run_id: int, who: Who) -> dict[str, Any]:
    """One run: its manifest, files and linktest reports (failures first)."""
    run = run_of(who, project, name, run_id)
    return {**summary(run), "linktest": linktest_reports(folder_of(run))}


@router.get(Prefix + "/{run_id}/files/{path:path}")
def run_file(
    project: AccountName, name: ExperimentName, run_id: int, path: str, who: Who
) -> FileResponse:
    """One file of the run's folder, by its path in it (``plots/throughput.png``)."""
    return served(folder_of(run_of(who, project, name, run_id)).root, path)


def _tar(who: Caller, project: str, name: str, run_id: int, under: str) -> StreamingResponse:
    root = folder_of(run_of(who, project, name, run_id)).root
    if not root.is_dir() or root.is_symlink():
        raise NotFound(f"run {run_id} of {name!r} has no folder on the server any more")
    stem = f"{name}-run{run_id}" + (f"-{under}" if under else "")
    return StreamingResponse(
        tar_stream(root, under, stem), media_type="application/x-tar",
        headers={"Content-Disposition": f'attachment; filename="{stem}.tar"'},
    )  # fmt: skip


@router.get(Prefix + "/{run_id}/download")
def download(project: AccountName, name: ExperimentName, run_id: int, who: Who) -> Any:
    """The run's whole folder as a tar."""
    return _tar(who, project, name, run_id, "")


@router.get(Prefix + "/{run_id}/pcaps")
def download_pcaps(project: AccountName, name: ExperimentName, run_id: int, who: Who) -> Any:
    """The run's captures (pcaps/) as a tar."""
    return _tar(who, project, name, run_id, "pcaps")


@router.get("/sweeps")
def list_sweeps(project: AccountName, who: Who) -> list[dict[str, Any]]:
    """The sweeps in the project's results folder on the server."""
    return sweeps(who, project)


@router.get("/sweeps/{sweep_name}")
def show_sweep(project: AccountName, sweep_name: SweepName, who: Who) -> dict[str, Any]:
    """One sweep's description, table, summary and plots."""
    return sweep(who, project, sweep_name)


@router.get("/sweeps/{sweep_name}/files/{path:path}")
def sweep_file(project: AccountName, sweep_name: SweepName, path: str, who: Who) -> FileResponse:
    """One file of a sweep's folder (a plot, its table)."""
    return served(inside(sweeps_root(who, project), sweep_name), path)
