"""Projects kept apart on the machine: the Unix identity each project's programs run as, the
results folders they may and may not enter, and the server's own files they must not read.

Every project has its own identity, uid = gid = ``PROJECT_ID_BASE`` + the project's id in the
store. The range is nestbed's: 1 900 000 000 and up lies in the span systemd leaves unused
(1879048192–2147352575, between container ranges and its own special ids), so no user of
the machine, no DynamicUser service and no container's mapped ids meet it. The identity has
no name in /etc/passwd and needs none.

The results are laid out so that each project reaches only its own::

    RESULTS_ROOT/            root:root 0711  (entered by anyone, listed by nobody but root)
      .portal/               root:root 0700  (the portal's node positions)
      PROJECT/               root:PROJECT-GID 0750  (the project's programs enter and read it)
        NAME-TIME/           a run, made by its controller (root), readable in the project
          work/NODE/         PROJECT-UID's own: where the node's programs start and write

The project's folder is root's, not the project's: its programs can read their project's
results but cannot open them to anyone else with ``chmod``, nor put files beside the runs.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import sys
import time
from pathlib import Path

import nestbed
from nestbed.errors import InternalError
from nestbed.model.options import RunAs, RunOptions
from nestbed.server.config import ServerConfig
from nestbed.store import Store
from nestbed.store.accounts import Accounts

log = logging.getLogger("nestbed.server")

PROJECT_ID_BASE = 1_900_000_000
PORTAL = ".portal"  # the portal's folder in the results root (``portal.pages``)


def project_identity(project_id: int) -> RunAs:
    """The identity a project's programs run as."""
    return RunAs(uid=PROJECT_ID_BASE + project_id, gid=PROJECT_ID_BASE + project_id)


def run_options(accounts: Accounts, config: ServerConfig, project: str, experiment: str,
                **options: object) -> RunOptions:  # fmt: skip
    """A run of ``experiment`` of ``project``: its folder under the project's (made with its
    modes, see the module), as the project's identity (as root if the admin said the project
    is trusted), with the caller's other ``options``."""
    run_as = identity_of(accounts, project)
    folder = project_folder(config.results_root, project, run_as)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    results = folder / f"{experiment}-{stamp}"
    return RunOptions.model_validate(
        {"results": results, "run_as": runs_as(accounts, config, project), **options}
    )


def identity_of(accounts: Accounts, project: str) -> RunAs:
    """The identity of ``project`` (``project_identity``)."""
    found = accounts.project(project)
    if found is None:
        raise InternalError(f"no project {project!r}")  # the caller checked membership
    return project_identity(found.id)


def runs_as(accounts: Accounts, config: ServerConfig, project: str) -> RunAs | None:
    """Who the project's programs, exec and shell sessions run as: its identity, or root
    (None) if the admin said the project is trusted."""
    if project in config.trusted_projects:
        return None
    return identity_of(accounts, project)


def project_folder(results_root: Path, project: str, run_as: RunAs) -> Path:
    """The project's folder of results, made (or corrected) root's with the project's group,
    mode 0750; the results root above it 0711."""
    _owned(results_root, 0, 0o711)
    folder = results_root / project
    _owned(folder, run_as.gid, 0o750)
    return folder


def protect(store: Store, results_root: Path) -> None:
    """At the server's start: the store's file (SQLite) root's alone, the results root 0711;
    a warning if the projects' programs cannot reach the results root at all (a folder above
    it is closed to others), where their working folders are, and one if the kernel lets
    anyone hard-link a file they cannot read."""
    url = store.engine.url
    if url.get_backend_name() == "sqlite" and url.database:
        for suffix in ("", "-wal", "-shm", "-journal"):
            path = Path(url.database + suffix)
            if path.exists():
                os.chmod(path, 0o600)
    _owned(results_root, 0, 0o711)
    _owned(results_root / PORTAL, 0, 0o700)  # the portal's own files name every experiment
    hardlinks = Path("/proc/sys/fs/protected_hardlinks")
    if hardlinks.exists() and hardlinks.read_text().strip() != "1":
        log.warning(
            "fs.protected_hardlinks is off: a program may link a file it cannot read (the "
            "store) into its results, which the server then serves; set it to 1"
        )  # fmt: skip
    if (closed := closed_to_others(results_root)) is not None:
        log.warning(
            "the results root %s is inside %s, which other users may not enter: the "
            "projects' programs cannot reach their working folders there; give "
            "--results-root a folder such as /srv/nestbed/results", results_root, closed,
        )  # fmt: skip
    for what, path in (("Python", Path(sys.executable)), ("package", Path(nestbed.__file__))):
        if (closed := closed_to_others(path)) is not None:
            log.warning(
                "nestbed's %s %s is inside %s, which other users may not enter: the "
                "projects' FTP agents and programs that run $NESTBED_PYTHON cannot start; "
                "install nestbed where others may read it (not under /root)", what, path,
                closed,
            )  # fmt: skip
            break


def closed_to_others(path: Path | str) -> Path | None:
    """The nearest folder above ``path`` that users other than its owner may not enter,
    if any."""
    for above in Path(path).parents:
        with contextlib.suppress(OSError):
            if not above.stat().st_mode & stat.S_IXOTH:
                return above
    return None


def _owned(path: Path, gid: int, mode: int) -> None:
    """``path`` a folder of root's with group ``gid`` and exactly ``mode`` (made if missing;
    a symbolic link in its place is refused, never followed)."""
    path.mkdir(mode=mode, parents=True, exist_ok=True)
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode):
        raise NotADirectoryError(f"{path} is not a folder; results go in folders")
    if (info.st_uid, info.st_gid) != (0, gid) and os.geteuid() == 0:
        os.chown(path, 0, gid, follow_symlinks=False)
    if stat.S_IMODE(info.st_mode) != mode:
        os.chmod(path, mode)
