"""Confined programs' working folders on a cluster's hosts (run on the agent).

On a server, an experiment's own processes run as its project's identity (``RunAs``) and start
in their node's working folder, the one folder they may write in: the controller makes it in
the run's results and hands it over (``Run._workdirs``, ``confine.hand_over``). A node on a
host other than the controlling machine has no such folder, so the cluster back end names the
handed-over folder (the command's ``HOME``) when it starts a confined command, and the node's
host makes its own and hands it over the same way (``prepare``), then starts the command
there: the folder's path in its argv and environment becomes the host's (``confined``).

    ROOT/                 root's, 0711 ($NESTBED_WORK_DIR, default /var/lib/nestbed/work)
      EXPERIMENT/         root's with the identity's group, 0750: no other project enters
        RUN/              the same, one per run (as the results' ``work/``), named by the
                          controller's folder
          NODE/           the identity's own
          .commands/KEY/  root's with the group: the files a command writes by name, each
                          the identity's (``command_folder``)

Everything above the node's folder is root's, so the identity can change what is in its folder
but not put a link in its place; a link or file found there is refused, never followed. The
experiment's folder goes with its share at swap-out (``remove``, after its processes were
ended), and cleanup finds and removes what a dead agent left (``leftovers``). The environment
of a confined command is cut on the host as on the controlling machine (``confine.USER_ENV``):
the agent's own stays the agent's.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import re
import shutil
import stat
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from nestbed.backend.confine import USER_ENV, hand_over
from nestbed.backend.nofollow import Tree, read_tree
from nestbed.backend.plan import experiment_tag
from nestbed.errors import EnvironmentProblem

if TYPE_CHECKING:
    from nestbed.model.options import RunAs

WORK_ENV = "NESTBED_WORK_DIR"  # where a host keeps confined programs' working folders
DEFAULT_ROOT = "/var/lib/nestbed/work"  # on disk: /run is memory, and programs write files
COMMANDS = ".commands"  # in a run's folder, beside its nodes' (a node's name has no dot first)


def root() -> Path:
    return Path(os.environ.get(WORK_ENV, DEFAULT_ROOT))


def _run(experiment: str, home: str) -> Path:
    """The host's folder of the run whose controller handed ``home`` over (the node's
    working folder in that run's results)."""
    digest = hashlib.sha256(os.fsencode(str(Path(home).parent))).hexdigest()
    return root() / experiment / digest[:16]


def _made_run(experiment: str, home: str, run_as: RunAs | None) -> Path:
    """``_run``, made if missing, with everything above it root's (with the identity's
    group if confined)."""
    run = _run(experiment, home)
    gid = 0 if run_as is None else run_as.gid
    root().parent.mkdir(parents=True, exist_ok=True)  # /var/lib/nestbed on a fresh host
    _root_folder(root(), 0, 0o711)
    _root_folder(run.parent, gid, 0o750)
    _root_folder(run, gid, 0o750)
    return run


def prepare(experiment: str, node: str, home: str, run_as: RunAs | None) -> Path:
    """The host's working folder of ``node`` in the run, made if missing and ``run_as``'s
    own if confined (root's if not), everything above it root's."""
    found = _made_run(experiment, home, run_as) / node
    with contextlib.suppress(FileExistsError):
        found.mkdir(mode=0o755)  # as the controller's, by mkdir under its umask
    if not stat.S_ISDIR(found.lstat().st_mode):  # only root can have put it there
        raise EnvironmentProblem(f"{found} is not a folder; remove it and start again")
    if run_as is not None:
        hand_over(found, run_as)
    return found


def command_folder(
    experiment: str, home: str, key: str, run_as: RunAs, names: Iterable[str]
) -> Path:
    """The folder of the files a confined command writes by name (``remote``'s own files: a
    probe's log), each made empty and handed over, as the controller hands over its own
    (``Run.writable``). The folder is root's: the command writes in its files but cannot put
    a link in their place, so reading them back as root reads what it wrote."""
    found = _made_run(experiment, home, run_as) / COMMANDS
    _root_folder(found, run_as.gid, 0o750)
    found /= key
    _root_folder(found, run_as.gid, 0o750)
    for name in names:
        (found / name).touch(exist_ok=False)
        hand_over(found / name, run_as)
    return found


def _root_folder(path: Path, gid: int, mode: int) -> None:
    """``path`` as a folder of root's with group ``gid`` and ``mode`` (made if missing,
    corrected if not); a link in its place is refused, not followed."""
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=mode)
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode):
        raise EnvironmentProblem(f"{path} is not a folder; remove it and start again")
    if (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) != (0, gid, mode):
        os.chown(path, 0, gid, follow_symlinks=False)
        os.chmod(path, mode)  # a folder, checked above: nothing to follow


