"""Benchmark: does the machine itself pause, and do validate's delay rows that miss their
goal coincide with those pauses?

A delay row of ``nestbed validate`` (1 000 frames at 5 000-10 000 a second, 0.1-0.2 s) now and
then comes out with a standard deviation of milliseconds, linkd's own lateness over the row
hundreds of µs, where the other runs measure a few µs. This bench tells apart what nestbed can
mend from what the machine does:

- **The machine's pauses.** A meter per CPU (a process pinned to it, in the real-time class at
  the highest priority, so that nothing in the guest comes before it) sleeps 1 ms at a time and
  writes down each wake-up later than ``--pause-us`` (default ``PAUSE_US``), with its time on
  the monotonic clock. A wake-up that late at that priority means the CPU did not run the
  guest at all: the hypervisor held it (a virtual machine's steal time), or the kernel ran with
  preemption off.
- **Idle:** the meters alone for ``IDLE_S`` seconds, nothing else running: the machine's own
  pauses per minute, and the steal time the kernel accounted (``/proc/stat``).
- **Delay rows:** validate's ``--quick`` delay rows (0, 5 and 50 ms; 64 and 1518 bytes), one at
  a time through one experiment, ``--runs`` times, with the meters running: each row's error,
  standard deviation and linkd's own lateness, and the pauses while its frames were on their
  way (from the first one's departure to the last echo's return, by the receiver's first and
  last arrival times and the link's delay, a millisecond either side). A pause of the whole
  machine is counted once per CPU.

It prints, over all rows, how many missed the stdev goal (50 µs) and how many of those had a
pause inside them. The meters cost each CPU a wake-up a millisecond, which may change how
deeply the CPUs idle, so the rows' figures here are for their causes, not validate's own.

Needs root. ``--runs N`` (default 3), ``--idle-s S`` (default 30), ``--pause-us U``
(default 500), ``--interval-us U`` (each meter's sleep, default 1000: a shorter pause is
seen only when it covers a wake-up), ``--keep DIR`` (each row's receiver log).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RUNS = 3
IDLE_S = 30.0
#: A wake-up this late (µs) is a pause: the meter's own wake-up takes tens of µs.
PAUSE_US = 500
#: The meter's sleep, µs.
INTERVAL_US = 1000
#: The least pause and sleep the options take, µs.
MIN_US = 100
#: validate's goal for a delay row's standard deviation, µs (issue 24).
STDEV_GOAL_US = 50.0
#: linkd late by more than this on average over a row (µs): the row stalled.
LATE_US = 50.0


@dataclass(frozen=True)
class Metering:
    """What the meters count: a wake-up ``pause_us`` late, each sleeping ``interval_us``. A
    pause shorter than the sleep is seen only when it covers a wake-up."""

    pause_us: int = PAUSE_US
    interval_us: int = INTERVAL_US


@dataclass(frozen=True)
class Pause:
    cpu: int
    end_ns: int  # CLOCK_MONOTONIC, when the meter woke
    length_ns: int  # how much later than asked

    @property
    def start_ns(self) -> int:
        return self.end_ns - self.length_ns


def meter(cpu: int, parent: int, pause_us: int, interval_us: int) -> None:
    """The meter's own process: pinned to ``cpu``, highest real-time priority, sleeping
    ``interval_us`` at a time; prints ``end_ns late_ns`` for each wake-up ``pause_us`` late, until
    SIGTERM (after a first line, ``ready``), or once its ``parent`` is gone (a bench killed
    outright must not leave a process at that priority behind)."""
    os.sched_setaffinity(0, {cpu})
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(99))
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    interval, threshold = interval_us * 1000, pause_us * 1000
    print("ready", flush=True)
    found = []
    while not stop and os.getppid() == parent:
        asked = time.monotonic_ns()
        time.sleep(interval_us / 1e6)
        woke = time.monotonic_ns()
        late = woke - asked - interval
        if late >= threshold:
            found.append((woke, late))
    print("\n".join(f"{end} {late}" for end, late in found), flush=True)


@contextlib.contextmanager
def meters(metering: Metering = Metering()) -> Iterator[list[Pause]]:
    """One meter per CPU this process may use, running while the block runs; the list is
    filled with their pauses when it ends. Every meter is stopped and reaped however the
    block ends, before any error of theirs is raised."""
    pauses: list[Pause] = []
    procs: dict[int, subprocess.Popen[str]] = {}
    argv = [sys.executable, __file__, "--meter"]
    try:
        for cpu in sorted(os.sched_getaffinity(0)):
            procs[cpu] = subprocess.Popen([*argv, str(cpu), str(os.getpid()),
                                           str(metering.pause_us), str(metering.interval_us)],
                                          stdout=subprocess.PIPE, text=True)  # fmt: skip
        for cpu, proc in procs.items():
            if proc.stdout is None or proc.stdout.readline().strip() != "ready":
                raise RuntimeError(f"the pause meter on CPU {cpu} did not start")
        yield pauses
    finally:
        failed = _reap(procs, pauses)
    if failed:
        raise RuntimeError(f"the pause meter on CPU {failed[0]} failed")


def _reap(procs: dict[int, subprocess.Popen[str]], pauses: list[Pause]) -> list[int]:
    """Stops every meter (all asked first, then each waited for, killed if it does not end),
    adds their pauses; the CPUs whose meter failed."""
    for proc in procs.values():
        proc.terminate()
    failed = []
    for cpu, proc in procs.items():
        try:
            out, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        if proc.returncode != 0:
            failed.append(cpu)
            continue
        for line in out.split("\n"):
            if line.strip() and line.strip() != "ready":
                end, late = map(int, line.split())
                pauses.append(Pause(cpu, end, late))
    return failed


def steal_ms() -> float:
    """The steal time the kernel has accounted on all CPUs, ms (``/proc/stat``)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    return int(fields[8]) * 1000 / os.sysconf("SC_CLK_TCK")


