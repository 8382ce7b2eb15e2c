"""Benchmark (issue 21): experiments over several hosts.

1. Control traffic, without root: a swap-in sends each host one share of the plan (its nodes,
   its cut links' tunnels) through Dask; how large the shares of binary trees of shaped links
   are, pickled as Dask sends them, and how long the controlling machine takes to plan, place
   and cut them.
2. As root: binary trees swapped in and out through ClusterBackend on hosts simulated on this
   machine as the cluster tests make them (tests/cluster/simulated.py: a namespace per host on
   an underlay shaped by nestbed-linkd, a `nestbed agent` inside each); the plan is computed
   before the clock starts. All the simulated hosts share this machine's cores.

3. As root, with --linktest: linktest level 3 of the 100-node tree on three simulated hosts
   through ClusterBackend, each level's checks passed and failed, and the queue drops the
   link emulators counted meanwhile (a busy machine leaves them unscheduled).
4. As root, with --accuracy: `nestbed validate --quick` on one host, then across two
   simulated hosts (each agent holds one node, so its link is cut), side by side against the
   issue's goals (one-way delay error ≤ 60 µs, bandwidth ≤ 0.5 %, loss inside its 99 %
   interval). One clock serves both simulated hosts, so the one-way delays need no offset.
5. As root, with --hops: where a cut link's delay error goes, row by row (validate's delay
   rows across two simulated hosts): each link emulator's lateness over the row (the
   sending host's, the receiving host's, the underlay's), the underlay's time given up,
   and the underlay's own one-way time for frames of the row's size and rate, measured
   between the hosts by nestbed-probe with the kernel's receive times.
6. As root, with --events [--runs N]: how late link events take effect on three simulated
   hosts (events.csv's error_ms, each row's time the link emulators' answer), for links cut
   between two hosts and links inside one (not the controlling machine), over N runs
   (default RUNS) of a chain of six nodes with 120 timed changes; and the round trip of a
   task through the scheduler to every host's agent during the run (as a command's poll or
   the counters go), which the events' lead (``LINK_LEAD_S``) must cover and which timed
   changes waiting in an agent's Dask slots hold up.
7. As root, with --cli: the swaps of part 2 as a user waits for them, the whole `nestbed
   swapin` and `nestbed swapout` commands (process start to exit, `--cluster` through
   NESTBED_CLUSTER), beside the same commands on this one machine, alternating.

Medians of RUNS runs. Stopped by Ctrl-C, SIGTERM or SIGHUP, it swaps out what it swapped
in and removes its simulated hosts before it exits.

    PYTHONPATH=src python bench/cluster.py              # part 2 needs root
    PYTHONPATH=src python bench/cluster.py --linktest   # part 3 only, root
    PYTHONPATH=src python bench/cluster.py --accuracy   # part 4 only, root
    PYTHONPATH=src python bench/cluster.py --hops       # part 5 only, root
    PYTHONPATH=src python bench/cluster.py --hops --switch   # the underlay a bridge (4, 5)
    PYTHONPATH=src python bench/cluster.py --hops --normal-class   # its linkd not real time
    PYTHONPATH=src python bench/cluster.py --events     # part 6 only, root
    PYTHONPATH=src python bench/cluster.py --cli        # part 7 only, root
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from nestbed.backend.cluster.placement import HostFacts, place
from nestbed.backend.cluster.share import Underlay, shares
from nestbed.backend.plan import Plan, plan
from nestbed.lifecycle import signals
from nestbed.spec import yaml as yaml_front_end
from nestbed.spec.resolve import resolve

RUNS = 3
CASES = ((100, 4), (400, 4), (1000, 10))  # (nodes, hosts)
SWAPS = ((100, 4), (400, 4))  # (nodes, simulated hosts); the goal: 400 on 4,
GOAL_IN_S, GOAL_OUT_S = 6.0, 3.0  # swapped in within 6 s and out within 3 s


def tree(n: int):  # type: ignore[no-untyped-def]
    """A binary tree of ``n`` nodes, every link 100 Mb/s and 1 ms (so all go through linkd),
    named after this process (``tree_name``): two benches on one machine, or a test cleaning
    up after one it killed, each know their own namespaces."""
    document, locations = yaml_front_end.read(tree_file(n, tree_name(n, os.getpid())),
                                              f"tree{n}.yaml")  # fmt: skip
    return resolve(document, file=f"tree{n}.yaml", locations=locations)


def tree_file(n: int, name: str) -> str:
    """The YAML of ``tree``'s experiment, called ``name``."""
    nodes = ", ".join(f"{{name: n{i}}}" for i in range(n))
    links = "\n".join(
        f"  - {{name: l{i}, members: [n{(i - 1) // 2}, n{i}], bandwidth: 100Mb, delay: 1ms}}"
        for i in range(1, n)
    )
    return f"name: {name}\nrouting: static\nnodes: [{nodes}]\nlinks:\n{links}\n"


