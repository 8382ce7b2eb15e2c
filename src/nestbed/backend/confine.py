"""Confinement of an experiment's own processes on this machine: a command run as an
unprivileged identity (``RunAs``), files handed over to it, and nestbed's private state kept
root's alone.

A confined command is ``setpriv`` (util-linux) in front of the experiment's argv, inside the
node: the node's namespace and cgroup are entered as root first (``ip netns exec`` needs
CAP_SYS_ADMIN to join the namespace and mount the node's /etc/hosts), and only then does
``setpriv`` drop to the identity and exec the program. ``subprocess.Popen(user=...)`` would drop
privileges before ``ip netns exec`` runs, and a ``preexec_fn`` that joins the namespace itself
would run Python between fork and exec in the controller, which is threaded. ``setpriv`` does
it all in one small C program: real and effective ids, no supplementary groups, inheritable,
ambient and bounding capability sets emptied, ``PR_SET_NO_NEW_PRIVS`` set, so a setuid binary
(``su``, ``passwd``, a copy of anything with the setuid bit) cannot give root back.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nestbed.model.options import RunAs

SETPRIV = "setpriv"


def confined_argv(run_as: RunAs, argv: list[str]) -> list[str]:
    """argv run as ``run_as``: no groups, no capabilities, no new privileges."""
    return [
        SETPRIV, f"--reuid={run_as.uid}", f"--regid={run_as.gid}", "--clear-groups",
        "--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all", "--no-new-privs",
        "--", *argv,
    ]  # fmt: skip


def hand_over(path: Path, run_as: RunAs) -> None:
    """Makes ``path`` (made already, by root) the identity's own: a folder its programs work
    in, or a file a tool of the experiment writes by name. Its parent stays root's, so the
    identity can change what is in it but not put a link in its place."""
    os.chown(path, run_as.uid, run_as.gid, follow_symlinks=False)


def private_folder(path: Path) -> None:
    """``path`` as a folder only root may enter (made if missing; its mode set if not)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = path.lstat()
    if info.st_uid != 0 or info.st_mode & 0o077:
        os.chown(path, 0, 0, follow_symlinks=False)
        os.chmod(path, 0o700)
