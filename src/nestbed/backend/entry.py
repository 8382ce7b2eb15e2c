"""How a command enters a node on this machine: the node's network namespace and cgroup, from
the command's first instruction on. One piece of logic for every way in: the back end's
``exec_in``/``start_in`` and ``nestbed exec``'s fast path, which reads what it needs from a
small file swap-in writes beside the kept plan instead of loading the plan, the store's
records and the command line's libraries. Python's own modules only, and few of them: each
import is milliseconds `nestbed exec` adds to its command.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

# In the experiment's run folder, one line a node: its name, namespace and cgroup directories,
# separated by tabs (names and namespaces have none; cgroup mounts neither).
FILE = "enter.tsv"


def argv(netns: str, cgroups: Sequence[str], command: Sequence[str]) -> list[str]:
    """``command`` in namespace ``netns`` and in the cgroup directories ``cgroups``.

    `ip netns exec` also bind-mounts the node's /etc/hosts, then execs the command in place.
    The cgroup is joined before it, since the fresh /sys it mounts has no cgroup file system.
    """
    inside = ["ip", "netns", "exec", netns, *command]
    return joined(cgroups, inside) if cgroups else inside


def joined(cgroups: Sequence[str | Path], command: Sequence[str]) -> list[str]:
    """``command`` as one that first joins the cgroup directories, then execs it in place.

    So not even its first instruction runs outside the node's limits, which moving the pid
    in after the start cannot promise, with no fork of a threaded Python process (as a
    preexec_fn would be). If a cgroup refuses it, the command does not run.
    """
    # pid 0 is the writer itself, on v1 and v2 alike
    joins = " && ".join(f"echo 0 > {_quoted(os.path.join(d, 'cgroup.procs'))}" for d in cgroups)
    return ["sh", "-c", f'{joins} && exec "$0" "$@"', *command]


def _quoted(word: str) -> str:
    """``word`` for sh, in single quotes (shlex.quote's way, without importing re)."""
    return "'" + word.replace("'", "'\"'\"'") + "'"


def write(directory: Path, nodes: Mapping[str, tuple[str, Sequence[str]]]) -> None:
    """Writes each node's namespace and cgroup directories into ``directory`` (root's own)."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = directory / f"{FILE}.tmp"
    lines = ("\t".join([node, ns, *dirs]) + "\n" for node, (ns, dirs) in nodes.items())
    tmp.write_text("".join(lines))
    os.replace(tmp, directory / FILE)


def command(directory: str | Path, node: str, argv_: Sequence[str]) -> list[str] | None:
    """``argv_`` entering ``node`` as swap-in wrote it in ``directory``; None when nothing
    was written there for that node (an older swap-in, another back end)."""
    try:
        with open(os.path.join(directory, FILE)) as source:
            for line in source:
                name, netns, *cgroups = line.rstrip("\n").split("\t")
                if name == node:
                    return argv(netns, cgroups, argv_)
    except (OSError, ValueError):
        pass
    return None
