"""Benchmark: what a nestbed-linkd with many ports costs the machine while no frame flows.

linkd follows each port's offloads (whether super-frames may come, which decides how a port
reads its frames) on a thread of its own, ``linkd-offloads``. Each reading of an interface's
offloads takes the kernel's rtnl lock, which every change of the machine's interfaces (an
experiment's swap-in or swap-out) needs too. This bench starts linkd in a namespace of its
own with ``--ports`` ports (one end of a veth pair each, two to a link) and, with no frame
flowing, measures for ``--seconds``:

- the CPU time of the watcher thread, per second of the window (``/proc/PID/task/TID/stat``);
- how long ``ip -batch`` takes to set the MTU of 400 interfaces (200 veth pairs) of a second
  namespace of the bench's down and up again, batch after batch through the window: changes
  of the kind a swap-in makes, each waiting for rtnl as the watcher's readings do;

for this checkout's linkd and, with ``--before BINARY``, another build, and with no linkd at
all (the interfaces still there), runs alternating, medians of ``--runs``. Needs root.

    .venv/bin/python bench/linkd_ports.py [--ports N] [--seconds S] [--runs N] [--before BIN]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from nestbed.backend import processes
from nestbed.backend.linkd import LinkdClient
from nestbed.binaries import built_binary
from nestbed.lifecycle import signals

PORTS = 1000
SECONDS = 10.0
RUNS = 3
#: veth pairs of the second namespace, whose MTUs each batch sets.
BATCH_PAIRS = 200
CLK_TCK = os.sysconf("SC_CLK_TCK")


def ip(*argv: str, stdin: str | None = None) -> None:
    subprocess.run(["ip", *argv], input=stdin, text=True, check=True, capture_output=True)


@contextlib.contextmanager
def namespaces(ports: int) -> Iterator[tuple[str, str]]:
    """The bench's two namespaces: linkd's, with ``ports`` veth pairs up (``p<i>`` the
    ports, ``q<i>`` their peers), and one with BATCH_PAIRS pairs for the batches; both
    deleted (with their interfaces) however the block ends."""
    linkd_ns, other_ns = f"nbwp{os.getpid()}", f"nbwq{os.getpid()}"
    made = []
    try:
        for ns in (linkd_ns, other_ns):
            ip("netns", "add", ns)
            made.append(ns)
        pairs = "".join(f"link add p{i} type veth peer name q{i}\n" for i in range(ports))
        ups = "".join(f"link set p{i} up\nlink set q{i} up\n" for i in range(ports))
        ip("-n", linkd_ns, "-batch", "-", stdin=pairs + ups)
        others = "".join(f"link add b{i} type veth peer name c{i}\n" for i in range(BATCH_PAIRS))
        ip("-n", other_ns, "-batch", "-", stdin=others)
        yield linkd_ns, other_ns
    finally:
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], check=False, capture_output=True)


@contextlib.contextmanager
def linkd(binary: str, ns: str, ports: int, directory: Path) -> Iterator[int]:
    """``binary`` running in ``ns`` with a link for each two ports; its process id. Stopped
    however the block ends."""
    sock = directory / f"linkd-{os.getpid()}.sock"
    log = directory / "linkd.log"  # a file: a pipe nobody reads could fill and stop linkd
    with log.open("wb") as out:
        proc = subprocess.Popen(["ip", "netns", "exec", ns, binary, "--socket", str(sock)],
                                stdout=subprocess.DEVNULL, stderr=out)  # fmt: skip
    try:
        deadline = time.monotonic() + 10
        while not sock.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{binary} did not start: {log.read_text()}")
            time.sleep(0.01)
        client = LinkdClient(sock)
        for i in range(0, ports, 2):
            client.request("add_link", link=f"l{i}", seed=i,
                           ports=[{"port": "a", "ifname": f"p{i}"},
                                  {"port": "b", "ifname": f"p{i + 1}"}])  # fmt: skip
        client.close()
        yield proc.pid
    finally:
        processes.stop(proc.pid, grace_s=10)
        sock.unlink(missing_ok=True)


def watcher_cpu_s(pid: int) -> float:
    """CPU seconds (user and system) of linkd's ``linkd-offloads`` thread so far."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        if (task / "comm").read_text().strip() == "linkd-offloads":
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / CLK_TCK
    raise RuntimeError(f"linkd {pid} has no linkd-offloads thread")


