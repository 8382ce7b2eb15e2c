"""Benchmark: swap-in and swap-out as a user waits for them, then as the back end does them.

First the whole process (wall time of the `nestbed` command, median of RUNS, issue 18's
goals): `nestbed swapin` / `nestbed swapout` of a 100-node chain, the 100-node tree and a
1000-node chain, every link shaped by linkd, each run alternating with Mininet (Debian's
package, run with /usr/bin/python3) building the same topology from hosts joined host to host
(plain links, and TCLink with a bandwidth: htb), its start and stop timed from the launch of
its process; the ratio is printed. Then `nestbed run` of a file whose events end at T, and
the short commands (--help, list, show, status, exec). Last, the back end alone in this
process (namespaces, veths, routes, linkd), as before. Needs root.

    .venv/bin/python bench/swap.py [--runs N] [--quick] [--before TREE] [--swaps-only]

With ``--before TREE`` (another checkout, e.g. the main branch) every whole command is also
run from TREE's sources, alternating with this one's, and both medians are printed.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from nestbed.api import Experiment
from nestbed.backend import linux
from nestbed.backend.plan import plan
from nestbed.spec import load

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
MININET_PYTHON = "/usr/bin/python3"  # Debian's mininet package is for the system Python
# The experiments' name prefix (unique on a shared machine; NESTBED_BENCH_NAME sets another).
NAME = os.environ.get("NESTBED_BENCH_NAME", "bench18")

# Builds the topology from hosts only, starts it, prints the monotonic time (shared by every
# process on the host) after start and after stop.
MININET = r"""
import sys, time
from mininet.log import setLogLevel
from mininet.link import Link, TCLink
from mininet.net import Mininet
from mininet.topo import Topo
setLogLevel("error")
n, shaped = int(sys.argv[1]), sys.argv[2] == "htb"
edges = [tuple(map(int, e.split("-"))) for e in sys.argv[3].split(",")]
class Hosts(Topo):
    def build(self):
        hosts = [self.addHost(f"h{i}") for i in range(n)]
        for a, b in edges:
            if shaped:
                self.addLink(hosts[a], hosts[b], bw=100)
            else:
                self.addLink(hosts[a], hosts[b])
net = Mininet(Hosts(), controller=None, link=TCLink if shaped else Link, autoSetMacs=True)
net.start()
print(time.monotonic(), flush=True)
net.stop()
print(time.monotonic(), flush=True)
"""


def chain(n: int) -> str:
    """An ns file: n nodes in a line, every link 100 Mb/s, 1 ms (shaped by linkd)."""
    return (
        "set ns [new Simulator]\nsource tb_compat.tcl\n$ns rtproto Static\n"
        "set n(0) [$ns node]\n"
        f"for {{set i 1}} {{$i < {n}}} {{incr i}} {{\n"
        "    set n($i) [$ns node]\n"
        "    $ns duplex-link $n([expr $i-1]) $n($i) 100Mb 1ms DropTail\n}\n$ns run\n"
    )


def edges(exp) -> str:  # type: ignore[no-untyped-def]
    """The experiment's links as i-j pairs of node indexes, for the Mininet script."""
    index = {node.name: i for i, node in enumerate(exp.nodes)}
    return ",".join(f"{index[a.node]}-{index[b.node]}" for a, b in (lk.ports for lk in exp.links))