def summary(pauses: list[Pause]) -> str:
    if not pauses:
        return "none"
    longest = max(p.length_ns for p in pauses) / 1e6
    per_cpu = {c: sum(1 for p in pauses if p.cpu == c) for c in sorted({p.cpu for p in pauses})}
    on = ", ".join(f"CPU {c}: {n}" for c, n in per_cpu.items())
    return f"{len(pauses)} ({on}), longest {longest:.1f} ms"


def idle(seconds: float, metering: Metering) -> None:
    before = steal_ms()
    with meters(metering) as pauses:
        time.sleep(seconds)
    stolen = steal_ms() - before
    print(f"\nidle, {seconds:.0f} s, nothing else running (load {os.getloadavg()[0]:.2f}):")
    print(f"  pauses ≥ {metering.pause_us} µs: {summary(pauses)}; "
          f"≥ 1 ms: {sum(1 for p in pauses if p.length_ns >= 1e6)}, "
          f"≥ 5 ms: {sum(1 for p in pauses if p.length_ns >= 5e6)}; "
          f"steal time accounted {stolen:.0f} ms")  # fmt: skip


def rows(runs: int, tmp: Path, metering: Metering, keep: Path | None) -> list[dict]:
    """validate's quick delay rows, one at a time, ``runs`` times, with the meters running;
    each row with the pauses inside it. Each row's receiver log is copied into ``keep``, when
    given (``run<N>-<delay>ms-<bytes>B.csv``)."""
    from nestbed.studies.validate import Bench, Settings, measure_delay

    quick = Settings.quick()
    measured = []
    with Bench(tmp, name=f"bench-pauses-{os.getpid()}") as bench:
        received = _receivers(bench, keep is not None)
        for run in range(runs):
            before = steal_ms()
            rows = []
            with meters(metering) as pauses:
                for delay_ms in quick.delays_ms:
                    for size in quick.sizes:
                        one = Settings(delays_ms=(delay_ms,), sizes=(size,),
                                       delay_packets=quick.delay_packets)  # fmt: skip
                        (row,) = measure_delay(bench, one, lambda _: None)
                        got, log = received[-1]
                        rows.append((row, _in_flight(got, delay_ms), log))
            stolen = steal_ms() - before
            print(f"run {run + 1}: pauses {summary(pauses)}; steal {stolen:.0f} ms", flush=True)
            for row, (start, end), log in rows:
                inside = [p for p in pauses if p.end_ns > start and p.start_ns < end]
                measured.append({**row, "run": run + 1, "pauses": inside})
                if keep:
                    name = f"run{run + 1}-{row['delay_ms']:g}ms-{row['frame_bytes']}B.csv"
                    (keep / name).write_text(log)
    return measured


def _receivers(bench: Any, logged: bool) -> list[tuple[dict, str]]:
    """The receiver's summary of each probe the bench runs from now on, in order (its first
    and last arrival times bound a row's frames), with its log if ``logged`` (else "")."""
    received: list[tuple[dict, str]] = []
    probe = bench.probe

    def keeping(*args: Any, **kwargs: Any) -> tuple[dict, dict, Path | None]:
        sent, got, log = probe(*args, **{**kwargs, "log": logged or kwargs.get("log", False)})
        received.append((got, log.read_text() if log else ""))
        return sent, got, log

    bench.probe = keeping
    return received


