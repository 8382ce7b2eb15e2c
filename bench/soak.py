"""Fault and soak suite of a machine shared by many experiments (issue 17). Needs root.

    python bench/soak.py cycles --n 1000   swap-in/swap-out cycles of the dumbbell: leaks, and
                                           the last 100 cycles against the first 100
    python bench/soak.py kill --n 50       SIGKILL of `nestbed swapin` at random moments, each
                                           followed by `nestbed cleanup NAME`
    python bench/soak.py many --n 8        experiments swapped in at once, linktest level 3 on
                                           each, `nestbed cleanup NAME` of each: all alive after
    python bench/soak.py signals --n 3     SIGTERM, SIGHUP and SIGINT at random moments to
                                           `run`, `sweep`, `simulate`, `linktest`,
                                           `calibrate`, `validate` and `study`

Every experiment, namespace and interface it makes carries the prefix ``soak`` (or the foreign
objects' ``s17f``), and only those are judged: other experiments on the machine come and go.
Each prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nestbed.backend.linux import RUN_DIR, LinuxBackend, traces
from nestbed.backend.plan import experiment_tag
from nestbed.errors import NestbedError
from nestbed.lifecycle import Testbed
from nestbed.model.options import RunOptions
from nestbed.spec import load
from nestbed.store import Store

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
DEADLINE_S = 300
_PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024


# -- what is on the machine ---------------------------------------------------------------


def machine() -> dict[str, set[str]]:
    """Namespaces, host interfaces, nestbed's traces, mounts and processes, now."""
    namespaces = set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()
    mounts = {line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()}
    return {
        "namespaces": namespaces,
        "interfaces": set(os.listdir("/sys/class/net")),
        "traces": set(traces()),
        "mounts": mounts,
        "processes": {f"{pid} {cmd}" for pid, cmd in _processes()},
    }


def _processes() -> list[tuple[int, str]]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            found.append((int(entry.name), cmd.strip()))
    return found


def ours(snapshot: dict[str, set[str]], names: list[str]) -> dict[str, set[str]]:
    """What of ``snapshot`` belongs to these experiments (their tags, their state folders)."""
    marks = [experiment_tag(n) for n in names] + [str(RUN_DIR / n) + "/" for n in names]
    marks += [str(RUN_DIR / n) + " " for n in names]
    return {kind: {x for x in items if any(m in x + " " for m in marks)}
            for kind, items in snapshot.items()}  # fmt: skip