def nestbed(*args: str, env: dict[str, str]) -> float:
    """Wall time of one `nestbed` command, as a user runs it."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "nestbed", *args], env=env, capture_output=True, text=True
    )
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"nestbed {' '.join(args)} failed: {done.stderr.strip()}")
    return took


def mininet(n: int, links: str, kind: str) -> tuple[float, float]:
    """Mininet's start and stop of the same topology, from its process's launch."""
    launched = time.monotonic()
    done = subprocess.run(
        [MININET_PYTHON, "-c", MININET, str(n), kind, links], capture_output=True, text=True
    )
    ended = time.monotonic()
    lines = done.stdout.split()
    if done.returncode != 0 or len(lines) != 2:
        subprocess.run(["mn", "-c"], capture_output=True)
        raise SystemExit(f"Mininet failed: {done.stderr.strip()[-500:]}")
    started, stopped = float(lines[0]), float(lines[1])
    return started - launched, max(stopped, ended) - started


def median(values: list[float]) -> float:
    return statistics.median(values)


def before_env(env: dict[str, str], tree: Path | None, tmp: Path) -> dict[str, str] | None:
    """The environment that runs ``nestbed`` from another checkout's sources, in a store of
    its own; None without one."""
    if tree is None:
        return None
    return dict(env, PYTHONPATH=str(tree.resolve() / "src"), NESTBED_DB=str(tmp / "before.db"))


def whole_process(
    cases: dict[str, str], runs: int, env: dict[str, str], tmp: Path, before: dict | None
) -> None:
    print(f"\nwhole process (wall time of the command), median of {runs} runs, alternating")
    print(f"{'experiment':<40}{'in s':>8}{'out s':>8}{'Mininet plain in/out s':>24}"
          f"{'ratio in/out':>14}{'Mininet htb in/out s':>22}"
          f"{'  before in/out s' if before else ''}")  # fmt: skip
    for label, text in cases.items():
        source = tmp / f"{label.split(',')[0].replace(' ', '')}.ns"
        source.write_text(text)
        exp = load(source).experiment
        name = f"{NAME}-{len(exp.nodes)}-{source.stem}"
        nestbed("create", str(source), "--name", name, env=env)
        if before:
            nestbed("create", str(source), "--name", f"{name}-b", env=before)
        ours, plain, htb, theirs = [], [], [], []
        for i in range(runs):
            t_in = nestbed("swapin", name, "--results", str(tmp / f"{name}-{i}"), env=env)
            t_out = nestbed("swapout", name, env=env)
            ours.append((t_in, t_out))
            if before:
                b_in = nestbed("swapin", f"{name}-b", "--results", str(tmp / f"{name}-b{i}"),
                               env=before)  # fmt: skip
                theirs.append((b_in, nestbed("swapout", f"{name}-b", env=before)))
            if len(exp.nodes) <= 100:
                plain.append(mininet(len(exp.nodes), edges(exp), "plain"))
                htb.append(mininet(len(exp.nodes), edges(exp), "htb"))
        t_in, t_out = median([a for a, _ in ours]), median([b for _, b in ours])
        row = f"{label:<40}{t_in:>8.2f}{t_out:>8.2f}"
        if plain:
            m_in, m_out = median([a for a, _ in plain]), median([b for _, b in plain])
            h_in, h_out = median([a for a, _ in htb]), median([b for _, b in htb])
            ratio = f"{m_in / t_in:.1f}× / {m_out / t_out:.1f}×"
            row += f"{f'{m_in:.2f} / {m_out:.2f}':>24}{ratio:>14}"
            row += f"{f'{h_in:.2f} / {h_out:.2f}':>22}"
        if theirs:
            b_in, b_out = median([a for a, _ in theirs]), median([b for _, b in theirs])
            row += f"{f'{b_in:.2f} / {b_out:.2f}':>18}"
        print(f"{row}   load {os.getloadavg()[0]:.1f}", flush=True)


def short_commands(runs: int, env: dict[str, str], tmp: Path, before: dict | None) -> None:
    source = tmp / "pair.ns"
    source.write_text(chain(2))
    name = f"{NAME}-pair"
    exp = load(source, name=name).experiment
    node = exp.nodes[0].name
    netns = plan(exp).node(node).netns
    nestbed("create", str(source), "--name", name, env=env)
    nestbed("swapin", name, "--results", str(tmp / "pair"), env=env)
    commands: dict[str, Callable[[dict[str, str]], float]] = {
        "nestbed --help": lambda e: nestbed("--help", env=e),
        "nestbed list": lambda e: nestbed("list", env=e),
        "nestbed show": lambda e: nestbed("show", name, env=e),
        "nestbed status": lambda e: nestbed("status", name, env=e),
        "nestbed exec NAME NODE -- true": lambda e: nestbed(
            "exec", name, node, "--", "true", env=e
        ),
    }
    print(f"\nshort commands (wall time), median of {runs} runs"
          f"{', alternating with before' if before else ''}")  # fmt: skip
    try:
        for label, command in commands.items():
            ours, theirs = [], []
            for _ in range(runs):
                ours.append(command(env))
                if before:
                    # The same store, read by the other tree (the experiment is this tree's).
                    theirs.append(command(dict(before, NESTBED_DB=env["NESTBED_DB"])))
            row = f"{label:<44}{median(ours):>8.3f} s"
            print(row + (f"   before {median(theirs):.3f} s" if theirs else ""), flush=True)
        alone = median([_timed(["ip", "netns", "exec", netns, "true"]) for _ in range(runs)])
        print(f"{'ip netns exec NS true (the command alone)':<44}{alone:>8.3f} s", flush=True)
        # The floor of any Python command: the interpreter's own start (site, this venv).
        floor = median([_timed([sys.executable, "-c", "pass"], env) for _ in range(runs)])
        print(f"{'python -c pass (the interpreter alone)':<44}{floor:>8.3f} s", flush=True)
    finally:
        nestbed("swapout", name, env=env)


def _timed(argv: list[str], env: dict[str, str] | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, env=env)
    return time.perf_counter() - start


def whole_run(
    runs: int, env: dict[str, str], tmp: Path, before: dict | None, end_s: float = 3.0
) -> None:
    source = tmp / f"{NAME}timed.ns"
    source.write_text(
        chain(2).replace("$ns run", "")
        + f'$ns at 1.0 "$ns log one"\n$ns at {end_s} "$ns log last"\n$ns run\n'
    )
    took, theirs = [], []
    for i in range(runs):
        took.append(nestbed("run", str(source), "--results", str(tmp / f"run-{i}"), env=env))
        if before:
            theirs.append(nestbed("run", str(source), "--results", str(tmp / f"run-b{i}"),
                                  env=before))  # fmt: skip
    t = median(took)
    print(f"\n`nestbed run` of a file whose events end at T = {end_s:g} s, median of {runs}: "
          f"{t:.2f} s = T + {t - end_s:.2f} s"
          f"{f' (before: T + {median(theirs) - end_s:.2f} s)' if theirs else ''}")  # fmt: skip


def linear(n: int):  # type: ignore[no-untyped-def]
    exp = Experiment(f"linear{n}")
    nodes = [exp.node(f"n{i}") for i in range(n)]
    for a, b in itertools.pairwise(nodes):
        exp.link(a, b, bandwidth="100Mb", delay="1ms")
    exp.routing("static")
    return exp.build()


def back_end(runs: int, quick: bool) -> None:
    cases = {
        "tree, 100 nodes, 99 shaped links": load(EXAMPLES / "tree.ns").experiment,
        "linear, 100 nodes, 99 shaped links": linear(100),
    }
    if not quick:
        cases["linear, 1000 nodes, 999 shaped links"] = linear(1000)
    print(f"\nthe back end alone (in this process), median of {runs} runs")
    print(f"{'experiment':<38}{'plan s':>8}{'in s':>8}{'out s':>8}{'per node ms':>13}")
    for label, exp in cases.items():
        start = time.perf_counter()
        p = plan(exp)
        t_plan = time.perf_counter() - start
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            linux.swap_in(p)
            middle = time.perf_counter()
            linux.swap_out(p)
            times.append((middle - start, time.perf_counter() - middle))
        t_in, t_out = median([t for t, _ in times]), median([t for _, t in times])
        print(f"{label:<38}{t_plan:>8.2f}{t_in:>8.2f}{t_out:>8.2f}"
              f"{t_in / len(exp.nodes) * 1000:>13.1f}", flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="without the 1000-node chain")
    parser.add_argument("--before", type=Path, help="another checkout to alternate with")
    parser.add_argument("--swaps-only", action="store_true",
                        help="only the whole commands' swap-in and swap-out table")  # fmt: skip
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory(prefix="nestbed-bench-") as name:
        tmp = Path(name)
        # Bytecode cached, as a user's install has it (this VM's shell turns caching off).
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env |= {"NESTBED_DB": str(tmp / "store.db"), "COLUMNS": "200"}
        cases = {
            "chain, 100 nodes, 99 shaped links": chain(100),
            "tree, 100 nodes, 99 shaped links": (EXAMPLES / "tree.ns").read_text(),
        }
        if not args.quick:
            cases["chain, 1000 nodes, 999 shaped links"] = chain(1000)
        before = before_env(env, args.before, tmp)
        whole_process(cases, args.runs, env, tmp, before)
        if args.swaps_only:
            return
        whole_run(args.runs, env, tmp, before)
        short_commands(args.runs, env, tmp, before)
    back_end(args.runs, args.quick)


if __name__ == "__main__":
    main()