def _in_flight(got: dict, delay_ms: float) -> tuple[int, int]:
    """When a delay row's frames were on their way (CLOCK_MONOTONIC ns): from the first
    one's departure (its arrival less the link's delay and a millisecond) to the last echo's
    arrival back (the last arrival plus the delay and a millisecond)."""
    margin = round((delay_ms + 1) * 1e6)
    return got["first_recv_ns"] - margin, got["last_recv_ns"] + margin


def report(measured: list[dict]) -> None:
    print(f"\n{'run':>3}{'delay ms':>9}{'bytes':>6}{'error µs':>10}{'stdev µs':>10}"
          f"{'linkd late µs':>14}{'>50 µs late %':>14}  pauses inside the row")  # fmt: skip
    for r in measured:
        late = r["linkd_late_mean_us"]
        print(f"{r['run']:>3}{r['delay_ms']:>9g}{r['frame_bytes']:>6}"
              f"{r['one_way_error_us']:>+10.1f}{r['one_way_stdev_us']:>10.1f}"
              f"{late if late is not None else float('nan'):>14.1f}"
              f"{r['linkd_late_50us_pct'] or 0:>14.2f}  {summary(r['pauses'])}")  # fmt: skip
    missed = [r for r in measured if r["one_way_stdev_us"] > STDEV_GOAL_US]
    paused = [r for r in measured if r["pauses"]]
    print(f"\nrows: {len(measured)}; stdev over {STDEV_GOAL_US:.0f} µs: {len(missed)}, of them "
          f"with a pause inside: {sum(1 for r in missed if r['pauses'])}; rows with a pause: "
          f"{len(paused)}, of them over {STDEV_GOAL_US:.0f} µs: "
          f"{sum(1 for r in paused if r['one_way_stdev_us'] > STDEV_GOAL_US)}")  # fmt: skip
    stalled = [r for r in measured if (r["linkd_late_mean_us"] or 0) > LATE_US]
    print(f"rows where linkd itself was over {LATE_US:.0f} µs late on average: "
          f"{len(stalled)}, of them with a pause inside: "
          f"{sum(1 for r in stalled if r['pauses'])}; longest pause inside each: "
          + (", ".join(f"{max((p.length_ns for p in r['pauses']), default=0) / 1e6:.1f} ms"
                       for r in stalled) or "-"))  # fmt: skip
    ok = [r["one_way_stdev_us"] for r in measured if not r["pauses"]]
    if ok:
        print(f"stdev of the rows without a pause: median {statistics.median(ok):.1f} µs, "
              f"largest {max(ok):.1f} µs")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=RUNS)
    parser.add_argument("--idle-s", type=float, default=IDLE_S)
    parser.add_argument("--pause-us", type=int, default=PAUSE_US,
                        help="a wake-up this late is a pause (µs)")  # fmt: skip
    parser.add_argument("--keep", type=Path, help="a folder for each row's receiver log")
    parser.add_argument("--interval-us", type=int, default=INTERVAL_US,
                        help="each meter's sleep (µs)")  # fmt: skip
    # CPU, parent, pause µs, interval µs
    parser.add_argument("--meter", type=int, nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.meter is not None:
        meter(*args.meter)
        return
    if os.geteuid() != 0:
        sys.exit("bench/pauses.py needs root (namespaces, and the meters' real-time class)")
    if min(args.pause_us, args.interval_us) < MIN_US:
        # Shorter, the meters at the highest priority would all but hold their CPUs.
        parser.error(f"--pause-us and --interval-us are at least {MIN_US}")
    from nestbed.lifecycle import signals

    # SIGTERM and SIGHUP stop it as Ctrl-C does: the meters and the experiment go first.
    signals.install()
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
    metering = Metering(args.pause_us, args.interval_us)
    print(f"pauses: wake-ups of a highest-priority real-time process per CPU, sleeping "
          f"{metering.interval_us} µs, later than {metering.pause_us} µs")  # fmt: skip
    idle(args.idle_s, metering)
    with tempfile.TemporaryDirectory(prefix="nestbed-bench-pauses-") as tmp:
        measured = rows(args.runs, Path(tmp), metering, args.keep)
    report(measured)


if __name__ == "__main__":
    main()