def counts() -> dict[str, int]:
    """Totals that include other users of the machine: figures, not verdicts."""
    return {
        "own fds": len(os.listdir("/proc/self/fd")),
        "own rss KiB": int(Path("/proc/self/statm").read_text().split()[1]) * _PAGE_KIB,
        "machine fds": int(Path("/proc/sys/fs/file-nr").read_text().split()[0]),
        "processes": sum(1 for e in Path("/proc").iterdir() if e.name.isdigit()),
        "own children": sum(1 for pid, _ in _children()),
        "mounts": len(Path("/proc/self/mountinfo").read_text().splitlines()),
        "namespaces": len(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else 0,
        "interfaces": len(os.listdir("/sys/class/net")),
    }


def _children() -> list[tuple[int, str]]:
    me, found = str(os.getpid()), []
    for pid, cmd in _processes():
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        if f"\nPPid:\t{me}\n" in status:
            found.append((pid, cmd))
    return found


def nestbed(db: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    argv = [sys.executable, "-m", "nestbed", "--db", str(db), *args]
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip


def done(process: subprocess.Popen) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=DEADLINE_S)
    return process.returncode, out, err


def until(condition: Callable[[], Any], deadline_s: float = DEADLINE_S) -> Any:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise SystemExit(f"gave up after {deadline_s} s")


def table(header: list[str], rows: list[list[Any]]) -> None:
    widths = [max(len(str(x)) for x in [h, *(r[i] for r in rows)]) for i, h in enumerate(header)]
    print("  ".join(f"{h:<{w}}" for h, w in zip(header, widths, strict=True)))
    for r in rows:
        print("  ".join(f"{x!s:<{w}}" for x, w in zip(r, widths, strict=True)))


# -- cycles ---------------------------------------------------------------------------------


def cycles(n: int, report: bool = True) -> int:
    exp = load(EXAMPLES / "dumbbell.ns").experiment.model_copy(update={"name": "soakcycle"})
    with tempfile.TemporaryDirectory() as tmp, Store.open(str(Path(tmp) / "s.db")) as store:
        testbed = Testbed(store, LinuxBackend())
        testbed.define(exp)

        failed: list[str] = []

        def cycle(i: int) -> tuple[float, float]:
            """Wall and CPU seconds of one cycle. The CPU time is this process's (swap-in and
            swap-out run in it), so a drift in it is nestbed's, not the shared machine's load."""
            results = Path(tmp) / f"r{i}"
            start, cpu = time.perf_counter(), time.process_time()
            try:
                testbed.swap_in(exp.name, RunOptions(results=results, report=report))
                testbed.swap_out(exp.name)
            except NestbedError as exc:  # counted and shown: the soak goes on
                failed.append(f"cycle {i}: {exc}")
            took, took_cpu = time.perf_counter() - start, time.process_time() - cpu
            shutil.rmtree(results, ignore_errors=True)
            if i % 25 == 0:
                print(f"cycle {i}: {took:.2f} s, cpu {took_cpu:.3f} s, "
                      f"load {os.getloadavg()[0]:.1f}", file=sys.stderr, flush=True)  # fmt: skip
            return took, took_cpu

        totals = counts()
        first = cycle(0)  # one-time costs (imports, the store's connection) before counting
        after_first, totals_first = machine(), counts()
        measured = [first] + [cycle(i) for i in range(1, n)]
        after, totals_end = machine(), counts()
    leaked = {k: sorted(v) for k, v in ours(after, [exp.name]).items() if v}
    new_since_first = {k: sorted(after[k] - after_first[k]) for k in ("namespaces", "interfaces",
                                                                      "mounts")}  # fmt: skip
    drawn = "each run's report drawn after it" if report else "no report drawn"
    print(f"{n} swap-in/swap-out cycles of the dumbbell (6 nodes, 5 shaped links, controller; "
          f"{drawn})")  # fmt: skip
    table(["figure", "before", "after cycle 1", f"after cycle {n}"],
          [[k, totals[k], totals_first[k], totals_end[k]] for k in totals])  # fmt: skip
    print(f"left by the experiment: {leaked or 'nothing'}")
    print(f"failed cycles: {len(failed)}" + "".join(f"\n  {f}" for f in failed))
    print(f"new since cycle 1 (the machine's, any owner): "
          f"{ {k: len(v) for k, v in new_since_first.items()} }")  # fmt: skip
    window = min(100, n // 2)
    rows, ratios = [], {}
    for column, label in ((0, "wall"), (1, "cpu")):
        series = [m[column] for m in measured]
        early, late = series[:window], series[-window:]
        ratios[label] = statistics.median(late) / statistics.median(early)
        for name, part in ((f"first {window}", early), (f"last {window}", late)):
            rows.append(
                [
                    name,
                    label,
                    f"{statistics.median(part):.3f}",
                    f"{statistics.mean(part):.3f}",
                    f"{sorted(part)[int(0.9 * window)]:.3f}",
                ]
            )
    table(["cycles", "time", "median s", "mean s", "p90 s"], rows)
    print(
        f"last/first median ratio: wall {ratios['wall']:.3f}, cpu {ratios['cpu']:.3f} "
        f"(target within 0.90-1.10; the wall ratio also carries the shared machine's load)"
    )
    clean = not leaked and not failed and totals_end["own fds"] <= totals_first["own fds"]
    return 0 if clean else 1


# -- SIGKILL of swap-in ------------------------------------------------------------------------


class Foreign:
    """A namespace, a bridge and a veth pair nestbed never made: cleanup must not touch them."""

    NAMES = ("s17fns", "s17fbr", "s17fva", "s17fvb")

    def __enter__(self) -> Foreign:
        self.remove()
        ns, br, va, vb = self.NAMES
        for argv in (["ip", "netns", "add", ns], ["ip", "link", "add", br, "type", "bridge"],
                     ["ip", "link", "add", va, "type", "veth", "peer", "name", vb]):  # fmt: skip
            subprocess.run(argv, check=True)
        return self

    def present(self) -> bool:
        ns, *links = self.NAMES
        return os.path.exists(f"/run/netns/{ns}") and all(
            os.path.exists(f"/sys/class/net/{x}") for x in links
        )

    def remove(self) -> None:
        ns, br, va, _ = self.NAMES
        for argv in (["ip", "netns", "del", ns], ["ip", "link", "del", br],
                     ["ip", "link", "del", va]):  # fmt: skip
            subprocess.run(argv, stderr=subprocess.DEVNULL, check=False)

    def __exit__(self, *_: object) -> None:
        self.remove()


def kill(n: int, seed: int) -> int:
    rng = random.Random(seed)
    name = "soakkill"
    with tempfile.TemporaryDirectory() as tmp, Foreign() as foreign:
        source = Path(tmp) / f"{name}.ns"
        source.write_text((EXAMPLES / "dumbbell.ns").read_text())
        db = Path(tmp) / "s.db"
        assert done(nestbed(db, "create", str(source)))[0] == 0  # cleanup NAME needs the name
        durations = []
        for i in range(2):  # how long until the experiment is active, to place the kills in
            start = time.monotonic()
            process = nestbed(db, "swapin", str(source), "--results", f"{tmp}/w{i}")
            until(lambda p=process: _state(db, name) == "active" or p.poll() is not None)
            durations.append(time.monotonic() - start)
            code, _, err = done(process)
            assert code == 0, err
            assert done(nestbed(db, "swapout", name))[0] == 0
        span = statistics.median(durations)
        rows, bad = [], 0
        try:
            for i in range(n):
                before = machine()
                at = rng.uniform(0, span)
                process = nestbed(db, "swapin", str(source), "--results", f"{tmp}/k{i}")
                time.sleep(at)
                process.send_signal(signal.SIGKILL)
                process.wait()
                code, out, err = done(nestbed(db, "cleanup", name))
                finished = _state(db, name) == "active"
                if finished:
                    # The swap-in was done (killed while it printed): a live experiment, which
                    # cleanup rightly spared. Swapped out here, it must leave nothing either.
                    done(nestbed(db, "swapout", name))
                after = machine()
                left = {k: v for k, v in ours(after, [name]).items() if v}
                same = {k: before[k] == after[k] for k in ("namespaces", "interfaces", "mounts")}
                state = _state(db, name)
                settled = state in ("swapped", "defined", None)
                ok = not left and foreign.present() and code == 0 and settled
                bad += not ok
                said = (out.strip().splitlines() or [err.strip()])[0][:60]
                state = "active, then swapped out" if finished else state
                rows.append([i, f"{at:.2f}", state, "yes" if foreign.present() else "NO",
                             sum(map(len, left.values())), "yes" if all(same.values()) else "no",
                             said])  # fmt: skip
        finally:  # a swap-in killed after it was done, and a bench stopped midway
            if _state(db, name) == "active":
                done(nestbed(db, "swapout", name))
    print(
        f"SIGKILL of `nestbed swapin` (active {span:.2f} s after its start here), then "
        f"`nestbed cleanup {name}`; seed {seed}"
    )
    table(["#", "kill at s", "state", "foreign kept", "left", "machine same*", "cleanup said"],
          rows)  # fmt: skip
    print("* namespaces, interfaces and mounts of the whole machine, other users included")
    print(f"{n - bad} of {n} left nothing of the experiment and kept the foreign objects")
    return 1 if bad else 0


def _state(db: Path, name: str) -> str | None:
    with Store.open(str(db)) as store:
        record = store.find(name)
        return str(record.state) if record else None


# -- many at once -------------------------------------------------------------------------------


def many(n: int) -> int:
    names = [f"soakmany{i}" for i in range(n)]
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "s.db"
        files = []
        for name in names:
            (Path(tmp) / f"{name}.ns").write_text((EXAMPLES / "linear.ns").read_text())
            files.append(Path(tmp) / f"{name}.ns")
        # One store, so swap-ins race on it as well as on the machine.
        first = done(nestbed(db, "create", str(files[0])))
        assert first[0] == 0, first[2]
        starting = [nestbed(db, "swapin", str(f), "--results", f"{tmp}/{f.stem}") for f in files]
        swapped = [done(p) for p in starting]
        rows, bad = [], 0
        try:
            before = {name: _linktest(db, name) for name in names}
            cleaned = {name: done(nestbed(db, "cleanup", name)) for name in names}
            for name, swap in zip(names, swapped, strict=True):
                status = done(nestbed(db, "status", name, "--json"))
                after = _linktest(db, name)
                alive = status[0] == 0 and _state(db, name) == "active"
                ok = swap[0] == 0 and alive and cleaned[name][0] == 0
                bad += not ok
                rows.append([name, "ok" if swap[0] == 0 else swap[2].strip()[:50],
                             before[name], cleaned[name][1].strip()[:45],
                             "yes" if alive else "NO", after])  # fmt: skip
        finally:
            for name in names:
                done(nestbed(db, "swapout", name))
    print(
        f"{n} experiments (3-node chains) swapped in at once, linktest level 3 on each, "
        "`nestbed cleanup NAME` of each"
    )
    table(["experiment", "swap-in", "linktest before", "cleanup said", "alive after",
           "linktest after"], rows)  # fmt: skip
    return 1 if bad else 0


def _linktest(db: Path, name: str) -> str:
    code, out, err = done(nestbed(db, "linktest", name, "--level", "3", "--json"))
    try:
        report = json.loads(out)
        c = report["counts"]
    except (ValueError, KeyError):
        return f"error {code}: {err.strip()[:40]}"
    failed = sorted({f"L{x['level']}" for x in report["checks"] if x["verdict"] == "fail"})
    which = f" ({','.join(failed)})" if failed else ""
    return f"{c['pass']} pass, {c['fail']} fail{which}, {c['skip']} skip"


# -- signals ------------------------------------------------------------------------------------


def signals(n: int, seed: int, commands: list[str] | None = None) -> int:
    rng = random.Random(seed)
    rows, bad = [], 0
    kinds = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
    for command in commands or ("run", "sweep", "simulate", "linktest", *INSTRUMENTS):
        for i in range(n):
            signum = kinds[i % 3]
            at = rng.uniform(0.5, 6.0)
            with tempfile.TemporaryDirectory() as tmp:
                row = _signalled(command, signum, at, Path(tmp), i)
            bad += row[-1] != "ok"
            rows.append([command, signum.name, f"{at:.2f}", *row])
    print(f"a signal at a random moment (0.5-6 s after the command starts; seed {seed})")
    table(["command", "signal", "at s", "exit", "manifest", "left", "verdict"], rows)
    return 1 if bad else 0


# The instruments, each in its shortest form: they name their own experiments, which the
# bench finds in the command's (temporary) store.
INSTRUMENTS = {
    "calibrate": ["calibrate", "--quick", "--topologies", "link", "--profiles", "untuned"],
    "validate": ["validate", "--quick"],
    "study": ["study", "onedrop"],
}


def _signalled(command: str, signum: int, at: float, tmp: Path, i: int) -> list[Any]:
    if command in INSTRUMENTS:
        return _instrument_signalled(INSTRUMENTS[command], signum, at, tmp)
    name = f"soaksig{command}{i}"
    source = tmp / f"{name}.ns"
    # The dumbbell runs 15 s; the sweep sweeps armada's transfer (2 MB at 1 or 2 Mb/s).
    source.write_text(
        (EXAMPLES / ("armada.ns" if command == "sweep" else "dumbbell.ns")).read_text()
    )
    db, results = tmp / "s.db", tmp / "results"
    if command == "linktest":
        code, _, err = done(nestbed(db, "swapin", str(source), "--results", str(results)))
        assert code == 0, err
        argv = ["linktest", name, "--level", "4"]
    elif command == "sweep":
        argv = ["sweep", str(source), "--grid", "bw=1Mb,2Mb", "--results", str(results)]
    elif command == "simulate":
        argv = ["simulate", str(source), "--results", str(results)]
    else:
        argv = ["run", str(source), "--results", str(results)]
    process = nestbed(db, *argv)
    time.sleep(at)
    process.send_signal(signum)
    code, _, err = done(process)
    if command == "linktest":
        alive = _state(db, name) == "active"
        done(nestbed(db, "swapout", name))
    folders = [results] if command != "sweep" else sorted((results / "runs").glob("*"))
    outcomes = [_outcome(f) for f in folders]
    names = [name] if command != "sweep" else [f"{name}-{f.name}" for f in folders]
    left = sum(len(v) for v in ours(machine(), names).values())
    if command == "simulate" and shutil.which("ns") is None:
        return [code, "(no ns-2 here)", left, "skip"]
    expected = f"interrupted ({signal.Signals(signum).name})"
    # -signum: the signal came while Python was still starting, before nestbed handles it,
    # and killed the process before it made anything.
    ok = code in (128 + signum, -signum) and left == 0
    if command in ("run", "sweep", "simulate"):
        # A run that had not begun has no manifest; one that had says it was interrupted.
        ok = ok and all(o in (None, expected) for o in outcomes)
    if command == "linktest":
        ok = ok and alive  # the experiment is not linktest's to swap out
    return [code, ",".join(str(o) for o in outcomes) or "-", left, "ok" if ok else "FAIL"]


def _instrument_signalled(argv: list[str], signum: int, at: float, tmp: Path) -> list[Any]:
    """An instrument signalled: exit code, every run's manifest under its results, and what
    its experiments left."""
    db, results = tmp / "s.db", tmp / "results"
    process = nestbed(db, *argv, "--results", str(results))
    time.sleep(at)
    process.send_signal(signum)
    code, _, _ = done(process)
    names, states = [], []
    if db.exists():
        with Store.open(str(db)) as store:
            for record in store.list():
                names.append(record.name)
                states.append(str(record.state))
    outcomes = [_outcome(f.parent) for f in sorted(results.rglob("manifest.json"))]
    left = sum(len(v) for v in ours(machine(), names).values())
    expected = f"interrupted ({signal.Signals(signum).name})"
    # Runs the instrument finished before the signal are complete (or halted by their own
    # `$ns halt`); the one it stopped says so;
    # none may look complete without being so, or be left running.
    ok = code in (128 + signum, -signum) and left == 0 and "active" not in states
    ok = ok and all(o in ("completed", "halted", expected) for o in outcomes)
    shown = ",".join(sorted({str(o) for o in outcomes})) or "-"
    return [code, shown, left, "ok" if ok else "FAIL"]


def _outcome(folder: Path) -> str | None:
    try:
        return json.loads((folder / "manifest.json").read_text()).get("outcome")
    except (OSError, ValueError):
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "suite", nargs="?", choices=["cycles", "kill", "many", "signals"],
        help="one suite (default: every one, as `make bench` runs them)",
    )  # fmt: skip
    parser.add_argument("--n", type=int, help="cycles, kills, experiments or signals per command")
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument(
        "--no-report",
        action="store_true",
        help="cycles: no report drawn after each run (in a tight loop the detached drawings "
        "pile up faster than they finish, and every process on the machine costs swap-out a "
        "look in /proc)",
    )
    parser.add_argument("--commands", help="signals: only these commands, comma-separated")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("the soak suite builds namespaces: run it as root")
    suites = {
        "cycles": lambda: cycles(args.n or 1000, not args.no_report),
        "kill": lambda: kill(args.n or 50, args.seed),
        "many": lambda: many(args.n or 8),
        "signals": lambda: signals(
            args.n or 3, args.seed, args.commands.split(",") if args.commands else None
        ),
    }
    chosen = [args.suite] if args.suite else list(suites)
    sys.exit(max(suites[name]() or 0 for name in chosen))


if __name__ == "__main__":
    main()
