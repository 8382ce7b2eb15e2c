"""`nestbed shell` on a cluster, as a user types it in a terminal (``typed``): the shell in a
node on another host has a terminal there (``tty`` names one), sees this terminal's size
change (``stty size``), echoes keystrokes through the host's agent, and its exit status is
the command's; this terminal is as it was afterwards, and nothing is left on any host, even
when `nestbed shell` is hung up. Without a terminal, the shell reads its standard input."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from simulated import SRC, namespaces, processes
from typed import Typed, shell_session

from nestbed.backend.plan import experiment_tag

pytestmark = pytest.mark.root

LINE = """\
nodes: [{name: a}, {name: b}]
links:
  - {name: link0, members: [a, b], delay: 10ms}
"""


def test_nestbed_shell_reaches_a_node_on_another_host_with_a_terminal(simulated_cluster, tmp_path):
    machines, agents = simulated_cluster
    name = f"i21mtty{os.getpid()}"
    (tmp_path / f"{name}.yaml").write_text(LINE)
    env = {**os.environ, "PYTHONPATH": str(SRC), "SHELL": "/bin/sh", "TERM": "xterm",
           "NESTBED_RUN_DIR": str(machines.run_dir("controller"))}  # fmt: skip
    env.pop("NESTBED_BACKEND", None)
    nestbed = [sys.executable, "-m", "nestbed", "--db", str(tmp_path / "store.db"),
               "--cluster", agents.address]  # fmt: skip

    def cli(*argv: str) -> None:
        done = subprocess.run([*nestbed, *argv], env=env, capture_output=True, text=True,
                              timeout=600)  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr

    typed = None
    try:
        cli("swapin", str(tmp_path / f"{name}.yaml"), "--results", str(tmp_path / "run"))
        typed = Typed([*nestbed, "shell", name, "b"], env)
        shell_session(typed)
        typed.close()
        # Its terminal closed (SIGHUP), `nestbed shell` hangs up the shell on its host too.
        typed = Typed([*nestbed, "shell", name, "b"], env)
        typed.expect(b"# ")
        typed.type("exec sleep 614\r")
        deadline = time.monotonic() + 60
        while not processes("sleep 614") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert processes("sleep 614")
        typed.process.send_signal(signal.SIGHUP)
        assert typed.wait() == 128 + signal.SIGHUP, typed.seen
        assert not processes("sleep 614")
        # Without a terminal the shell there reads its commands from the standard input.
        piped = subprocess.run([*nestbed, "shell", name, "b"], input="echo PIPED=$((2+3)); exit 3\n",
                               env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
        assert piped.returncode == 3 and "PIPED=5" in piped.stdout, piped.stdout + piped.stderr
    finally:
        if typed is not None:
            typed.close()
        cli("swapout", name)
    tag = experiment_tag(name)
    assert not [n for n in namespaces() if n.startswith(f"nb-{tag}")]
    for host in [*machines.hosts, "controller"]:
        assert not (machines.run_dir(host) / name).exists()
        assert not processes(str(machines.run_dir(host) / name))
    assert not processes(f"shell {name} b")