def tree_name(n: int, pid: int) -> str:
    """The name of the ``n``-node tree of the bench in process ``pid``."""
    return f"tree{n}-{pid}"


def control_traffic() -> None:
    print("| nodes | hosts | cut links | bytes per share (max) | all shares | "
          "plan + place + cut (s, median) |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for n, count in CASES:
        exp = tree(n)
        facts = [
            HostFacts(f"pc{i}", f"10.0.0.{i + 1}", 8, 1 << 34, -(-n // count), 10**10)
            for i in range(count)
        ]
        underlay = Underlay({f.name: f.address for f in facts})
        times = []
        for _ in range(RUNS):
            start = time.perf_counter()
            p = plan(exp)
            parts = shares(p, place(p, facts), underlay)
            times.append(time.perf_counter() - start)
        sizes = [len(pickle.dumps(part)) for part in parts.values()]
        cut = len({t.link for part in parts.values() for t in part.tunnels})
        print(f"| {n} | {count} | {cut} | {max(sizes) / 1e3:.0f} kB | {sum(sizes) / 1e3:.0f} kB "
              f"| {statistics.median(times):.2f} |")  # fmt: skip


@contextlib.contextmanager
def swapped_in(cluster, p: Plan, timed: list[float] | None = None):  # type: ignore[no-untyped-def]
    """``p`` swapped in on ``cluster`` (how long it took appended to ``timed``), and out at
    the end however it ends: a stop during swap-in waits for the hosts' parts to be built
    and removes them. A second stop waits until it is swapped out."""
    try:
        start = time.perf_counter()
        cluster.swap_in(p)
        if timed is not None:
            timed.append(time.perf_counter() - start)
        yield
    finally:
        with signals.deferred():
            cluster.swap_out(p)


def swaps() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "cluster"))
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from simulated import started  # the cluster tests' simulated hosts

    from nestbed.backend.cluster.backend import ClusterBackend

    print("\n| nodes | simulated hosts | swap-in (s) | goal | swap-out (s) | goal |")
    print("|---|---|---|---|---|---|")
    for n, count in SWAPS:
        p = plan(tree(n))
        with (
            started(count, slots=-(-n // count)) as (machines, agents),
            ClusterBackend(agents.address, state_root=machines.run_dir("bench")) as cluster,
        ):
            ins: list[float] = []
            outs: list[float] = []
            for _ in range(RUNS):
                with swapped_in(cluster, p, ins):
                    ping = cluster.exec_in(p, "n0", ["ping", "-c", "1", "-W", "5", f"n{n - 1}"],
                                           capture_output=True, text=True)  # fmt: skip
                    start = time.perf_counter()
                outs.append(time.perf_counter() - start)
                if ping.returncode != 0:
                    raise SystemExit(f"n0 does not reach n{n - 1}: {ping.stdout}")
        print(f"| {n} | {count} | {statistics.median(ins):.2f} | {GOAL_IN_S:g} "
              f"| {statistics.median(outs):.2f} | {GOAL_OUT_S:g} |")  # fmt: skip


def cli_swaps() -> None:
    """Part 7: the commands a user types, timed whole (process start to exit): `nestbed
    swapin FILE` (defines the experiment and computes its plan), then `nestbed swapin NAME`
    and `nestbed swapout NAME` RUNS times, on the simulated hosts (`--cluster`, the agents'
    scheduler) and, alternating with them, on this one machine (the anchor)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "cluster"))
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from simulated import started

    src = str(Path(__file__).resolve().parents[1] / "src")
    print("\n| nodes | where | swapin FILE, first (s) | swapin NAME (s) | swapout (s) | goal |")
    print("|---|---|---|---|---|---|")
    for n, count in SWAPS:
        with (
            tempfile.TemporaryDirectory() as tmp,
            started(count, slots=-(-n // count)) as (machines, agents),
        ):
            base = {**os.environ, "PYTHONPATH": src}
            for variable in ("NESTBED_BACKEND", "NESTBED_CLUSTER", "NESTBED_CONFIG"):
                base.pop(variable, None)
            where = {
                f"{count} simulated hosts": (
                    tree_name(n, os.getpid()),
                    {**base, "NESTBED_CLUSTER": agents.address,
                     "NESTBED_RUN_DIR": str(machines.run_dir("bench"))},
                ),
                "one host (anchor)": (
                    tree_name(n, os.getpid()) + "-one",
                    {**base, "NESTBED_BACKEND": "linux",
                     "NESTBED_RUN_DIR": str(machines.run_dir("one"))},
                ),
            }  # fmt: skip
            times: dict[str, dict[str, list[float]]] = {w: {} for w in where}
            try:
                for run in range(RUNS + 1):
                    for label, (name, env) in where.items():
                        env = {**env, "NESTBED_DB": f"{tmp}/{name}.db"}
                        if run == 0:
                            file = Path(tmp) / f"{name}.yaml"
                            file.write_text(tree_file(n, name))
                            first = _timed(["swapin", str(file)], env, tmp)
                            times[label]["first"] = [first]
                        else:
                            times[label].setdefault("in", []).append(
                                _timed(["swapin", name], env, tmp)
                            )
                        times[label].setdefault("out", []).append(
                            _timed(["swapout", name], env, tmp)
                        )
            finally:
                with signals.deferred():
                    for name, env in where.values():
                        env = {**env, "NESTBED_DB": f"{tmp}/{name}.db"}
                        _nestbed(["swapout", name], env, tmp, check=False)
            for label, t in times.items():
                goal = f"≤ {GOAL_IN_S:g} / {GOAL_OUT_S:g}" if "simulated" in label else ""
                print(f"| {n} | {label} | {t['first'][0]:.2f} | {statistics.median(t['in']):.2f} "
                      f"| {statistics.median(t['out']):.2f} | {goal} |")  # fmt: skip
        print(f"(load average {os.getloadavg()[0]:.1f}; medians of {RUNS}; swapout's median of "
              f"{RUNS + 1})")  # fmt: skip


def _nestbed(args: list[str], env: dict[str, str], cwd: str, *, check: bool = True):  # type: ignore[no-untyped-def]
    done = subprocess.run([sys.executable, "-m", "nestbed", *args], env=env, cwd=cwd,
                          capture_output=True, text=True)  # fmt: skip
    if check and done.returncode != 0:
        raise SystemExit(f"nestbed {' '.join(args)} failed: {done.stdout}{done.stderr}")
    return done


def _timed(args: list[str], env: dict[str, str], cwd: str) -> float:
    start = time.perf_counter()
    _nestbed(args, env, cwd)
    return time.perf_counter() - start


LINKTEST = (100, 3)  # (nodes, simulated hosts)


def linktests() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "cluster"))
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from simulated import started  # the cluster tests' simulated hosts

    from nestbed.backend.cluster.backend import ClusterBackend
    from nestbed.backend.linkd import drops_by_kind, pipe_counters
    from nestbed.linktest.run import linktest

    n, count = LINKTEST
    exp = tree(n)
    p = plan(exp)
    print("\n| run | level 1 pass/all | level 2 pass/all | level 3 pass/all | queue drops "
          "| seconds (levels 1, 2, 3) | load average |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    with (
        started(count, slots=-(-n // count)) as (machines, agents),
        ClusterBackend(agents.address, state_root=machines.run_dir("bench")) as cluster,
    ):
        for run in range(1, RUNS + 1):
            with swapped_in(cluster, p):
                before = pipe_counters(cluster.linkd(p))
                report = linktest(p, exp, 3, backend=cluster)
                after = pipe_counters(cluster.linkd(p))
            drops = sum(drops_by_kind(c)["queue"] - drops_by_kind(before[k])["queue"]
                        for k, c in after.items() if k in before)  # fmt: skip
            cells = []
            for level in (1, 2, 3):
                checks = [c for c in report.checks if c.level == level]
                cells.append(f"{sum(c.verdict == 'pass' for c in checks)}/{len(checks)}")
            seconds = ", ".join(f"{report.level_seconds[k]:.0f}" for k in (1, 2, 3))
            load = os.getloadavg()[0]
            print(f"| {run} | {' | '.join(cells)} | {drops} | {seconds} | {load:.1f} |")


def accuracy() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "cluster"))
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from simulated import started  # the cluster tests' simulated hosts

    tables = {}
    # validate's link runs at 1 Gb/s between its changes (so that linkd carries it, offloads
    # off); each agent says its interface carries more, or the mapper would keep the link on
    # one host.
    nic = ("--nic", "1000Gb")
    with (
        tempfile.TemporaryDirectory() as tmp,
        started(2, slots=1, options=nic, switch=SWITCH, realtime=REALTIME) as (_, agents),
    ):
        for where, env in (("one host", {}), ("two hosts", {"NESTBED_CLUSTER": agents.address})):
            environment = {k: v for k, v in os.environ.items() if k != "NESTBED_CLUSTER"}
            validate = subprocess.Popen(
                [sys.executable, "-m", "nestbed", "validate", "--quick", "--json",
                 "--results", str(Path(tmp) / where.replace(" ", "-"))],
                env={**environment, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                text=True,
            )  # fmt: skip
            try:
                stdout, stderr = validate.communicate()
            except BaseException:  # stopped: validate swaps its experiment out, then ends
                with signals.deferred():
                    validate.terminate()
                    validate.wait()
                raise
            if validate.returncode != 0:
                raise SystemExit(f"validate on {where} failed: {stderr.strip()}")
            tables[where] = json.loads(stdout)
    one, two = tables["one host"], tables["two hosts"]
    print("(the simulated underlay has jumbo frames, 9000 bytes: a cut link carries "
          "validate's 1518-byte frames whole, as a link on one host; a 0 ms link across hosts "
          "has no delay to give the underlay's time up from, so its row carries it)")  # fmt: skip
    print("\n| delay | frame | one-way error, one host | across two hosts | stdev, one host "
          "| across | goal |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for a, b in zip(one["delay"], two["delay"], strict=True):
        print(f"| {a['delay_ms']:g} ms | {a['frame_bytes']} B | {a['one_way_error_us']:+.1f} µs "
              f"| {b['one_way_error_us']:+.1f} µs | {a['one_way_stdev_us']:.1f} µs "
              f"| {b['one_way_stdev_us']:.1f} µs | ≤ 60 µs |")  # fmt: skip
    print("\n| bandwidth | frame | error, one host | across two hosts | goal |")
    print("|---|---|---|---|---|")
    for a, b in zip(one["bandwidth"], two["bandwidth"], strict=True):
        print(f"| {a['bandwidth_bps'] / 1e6:g} Mb/s | {a['frame_bytes']} B "
              f"| {a['error_pct']:.3f} % | {b['error_pct']:.3f} % | ≤ 0.5 % |")  # fmt: skip
    print("\n| loss | frame | measured, one host | across two hosts | inside the 99 % interval |")
    print("|---|---|---|---|---|")
    for a, b in zip(one["loss"], two["loss"], strict=True):
        print(f"| {a['loss']:.1%} | {a['frame_bytes']} B | {a['measured_loss']:.4f} "
              f"| {b['measured_loss']:.4f} | {a['inside']}, {b['inside']} |")  # fmt: skip
    print(f"load average {os.getloadavg()[0]:.1f}")


def hops() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "cluster"))
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from dataclasses import replace

    from simulated import started

    from nestbed.backend.sockets import SocketClient
    from nestbed.studies.validate import Bench, Settings, linkd_lateness, measure_delay

    settings = Settings.quick()
    nic = ("--nic", "1000Gb")  # as --accuracy: validate's link must be cut
    print(
        "\n| delay | frame | one-way error | sending linkd late | receiving linkd late "
        "(frames) | underlay linkd late | given up | underlay one-way (probe) | load |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    with (
        tempfile.TemporaryDirectory() as tmp,
        started(2, slots=1, options=nic, switch=SWITCH, realtime=REALTIME) as (m, agents),
    ):
        os.environ["NESTBED_CLUSTER"] = agents.address
        switch = m.run_dir("switch") / "linkd.sock"
        bench = Bench(Path(tmp))
        with contextlib.ExitStack() as stack:
            # Closed after the bench's swap-out (which opens its client again) and before the
            # agents stop: its client would try the scheduler again and again, and say so.
            stack.callback(lambda: bench.active and bench.active.backend.close())  # type: ignore[union-attr]
            stack.enter_context(bench)
            channel = bench.client
            assert channel is not None
            kept = bench.active.backend.placement(bench.plan)  # type: ignore[union-attr]
            assert kept is not None
            nodes, underlay = kept
            sender, receiver = nodes["s"], nodes["r"]
            given_us = underlay.delays_s[sender][receiver] * 1e6

            def counters() -> dict[str, dict]:
                found = channel.on_hosts([sender, receiver], "counters", {})  # type: ignore[attr-defined]
                found["underlay"] = {}  # a bridge counts no lateness
                if not SWITCH:
                    with SocketClient(switch) as client:
                        found["underlay"] = client.request("counters")
                return found

            for delay_ms in settings.delays_ms:
                for size in settings.sizes:
                    before = counters()
                    (row,) = measure_delay(
                        bench, replace(settings, delays_ms=(delay_ms,), sizes=(size,)),
                        lambda _: None,
                    )  # fmt: skip
                    after = counters()
                    late = {h: linkd_lateness(before[h], after[h])
                            for h in (sender, receiver, "underlay")}  # fmt: skip
                    crossing = _underlay_one_way(m, size, settings)

                    means = {h: v["linkd_late_mean_us"] for h, v in late.items()}
                    us = {h: "–" if m is None else f"{m:.0f} µs" for h, m in means.items()}
                    print(f"| {delay_ms:g} ms | {size} B | {row['one_way_error_us']:+.0f} µs "
                          f"| {us[sender]} | {us[receiver]} ({late[receiver]['linkd_frames']}) "
                          f"| {us['underlay']} | {given_us:.0f} µs | {crossing:.0f} µs "
                          f"| {os.getloadavg()[0]:.1f} |")  # fmt: skip


def _underlay_one_way(m, size: int, settings) -> float:  # type: ignore[no-untyped-def]
    """The mean one-way time (µs) from host h1 to h2 over the underlay alone, for a stream of
    the row's frame size and rate, by the kernel's receive times (both hosts' one clock)."""
    from nestbed.binaries import probe_recv, probe_send
    from nestbed.studies.validate import FRAME_SIZES, KERNEL_TIMES

    to = f"{m.addresses['h2']}:5009"
    receiver = subprocess.Popen(m.argv("h2", *probe_recv(to, "--idle", "2", KERNEL_TIMES)),
                                stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        time.sleep(0.2)  # the receiver binds before the first packet
        subprocess.run(
            m.argv("h1", *probe_send(to, "--size", str(FRAME_SIZES[size]), "--pps",
                                     str(settings.pps[size]), "--count",
                                     str(settings.delay_packets))),
            check=True, capture_output=True,
        )  # fmt: skip
        out, _ = receiver.communicate(timeout=60)
    finally:
        if receiver.poll() is None:
            receiver.kill()
            receiver.wait()
    return json.loads(out)["delay"]["mean_ns"] / 1e3


EVENT_HOSTS = 3
EVENT_LINKS = 120  # timed changes a run, EVENT_GAP_S apart from EVENT_START_S on
EVENT_START_S, EVENT_GAP_S = 4.0, 0.05  # (after the first lead: all handed over ahead)
TRIP_PAUSE_S = 0.2  # between tasks to every host's agent during a run


def event_chain(name: str):  # type: ignore[no-untyped-def]
    """Six nodes in a chain over three hosts (two a host): the mapper cuts the two 10 Mb/s
    links and keeps the 100 Mb/s ones inside a host; every link gets delay changes in turn."""
    from nestbed.api import Experiment

    exp = Experiment(name)
    nodes = [exp.node(f"n{i}") for i in range(6)]
    links = [exp.link(a, b, name=f"l{i}", bandwidth="10Mb" if i % 2 else "100Mb", delay="1ms")
             for i, (a, b) in enumerate(itertools.pairwise(nodes))]  # fmt: skip
    for i in range(EVENT_LINKS):
        exp.at(round(EVENT_START_S + i * EVENT_GAP_S, 3), links[i % len(links)], "delay",
               f"{1 + i % 4}ms")  # fmt: skip
    exp.at(EVENT_START_S + EVENT_LINKS * EVENT_GAP_S + 1, "ns", "halt")
    return exp.build()


def events() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "cluster"))
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    import csv

    from simulated import started

    from nestbed.backend.cluster.backend import ClusterBackend
    from nestbed.backend.cluster.share import cut_links
    from nestbed.lifecycle.runs import run
    from nestbed.lifecycle.testbed import Testbed
    from nestbed.model.options import RunOptions
    from nestbed.store import Store

    runs = int(sys.argv[sys.argv.index("--runs") + 1]) if "--runs" in sys.argv else RUNS
    print("\n| run | links | events | p50 ms | p99 ms | max ms | latest (link at s) | failed "
          "| task round trip p50 / max ms | load |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    with (
        tempfile.TemporaryDirectory() as tmp,
        started(EVENT_HOSTS, slots=2) as (m, agents),
        ClusterBackend(agents.address) as cluster,
    ):
        os.environ["NESTBED_CLUSTER"] = agents.address  # for the run's controller
        for number in range(1, runs + 1):
            exp = event_chain(f"i21ev{os.getpid()}r{number}")
            folder = Path(tmp) / str(number)
            folder.mkdir()
            trips: list[float] = []
            done = threading.Event()
            asking = threading.Thread(target=_ask_hosts, args=(cluster, m.hosts, done, trips),
                                      daemon=True)  # fmt: skip
            with Store.open(str(folder / "store.db")) as store:
                testbed = Testbed(store, cluster)
                testbed.define(exp, anew=True)
                asking.start()
                try:
                    run(testbed, exp.name, RunOptions(results=folder / "results"))
                finally:
                    done.set()
                    asking.join()
            manifest = json.loads((folder / "results" / "manifest.json").read_text())
            on = {n: h for h, f in manifest["placement"]["hosts"].items() for n in f["nodes"]}
            cut = set(cut_links(plan(exp), on))
            with (folder / "results" / "events.csv").open() as f:
                rows = [r for r in csv.DictReader(f) if r["verb"] == "delay"]
            for r in rows:
                if r["outcome"] != "ok":
                    print(f"failed: {r['object']} at {r['planned_s']} s: {r['message']}")
            load = os.getloadavg()[0]
            kinds = {"cut": [r for r in rows if r["object"] in cut],
                     "in a host": [r for r in rows if r["object"] not in cut]}  # fmt: skip
            for kind, chosen in kinds.items():
                ok = sorted((r for r in chosen if r["outcome"] == "ok"),
                            key=lambda r: float(r["error_ms"]))  # fmt: skip
                late = [float(r["error_ms"]) for r in ok]
                latest = ", ".join(f"{r['object']} at {float(r['planned_s']):g}" for r in ok[-2:])
                failed = sum(r["outcome"] != "ok" for r in chosen)
                p99 = late[min(len(late) - 1, round(0.99 * (len(late) - 1)))] if late else 0.0
                trip = f"{statistics.median(trips):.1f} / {max(trips):.1f}"
                print(f"| {number} | {kind} ({len({r['object'] for r in chosen})}) | {len(chosen)} "
                      f"| {statistics.median(late) if late else 0:.3f} | {p99:.3f} "
                      f"| {max(late, default=0):.3f} | {latest} | {failed} | {trip} "
                      f"| {load:.1f} |")  # fmt: skip


def _ask_hosts(cluster, hosts: list[str], done: threading.Event, trips: list[float]) -> None:  # type: ignore[no-untyped-def]
    """A task to every host's agent at once, TRIP_PAUSE_S apart until ``done`` (as a command's
    poll or the counters ask them): each round trip's milliseconds into ``trips``."""
    from nestbed.backend.cluster import agent

    while not done.wait(TRIP_PAUSE_S):
        start = time.perf_counter()
        cluster._on_hosts(agent.clock, {h: () for h in hosts}, light=True)
        trips.append((time.perf_counter() - start) * 1e3)


# --switch: the simulated hosts' underlay a kernel bridge with no delay of its own, as a
# machine room's switch, rather than nestbed-linkd's 0.5 ms LAN (for --accuracy and --hops).
SWITCH = "--switch" in sys.argv
# The emulated underlay's linkd in the normal class, as before 2026-11-29 evening (4, 5).
REALTIME = "--normal-class" not in sys.argv


def main() -> None:
    # SIGTERM and SIGHUP (timeout, a closed SSH session) stop it as Ctrl-C does: what it
    # built is removed on the way out.
    signals.install()
    if "--linktest" in sys.argv:
        linktests()
        return
    if "--accuracy" in sys.argv:
        accuracy()
        return
    if "--hops" in sys.argv:
        hops()
        return
    if "--events" in sys.argv:
        events()
        return
    if "--cli" in sys.argv:
        cli_swaps()
        return
    control_traffic()
    if os.geteuid() == 0:
        swaps()
    else:
        print("\n(swap-in on simulated hosts skipped: it needs root)")


if __name__ == "__main__":
    try:
        main()
    except signals.Interrupted as stop:
        print(f"stopped by {stop.signal_name}", file=sys.stderr)
        sys.exit(stop.exit_code)
