"""Load on `nestbed serve` (issue 22): many clients creating, swapping and querying at once.

    python bench/server_load.py [--clients 50] [--seconds 600] [--think-s 1] [--seed 1]

A real server process (uvicorn) on loopback with a fresh SQLite store; an admin makes five
projects and one user per client, spread over them. Each client then loops for the given
time: define its own experiment (PUT), read it (GET), list its project's experiments, swap it
in (POST, answered at once), poll its status until the swap-in ends, list again, swap it out,
poll until swapped. Between two actions a client thinks: it pauses for a time drawn from an
exponential distribution of mean ``--think-s`` (seeded, one stream per client), as a person or
a script between calls; polling a status while an operation runs waits ``POLL_S`` instead.
``--think-s 0`` is the closed loop with no pause, where the clients ask as fast as the server
answers (at 50 clients, p99 under 100 ms there would take some 500 requests a second): both
models are printed by name in the first line. Every request's latency is recorded by kind; an
error is any answer other than the one the request should get (a refusal by admission control
counts separately: it is the server working). The server runs on the fake back end, which
records swap-ins without namespaces (each swap-in still starts a real controller process), so
the figures are the server's, not the machine's. The server puts its threads ahead of the
controllers it starts (``nestbed.server.priority``); the clients, which stand for people on
other machines, put theirs at the server's priority once it runs, so that the server does
not starve its own measurement (the first line shows the nice values).
Prints a table of latencies (p50, p99, max) per kind, reads and writes, and the errors;
then the server's own account of each route (``GET /v1/server/timings``): its time inside
the server and the part of it spent waiting before the handler's work began, so a client's
latency splits into the server's work, its internal waits, and the queue before it (the
difference). The machine's load average is printed beside the figures.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "server"))
from server_helpers import Served  # the tests' real-server runner

EXPERIMENT = """\
nodes: [{name: a}, {name: b}]
links:
  - {name: link0, members: [a, b], bandwidth: 10Mb, delay: 5ms}
"""
PROJECTS = 5
POLL_S = 0.2
THINK_S = 1.0  # a client's mean pause between actions: a person's or a script's, not a flood


class Api:
    """One client: plain HTTP with its own token, every latency recorded; ``think`` pauses
    for one of its think times."""

    def __init__(self, url: str, token: str, seen: Seen, think_s: float = 0.0, seed: int = 0):
        self.url, self.token, self.seen = url, token, seen
        self.think_s, self.random = think_s, random.Random(seed)

    def think(self) -> None:
        if self.think_s > 0:
            time.sleep(self.random.expovariate(1 / self.think_s))

    def call(self, kind: str, method: str, path: str, body: object = None,
             ok: tuple[int, ...] = (200, 201, 202)) -> tuple[int, object]:  # fmt: skip
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
        request = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        started = time.perf_counter()
        try:
            with urllib.request.urlopen(request, timeout=120) as reply:
                status, text = reply.status, reply.read()
        except urllib.error.HTTPError as exc:
            status, text = exc.code, exc.read()
        except OSError as exc:
            status, text = 0, str(exc).encode()
        self.seen.add(kind, method, time.perf_counter() - started, status in ok, status, text)
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text


class Seen:
    """Latencies by kind, and what went wrong."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.latency: dict[str, list[float]] = defaultdict(list)
        self.reads: list[float] = []
        self.writes: list[float] = []
        self.errors: list[str] = []
        self.refused = 0

    def add(self, kind: str, method: str, seconds: float, ok: bool, status: int,
            text: bytes) -> None:  # fmt: skip
        with self.lock:
            self.latency[kind].append(seconds)
            (self.reads if method == "GET" else self.writes).append(seconds)
            if not ok:
                self.errors.append(f"{kind}: {status} {text[:200]!r}")


def client(api: Api, project: str, me: str, until: float, seen: Seen) -> int:
    base = f"/v1/projects/{project}/experiments"
    mine = f"{base}/{me}"
    cycles = 0
    while time.monotonic() < until:
        api.call("define", "PUT", mine, {"file_name": f"{me}.yaml", "text": EXPERIMENT})
        api.think()
        api.call("show", "GET", mine)
        api.think()
        api.call("list", "GET", base)
        api.think()
        status, _ = api.call("swapin", "POST", f"{mine}/swapin", {}, ok=(202, 409))
        if status == 409:  # refused (admission) or busy: the server saying so is not an error
            with seen.lock:
                seen.refused += 1
            time.sleep(POLL_S)
            api.think()
            continue
        _settle(api, mine, seen)
        api.think()
        api.call("list", "GET", base)
        api.think()
        api.call("swapout", "POST", f"{mine}/swapout", {})
        _settle(api, mine, seen)
        api.think()
        cycles += 1
    return cycles


