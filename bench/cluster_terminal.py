"""Benchmark (issue 21): a keystroke's echo through `nestbed shell` on a node on another host.

The command a user types, `nestbed --cluster ADDR shell EXP b`, in a terminal made here
(tests/cluster/typed.py), on a node of a two-node line on hosts simulated on this machine
(tests/cluster/simulated.py): how long from launch to the shell's prompt, and how long each of
KEYS keystrokes takes to come back echoed. With this tree's code (rounds ``TERMINAL_POLL_S``
apart while a terminal is attached, an agent's poll waiting ``ECHO_WAIT_S`` for the echo of
what it typed) and with that code's terminal at the plain rounds (``POLL_S`` apart, no wait
for the echo: a copy of ``src`` with the two constants changed), alternately: each round
starts a simulated cluster for one code (a child process of its own), opens the shell once
untimed, then once timed, and stops it; the timed one then sits idle IDLE_S, and the CPU
time the CLI, the scheduler and the agents (with their children) took meanwhile is what an
idle terminal costs. Medians of ROUNDS rounds; the load average at the end. As root.

    sudo PYTHONPATH=src python bench/cluster_terminal.py
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parents[1]
ROUNDS = 3
KEYS = 20
IDLE_S = 10.0
LINE = """\
nodes: [{name: a}, {name: b}]
links:
  - {name: link0, members: [a, b], delay: 10ms}
"""


def one_round(src: Path) -> dict[str, list[float]]:
    """In a child: a simulated cluster running ``src``'s agents; the shell's start and each
    keystroke's echo."""
    sys.path[:0] = [str(HERE / "tests" / "cluster"), str(HERE / "tests")]
    import simulated
    from typed import Typed

    simulated.SRC = src  # its agents run that code
    found: dict[str, list[float]] = {}
    with simulated.started(3, slots=2) as (machines, agents), tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "PYTHONPATH": str(src), "SHELL": "/bin/sh", "TERM": "xterm",
               "NESTBED_RUN_DIR": str(machines.run_dir("controller"))}  # fmt: skip
        env.pop("NESTBED_BACKEND", None)
        name = f"i21mbench{os.getpid()}"
        (Path(tmp) / f"{name}.yaml").write_text(LINE)
        nestbed = [sys.executable, "-m", "nestbed", "--db", str(Path(tmp) / "store.db"),
                   "--cluster", agents.address]  # fmt: skip
        subprocess.run([*nestbed, "swapin", str(Path(tmp) / f"{name}.yaml"), "--results",
                        str(Path(tmp) / "run")], env=env, check=True, capture_output=True,
                       timeout=600)  # fmt: skip
        try:
            for timed in (False, True):  # the first, untimed: a new cluster's first is slow
                began = time.perf_counter()
                typed = Typed([*nestbed, "shell", name, "b"], env)
                try:
                    typed.expect(b"# ")
                    prompt_s = time.perf_counter() - began
                    echoes = [typed.echo_s() for _ in range(KEYS)]
                    watched = [typed.process.pid, agents.scheduler.pid,
                               *(a.pid for a in agents.agents.values())]  # fmt: skip
                    before = cpu_s(watched)
                    time.sleep(IDLE_S)
                    idle_cpu = (cpu_s(watched) - before) / IDLE_S
                    typed.type("\x15exit\r")
                    if typed.wait() != 0:
                        raise SystemExit(f"the shell failed: {typed.seen!r}")
                finally:
                    typed.close()
                if timed:
                    found = {"prompt_s": [prompt_s], "echo_s": echoes, "idle_cpu": [idle_cpu]}
        finally:
            subprocess.run([*nestbed, "swapout", name], env=env, capture_output=True,
                           timeout=600)  # fmt: skip
    return found


def cpu_s(pids: list[int]) -> float:
    """CPU seconds the processes and their children have taken."""
    total = 0.0
    for pid in pids:
        top = psutil.Process(pid)
        for process in (top, *top.children(recursive=True)):
            try:
                times = process.cpu_times()
            except psutil.NoSuchProcess:
                continue
            total += times.user + times.system
    return total


def plain_rounds(tmp: Path) -> Path:
    """A copy of this tree's ``src`` whose terminals are asked about at the plain rounds."""
    copy = tmp / "src"
    shutil.copytree(HERE / "src", copy, ignore=shutil.ignore_patterns("__pycache__"))
    (tmp / "target").symlink_to(HERE / "target")  # where it finds the built binaries
    for module, constant, value in (("proxy", "TERMINAL_POLL_S", "0.1"),
                                    ("remote", "ECHO_WAIT_S", "0.0")):  # fmt: skip
        path = copy / "nestbed" / "backend" / "cluster" / f"{module}.py"
        text, changed = re.subn(rf"^{constant} = [0-9.]+", f"{constant} = {value}",
                                path.read_text(), flags=re.M)  # fmt: skip
        if changed != 1:
            raise SystemExit(f"{path} has no {constant}")
        path.write_text(text)
    return copy


def main() -> None:
    if "--round" in sys.argv:  # the child
        print(json.dumps(one_round(Path(sys.argv[2]))))
        return
    with tempfile.TemporaryDirectory(prefix="i21m-bench-") as tmp:
        codes = {"plain rounds": plain_rounds(Path(tmp)), "terminal rounds": HERE / "src"}
        found: dict[str, dict[str, list[float]]] = {
            c: {"prompt_s": [], "echo_s": [], "idle_cpu": []} for c in codes
        }
        for _ in range(ROUNDS):
            for code, src in codes.items():
                child = subprocess.run([sys.executable, __file__, "--round", str(src)],
                                       env={**os.environ, "PYTHONPATH": str(src)},
                                       capture_output=True, text=True, check=True,
                                       timeout=1200)  # fmt: skip
                for what, values in json.loads(child.stdout.splitlines()[-1]).items():
                    found[code][what] += values
    print("| code | shell's prompt (s) | keystroke echo median (ms) | p90 (ms) | max (ms) "
          "| idle shell's CPU (cores) |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for code, got in found.items():
        echo = sorted(got["echo_s"])
        p90 = echo[int(0.9 * (len(echo) - 1))]
        print(
            f"| {code} | {statistics.median(got['prompt_s']):.2f} | "
            f"{statistics.median(echo) * 1e3:.0f} | {p90 * 1e3:.0f} | {echo[-1] * 1e3:.0f} | "
            f"{statistics.median(got['idle_cpu']):.3f} |"
        )
    print(f"(medians of {ROUNDS} shells, {KEYS} keystrokes each; idle CPU per round "
          f"{ {c: [round(x, 3) for x in g['idle_cpu']] for c, g in found.items()} }; load "
          f"average {os.getloadavg()})")  # fmt: skip


if __name__ == "__main__":
    main()
