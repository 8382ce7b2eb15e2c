"""`nestbed exec` on real namespaces: its fast path and its normal path enter a node the same
way (namespace, cgroup, exit status), and as the back end's own exec_in does."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from nestbed.backend import entry, kept, linux

pytestmark = pytest.mark.root

TOPOLOGY = "routing: static\nnodes: [{name: a}, {name: b}]\nlinks: [{members: [a, b]}]\n"
PROBE = "cat /proc/self/cgroup; readlink /proc/self/ns/net; exit 5"


def test_the_fast_and_the_normal_path_enter_the_node_alike(tmp_path):
    name = f"fastexec-{os.getpid()}"
    source = tmp_path / f"{name}.yaml"
    source.write_text(TOPOLOGY)
    env = dict(os.environ, NESTBED_DB=str(tmp_path / "store.db"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)

    def nestbed(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-X", "importtime", "-m", "nestbed", *args],
                              capture_output=True, text=True, env=env, cwd=tmp_path,
                              timeout=120)  # fmt: skip

    assert nestbed("swapin", str(source), "--results", str(tmp_path / "r")).returncode == 0
    try:
        fast = nestbed("exec", name, "a", "--", "sh", "-c", PROBE)
        normal = nestbed("--debug", "exec", name, "a", "--", "sh", "-c", PROBE)  # typer's way
        assert (fast.returncode, normal.returncode) == (5, 5), (fast.stderr, normal.stderr)
        assert " typer" not in fast.stderr and " typer" in normal.stderr
        assert fast.stdout == normal.stdout
        p = kept.plan_of(linux.RUN_DIR / name)
        assert p is not None
        alone = subprocess.run(["ip", "netns", "exec", p.node("a").netns, "readlink",
                                "/proc/self/ns/net"], capture_output=True, text=True)  # fmt: skip
        assert fast.stdout.splitlines()[-1] == alone.stdout.strip()
        assert f"nb-{p.tag}-a" in fast.stdout  # the node's cgroup
        argv = ["true"]
        assert entry.command(linux.RUN_DIR / name, "a", argv) == linux._in_node(p, "a", argv)
    finally:
        assert nestbed("swapout", name).returncode == 0