def _settle(api: Api, path: str, seen: Seen) -> None:
    """Polls the experiment's status until its operation has ended; one that failed is an
    error."""
    while True:
        _, found = api.call("status", "GET", f"{path}/status")
        op = found.get("operation") if isinstance(found, dict) else None
        if not op or op.get("status") != "running":
            if op and op.get("status") == "failed":
                with seen.lock:
                    seen.errors.append(f"{op.get('kind')} failed: {op.get('error')}")
            return
        time.sleep(POLL_S)


def _cpu_s(pid: int) -> float:
    """The CPU time (user and system) a process has used, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _nice(pid: int) -> int:
    """A process's nice value, from /proc."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[16])


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument(
        "--think-s",
        type=float,
        default=THINK_S,
        help="a client's mean pause between actions (exponential); 0: none",
    )
    parser.add_argument("--seed", type=int, default=1, help="of the clients' think times")
    args = parser.parse_args()
    # a controller or report drawer still writing in it must not cost the figures
    with tempfile.TemporaryDirectory(prefix="nestbed-load-", ignore_cleanup_errors=True) as root:
        served = Served(Path(root))
        made = served.nestbed("serve", "--store", str(served.db), "--init-admin", "root")
        served.admin_token = made.stdout.strip().splitlines()[-1]
        served.start()
        try:
            seen = Seen()
            admin = Api(served.url, served.admin_token, Seen())
            people = []
            for p in range(PROJECTS):
                admin.call("setup", "POST", "/v1/projects", {"name": f"load{p}", "leader": "root"})
            for c in range(args.clients):
                user = f"user{c:02d}"
                _, reply = admin.call("setup", "POST", "/v1/users", {"name": user})
                project = f"load{c % PROJECTS}"
                admin.call("setup", "PUT", f"/v1/projects/{project}/members/{user}",
                           {"role": "member"})  # fmt: skip
                people.append((user, project, reply["token"]))
            if admin.seen.errors:
                print("setting up failed:", *admin.seen.errors, sep="\n  ")
                return 1
            base = os.getpriority(os.PRIO_PROCESS, 0)  # the server's start, its controllers'
            nice = _nice(served.process.pid) if served.process else base
            with contextlib.suppress(PermissionError):  # threads started now inherit it
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)
            until = time.monotonic() + args.seconds
            done: list[int] = []

            def one(n: int, user: str, project: str, token: str) -> None:
                api = Api(served.url, token, seen, args.think_s, seed=args.seed * 1000 + n)
                done.append(client(api, project, user, until, seen))

            threads = [threading.Thread(target=one, args=(n, *person))
                       for n, person in enumerate(people)]  # fmt: skip
            started = time.monotonic()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            elapsed = time.monotonic() - started
            _, timings = admin.call("timings", "GET", "/v1/server/timings")
            cpu_s = _cpu_s(served.process.pid) if served.process else float("nan")
        finally:
            served.stop()
    requests = sum(len(v) for v in seen.latency.values())
    model = (
        f"think time exponential, mean {args.think_s:g} s (seed {args.seed})"
        if args.think_s > 0
        else "no think time (closed loop, back to back)"
    )
    print(f"nice: the server {nice}, the clients {os.getpriority(os.PRIO_PROCESS, 0)}, "
          f"the controllers {base}")  # fmt: skip
    print(f"{args.clients} clients, {model}, for {elapsed:.0f} s on the fake back end: "
          f"{requests} requests ({requests / elapsed:.1f}/s), {sum(done)} swap-in/out cycles, "
          f"{seen.refused} swap-ins refused, {len(seen.errors)} errors")  # fmt: skip
    print(f"{'kind':<10}{'n':>8}{'p50 ms':>10}{'p99 ms':>10}{'max ms':>10}")
    rows = sorted(seen.latency.items()) + [("all reads", seen.reads), ("all writes", seen.writes)]
    for kind, values in rows:
        print(f"{kind:<10}{len(values):>8}{statistics.median(values) * 1e3:>10.1f}"
              f"{quantile(values, 0.99) * 1e3:>10.1f}{max(values) * 1e3:>10.1f}")  # fmt: skip
    print(f"the server's CPU time: {cpu_s:.1f} s in all, {cpu_s / requests * 1e3:.1f} ms per "
          "request (the machine's load aside)")  # fmt: skip
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"load average (1, 5, 15 min) at the end: {load}")
    if isinstance(timings, list):  # where the time went inside the server
        print(f"\n{'inside the server':<48}{'n':>7}{'p50 ms':>9}{'p99 ms':>9}"
              f"{'wait p50':>10}{'wait p99':>10}")  # fmt: skip
        for row in timings:
            print(f"{row['route'][:47]:<48}{row['requests']:>7}{row['p50_ms']:>9.1f}"
                  f"{row['p99_ms']:>9.1f}{row['wait_p50_ms']:>10.1f}"
                  f"{row['wait_p99_ms']:>10.1f}")  # fmt: skip
    for error in seen.errors[:10]:
        print("error:", error)
    return 1 if seen.errors else 0


if __name__ == "__main__":
    sys.exit(main())