def moved(
    argv: list[str],
    env: Mapping[str, str],
    home: str,
    there: Path,
    cwd: str | None = None,
    *,
    confined: bool,
) -> tuple[list[str], dict[str, str], str | None]:
    """A command's argv, whole environment and folder to start in (``cwd``, None: the
    caller's) on this host, started in a node's working folder: ``home`` (the controller's)
    is ``there`` wherever it is named, under the controller's changes ``env`` is this host's
    environment, of which a ``confined`` command keeps only what a confined process keeps
    (``USER_ENV``, ``LC_*``)."""
    kept = {k: v for k, v in os.environ.items()
            if not confined or k in USER_ENV or k.startswith("LC_")}  # fmt: skip
    changed = {k: _moved(v, home, there) for k, v in env.items()}
    folder = None if cwd is None else _moved(cwd, home, there)
    return [_moved(a, home, there) for a in argv], kept | changed, folder


def _path(home: str) -> re.Pattern[str]:
    """The path ``home``, whole or as a folder above another path."""
    return re.compile(re.escape(home) + r"(?![\w.-])")


def names(text: str, home: str) -> bool:
    """Whether ``text`` (an argument, a folder) names the path ``home`` (``_moved``)."""
    return _path(home).search(text) is not None


def _moved(text: str, home: str, there: Path) -> str:
    """``text`` with the path ``home`` (whole, or a folder above another path) as ``there``:
    a node's working folder in a shell command (``cd HOME && ...``) or in ``HOME``."""
    return _path(home).sub(lambda _: str(there), text)


def bring_back(experiment: str, homes: dict[str, str]) -> dict[str, Tree]:
    """At a run's end, each node's working folder in the run on this host (node -> the
    controller's folder of it, ``home``), read without following anything the experiment's
    processes planted (``nofollow.read_tree``, at most ``nofollow.LIMIT_BYTES`` a node); then
    the run's folders here are removed. A node whose folder was never made has none."""
    found = {}
    for node, home in sorted(homes.items()):
        folder = _run(experiment, home) / node
        with contextlib.suppress(FileNotFoundError):
            found[node] = read_tree(folder)
    for run in {_run(experiment, home) for home in homes.values()}:
        shutil.rmtree(run, ignore_errors=True)  # never follows a link in it
    return found


# What one answer of a host carries of a run's working folders (up to 64 MiB a node,
# ``nofollow.LIMIT_BYTES``): a whole answer of a host with several full folders held a
# message of hundreds of MiB in the agent and here at once, and the agent's connection
# (its heartbeats, every other answer) behind it while it crossed.
CHUNK_BYTES = 16 << 20
_SPOOL = ".back-"  # in the experiment's folder: a run's folders read, until taken


def spool_back(experiment: str, homes: dict[str, str]) -> tuple[bytes, str | None, int]:
    """``bring_back``'s trees, pickled: the first ``CHUNK_BYTES`` of them, and if there is
    more, the name of the file in the experiment's folder (root's alone) that holds it all,
    for ``take``; and their size."""
    data = pickle.dumps(bring_back(experiment, homes))
    if len(data) <= CHUNK_BYTES:
        return data, None, len(data)
    folder = root() / experiment  # exists: it held the folders read
    name = f"{_SPOOL}{uuid.uuid4().hex}"
    fd = os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as spool:
        spool.write(data)
    return data[:CHUNK_BYTES], name, len(data)


def take(experiment: str, name: str, offset: int) -> bytes:
    """The next ``CHUNK_BYTES`` of a spooled bring-back from ``offset`` on; the file goes
    with its last."""
    if not name.startswith(_SPOOL) or "/" in name:
        raise EnvironmentProblem(f"{name!r} is no bring-back of experiment {experiment}")
    path = root() / experiment / name
    with open(path, "rb") as spool:
        spool.seek(offset)
        data = spool.read(CHUNK_BYTES)
        if not spool.read(1):
            path.unlink()
    return data


LEFT_OUT_NAMED = 3  # a run's reason names this many of a folder's left-out entries


def left_out_sentence(where: str, host: str, left: dict[str, str]) -> str:
    """What of a node's working folder did not come back from its host, in one sentence."""
    named = "; ".join(f"{p}: {why}" for p, why in sorted(left.items())[:LEFT_OUT_NAMED])
    more = len(left) - LEFT_OUT_NAMED
    count = f"{len(left)} entries" if len(left) > 1 else "1 entry"
    return (f"{where} on host {host}: {count} did not come back ({named}"
            + (f"; and {more} more" if more > 0 else "") + ")")  # fmt: skip


def remove(experiment: str) -> None:
    """Removes the experiment's working folders on this host (its processes have ended):
    links in them are removed, never followed."""
    shutil.rmtree(root() / experiment, ignore_errors=True)


def _experiments() -> list[Path]:
    """The experiments' folders under this host's root."""
    top = root()
    return sorted(d for d in top.iterdir() if d.is_dir()) if top.is_dir() else []


def leftovers_by_tag() -> dict[str, list[str]]:
    """The experiments' working folders on this host, by tag."""
    found: dict[str, list[str]] = {}
    for directory in _experiments():
        found.setdefault(experiment_tag(directory.name), []).append(f"work folder {directory}")
    return found


def remove_leftovers(tags: set[str]) -> list[str]:
    """Removes the working folders of the experiments with these tags; what it removed."""
    removed = []
    for directory in _experiments():
        if experiment_tag(directory.name) in tags:
            remove(directory.name)
            removed.append(f"work folder {directory}")
    return removed
