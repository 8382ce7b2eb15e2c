"""bench/pauses.py's meters run in the real-time class at the highest priority, one per CPU:
none may outlive the bench, however it ends (an error in the measured block, the bench
killed outright), and each reports a pause it was made to see."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nbtest import until

pytestmark = pytest.mark.root
BENCH = Path(__file__).resolve().parents[1] / "bench" / "pauses.py"


def _bench_module():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("bench_pauses", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


def _meters() -> set[int]:
    """The pids of the meters running now, started by this process's bench module."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if str(BENCH).encode() in cmd and b"--meter" in cmd:
                found.add(int(entry.name))
    return found


def _gone(pids: set[int]) -> bool:
    return not any(Path(f"/proc/{p}").exists() for p in pids)


def test_the_meters_stop_when_the_measured_block_fails():
    bench = _bench_module()
    before = _meters()
    with pytest.raises(ValueError, match="the measured block failed"), bench.meters():
        started = _meters() - before
        assert len(started) == len(os.sched_getaffinity(0))
        raise ValueError("the measured block failed")
    assert _gone(started)


def test_a_meter_whose_bench_is_killed_outright_ends():
    # A stand-in for the bench: starts one meter on CPU 0 with itself as its parent, then
    # is killed by SIGKILL (no cleanup of its own).
    parent = subprocess.Popen(
        [sys.executable, "-c",
         "import os, subprocess, sys, time\n"
         f"m = subprocess.Popen([sys.executable, {str(BENCH)!r}, '--meter', '0', str(os.getpid()), '500', '1000'],"
         " stdout=subprocess.PIPE, text=True)\n"
         "m.stdout.readline()\n"
         "print(m.pid, flush=True)\n"
         "time.sleep(600)\n"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert parent.stdout is not None
        meter = int(parent.stdout.readline())
        assert Path(f"/proc/{meter}").exists()
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    until(lambda: _gone({meter}), "the orphaned meter to end")


def test_a_meter_reports_the_time_it_was_kept_from_running():
    """SIGSTOP holds the meter as a paused CPU would: it wakes that much late."""
    bench = _bench_module()
    before = _meters()
    with bench.meters() as pauses:
        (meter, *_) = sorted(_meters() - before)
        stopped = time.monotonic_ns()
        os.kill(meter, signal.SIGSTOP)
        time.sleep(0.05)
        os.kill(meter, signal.SIGCONT)
    # At least 50 ms held, less the one sleep it was in.
    assert any(p.length_ns >= 45_000_000 and p.end_ns > stopped for p in pauses), pauses