def batches(ns: str, seconds: float) -> list[float]:
    """Sets the MTU of every interface of ``ns`` to 1400 and back to 1500 with one
    ``ip -batch``, again and again until ``seconds`` have gone; each batch's wall time, s."""
    names = [f"{end}{i}" for i in range(BATCH_PAIRS) for end in "bc"]
    mtus = "".join(f"link set {n} mtu {mtu}\n" for mtu in (1400, 1500) for n in names)
    took = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        start = time.monotonic()
        ip("-n", ns, "-batch", "-", stdin=mtus)
        took.append(time.monotonic() - start)
    return took


def one_run(binary: str | None, ns: tuple[str, str], ports: int, seconds: float,
            directory: Path) -> dict[str, float]:  # fmt: skip
    """One window: the watcher's CPU per second and the median add-and-delete time."""
    linkd_ns, other_ns = ns
    if binary is None:
        time.sleep(1)
        took = batches(other_ns, seconds)
        return {"cpu_per_s": float("nan"), "batch_s": statistics.median(took)}
    with linkd(binary, linkd_ns, ports, directory) as pid:
        time.sleep(1)  # every link added and read once
        before, start = watcher_cpu_s(pid), time.monotonic()
        took = batches(other_ns, seconds)
        cpu = watcher_cpu_s(pid) - before
        return {"cpu_per_s": cpu / (time.monotonic() - start), "batch_s": statistics.median(took)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--ports", type=int, default=PORTS)
    parser.add_argument("--seconds", type=float, default=SECONDS)
    parser.add_argument("--runs", type=int, default=RUNS)
    parser.add_argument("--before", help="another nestbed-linkd binary, measured alongside")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/linkd_ports.py needs root (namespaces and interfaces)")
    # SIGTERM and SIGHUP stop it as Ctrl-C does: the namespaces go on the way out.
    signals.install()
    binaries: dict[str, str | None] = {"this linkd": built_binary("nestbed-linkd")}
    if args.before:
        binaries["--before"] = args.before
    binaries["no linkd"] = None
    results: dict[str, list[dict[str, float]]] = {name: [] for name in binaries}
    print(f"{args.ports} ports, {args.seconds:g} s a window, {args.runs} runs, load "
          f"{os.getloadavg()[0]:.2f}", flush=True)  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="nestbed-bench-ports-") as tmp, \
            namespaces(args.ports) as ns:  # fmt: skip
        for run in range(args.runs):
            for name, binary in binaries.items():
                row = one_run(binary, ns, args.ports, args.seconds, Path(tmp))
                results[name].append(row)
                print(f"  run {run + 1} {name}: watcher {row['cpu_per_s'] * 1000:.1f} ms/s, "
                      f"{4 * BATCH_PAIRS} MTUs set in "
                      f"{row['batch_s'] * 1000:.1f} ms", flush=True)  # fmt: skip
    print(f"\nmedians (load {os.getloadavg()[0]:.2f}):")
    print(f"{'linkd':<14}{'watcher CPU ms/s':>18}{'batch ms':>10}{'× no linkd':>12}")
    alone = statistics.median(r["batch_s"] for r in results["no linkd"])
    for name, rows in results.items():
        cpu = statistics.median(r["cpu_per_s"] for r in rows) * 1000
        batch = statistics.median(r["batch_s"] for r in rows)
        cpu_text = "-" if cpu != cpu else f"{cpu:.1f}"
        print(f"{name:<14}{cpu_text:>18}{batch * 1000:>10.1f}{batch / alone:>12.2f}")


if __name__ == "__main__":
    main()
