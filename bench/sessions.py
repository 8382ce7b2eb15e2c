"""Exec through `nestbed serve` against exec on the machine itself (issue 22's sessions).

    sudo .venv/bin/python bench/sessions.py [--runs 10] [--megabytes 64]

A real server on the Linux back end (root, setpriv) with a two-node experiment swapped in.
Alternating, ``--runs`` times each:

* ``nestbed --server URL exec E a -- true``: the whole command, as a user types it (Python's
  start, the WebSocket, the checks and audit, the confined command in the node, the exit);
* ``nestbed --db STORE exec E a -- true``: the local command, root's, on the same node (the
  anchor);
* a session opened in this process (the same WebSocket and ``true``, no CLI start): the
  server's part;
* ``head -c MEGABYTES MiB /dev/zero`` in the node, its output read through the server's
  session, and read from ``ip netns exec`` in this process: throughput.

Prints medians (and the spread) per kind, and the ratios of server to local.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "server"))
from server_helpers import LINE, Served, open_root, wait_for  # the tests' real-server runner

NAME = "bench-sessions"
PATH = "/v1/projects/net/experiments"


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def checked(done: subprocess.CompletedProcess) -> None:
    if done.returncode != 0:
        raise SystemExit(f"{done.args} failed ({done.returncode}): {done.stderr[-500:]!r}")


def session(client, argv: list[str]) -> int:  # type: ignore[no-untyped-def]
    """Runs argv through a session; the bytes of output it read."""
    read = 0
    with client.session("net", NAME, "a") as ws:
        ws.send(json.dumps({"argv": argv}))
        ws.send(json.dumps({"eof": True}))
        for message in ws:
            if isinstance(message, bytes):
                read += len(message) - 1
                continue
            assert json.loads(message) == {"exit": 0}, message
            return read
    raise SystemExit("the session ended without its exit")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--megabytes", type=int, default=64)
    args = parser.parse_args()
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        raise SystemExit("bench/sessions.py runs a server on the Linux back end: root, setpriv")
    with open_root("bench-sessions-", (f"net--{NAME}",)) as root:
        served = Served(root, backend="linux")
        made = served.nestbed("serve", "--store", served.store, "--init-admin", "root")
        checked(made)
        admin = served.client(made.stdout.strip().splitlines()[-1])
        served.start()
        try:
            token = admin.request("POST", "/v1/users", {"name": "ada"})["token"]
            admin.request("POST", "/v1/projects", {"name": "net", "leader": "ada"})
            ada = served.client(token)
            ada.request("PUT", f"{PATH}/{NAME}", {"file_name": "line.yaml", "text": LINE})
            ada.request("POST", f"{PATH}/{NAME}/swapin")
            wait_for(ada, f"{PATH}/{NAME}", "swapin")
            print(f"runs: {args.runs} each, alternating; load average "
                  f"{os.getloadavg()[0]:.2f} at the start")  # fmt: skip
            measure(served, ada, token, args.runs, args.megabytes)
            print(f"load average {os.getloadavg()[0]:.2f} at the end")
        finally:
            try:
                ada.request("POST", f"{PATH}/{NAME}/swapout")
                wait_for(ada, f"{PATH}/{NAME}", "swapout")
            finally:
                served.stop()


def measure(served: Served, ada, token: str, runs: int, megabytes: int) -> None:  # type: ignore[no-untyped-def]
    remote = {"NESTBED_SERVER": served.url, "NESTBED_TOKEN": token, "NESTBED_PROJECT": "net"}
    local = ["--db", str(served.db)]
    live = ada.request("GET", f"{PATH}/{NAME}/status")["live"]
    netns = next(n["namespace"] for n in live["nodes"] if n["node"] == "a")
    big = ["head", "-c", f"{megabytes}M", "/dev/zero"]
    kinds: dict[str, Callable[[], object]] = {
        "exec true: CLI through the server": lambda: checked(
            served.nestbed("exec", NAME, "a", "--", "true", **remote)),
        "exec true: CLI on the machine (root)": lambda: checked(
            served.nestbed(*local, "exec", f"net--{NAME}", "a", "--", "true")),
        "exec true: a session, no CLI start": lambda: session(ada, ["true"]),
        f"{megabytes} MiB of output: a session": lambda: session(ada, big),
        f"{megabytes} MiB of output: read in the node's namespace (root)": lambda: checked(
            subprocess.run(["ip", "netns", "exec", netns, *big], capture_output=True)),
    }  # fmt: skip
    seen: dict[str, list[float]] = {k: [] for k in kinds}
    for _ in range(runs):
        for kind, action in kinds.items():
            seen[kind].append(timed(action))
    print("\n| kind | median | min | max |\n|---|---|---|---|")
    for kind, times in seen.items():
        print(f"| {kind} | {statistics.median(times) * 1000:.0f} ms | {min(times) * 1000:.0f} ms "
              f"| {max(times) * 1000:.0f} ms |")  # fmt: skip
    med = {k: statistics.median(v) for k, v in seen.items()}
    names = list(kinds)
    print(f"\nexec true, server CLI / local CLI: {med[names[0]] / med[names[1]]:.2f}")
    for kind in names[3:]:
        print(f"{kind}: {megabytes / med[kind]:.0f} MiB/s")
    print(f"output through a session / read directly: {med[names[3]] / med[names[4]]:.2f} (time)")


if __name__ == "__main__":
    main()
