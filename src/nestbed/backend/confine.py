"""Confinement of an experiment's own processes on this machine: a command run as an
unprivileged identity (``RunAs``), files handed over to it, and nestbed's private state kept
root's alone.

A confined command is ``setpriv`` (util-linux) in front of the experiment's argv, inside the
node: the node's namespace and cgroup are entered as root first (``ip netns exec`` needs
CAP_SYS_ADMIN to join the namespace and mount the node's /etc/hosts), and only then does
``setpriv`` drop to the identity and exec the program. ``subprocess.Popen(user=...)`` would drop
privileges before ``ip netns exec`` runs, and a ``preexec_fn`` that joins the namespace itself
would run Python between fork and exec in the controller, which is threaded. ``setpriv`` does
it all in one small C program: real and effective ids, no supplementary groups, no permitted,
effective, inheritable or ambient capability, ``PR_SET_NO_NEW_PRIVS`` set, so a setuid
binary (``su``, ``passwd``, a copy of anything with the setuid bit) or one with file
capabilities cannot give anything back: under no-new-privs the kernel ignores both.

The bounding set is emptied but for CAP_NET_RAW. The kernel refuses to exec at all a file
whose capabilities the bounding set cannot give (iputils' ``ping`` is ``cap_net_raw=ep``),
while under no-new-privs it gives a file's capabilities to nobody: kept in the bounding set,
CAP_NET_RAW lets ``ping`` start, and ``ping`` then uses an ICMP datagram socket, which the
node's ``net.ipv4.ping_group_range`` allows (a raw socket stays refused).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nestbed.backend.base import Backend
    from nestbed.model.options import RunAs

SETPRIV = "setpriv"
# What of the starter's environment an experiment's process on a server keeps: the server's
# own (its store's URL, its settings) is none of a program's business.
USER_ENV = {"PATH", "LANG", "TZ", "TERM", "PYTHONPATH", "NESTBED_PROGRAM_DIR", "NESTBED_NODE",
            "NESTBED_PYTHON"}  # fmt: skip


def confined_argv(run_as: RunAs, argv: list[str]) -> list[str]:
    """argv run as ``run_as``: no groups, no capabilities, no new privileges."""
    return [
        SETPRIV, f"--reuid={run_as.uid}", f"--regid={run_as.gid}", "--clear-groups",
        "--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all,+net_raw", "--no-new-privs",
        "--", *argv,
    ]  # fmt: skip


def user_command(
    backend: Backend, run_as: RunAs, argv: list[str], env: Mapping[str, str], home: Path
) -> tuple[list[str], dict[str, str]]:
    """The command and environment of one of the experiment's own processes on a server, for
    the back end's ``start_in``: its programs (the controller's ``spawn_user``) and the
    server's exec and shell sessions alike. ``env`` is cut to ``USER_ENV`` (and ``LC_*``),
    with ``HOME`` the node's working folder."""
    kept = {k: v for k, v in env.items() if k in USER_ENV or k.startswith("LC_")}
    return backend.confine(run_as, argv), kept | {"HOME": str(home)}


def hand_over(path: Path, run_as: RunAs) -> None:
    """Makes ``path`` (made already, by root) the identity's own: a folder its programs work
    in, or a file a tool of the experiment writes by name. Its parent stays root's, so the
    identity can change what is in it but not put a link in its place."""
    os.chown(path, run_as.uid, run_as.gid, follow_symlinks=False)


def work_folder(path: Path, run_as: RunAs | None) -> None:
    """A node's working folder on this machine: handed over if the run is confined."""
    if run_as is not None:
        hand_over(path, run_as)


def private_folder(path: Path) -> None:
    """``path`` as a folder only root may enter (made if missing; its mode set if not)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = path.lstat()
    if info.st_uid != 0 or info.st_mode & 0o077:
        os.chown(path, 0, 0, follow_symlinks=False)
        os.chmod(path, 0o700)
