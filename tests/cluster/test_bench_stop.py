"""bench/cluster.py stopped by SIGTERM or SIGHUP (timeout, a closed SSH session) removes the
simulated hosts it built, as after Ctrl-C: before, the signal killed it at once and left
their namespaces, the underlay's uplink and their agents behind."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from simulated import SRC, interfaces, namespaces, processes

from nbtest import until
from nestbed.backend import linux
from nestbed.backend.plan import experiment_tag

pytestmark = pytest.mark.root
BENCH = Path(__file__).resolve().parents[2] / "bench" / "cluster.py"


def _bench_module():  # type: ignore[no-untyped-def]
    """bench/cluster.py as a module (its experiment's name), under a name of its own."""
    spec = importlib.util.spec_from_file_location("bench_cluster", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_the_cluster_bench_stopped_by_a_signal_removes_its_simulated_hosts(sig):
    bench = subprocess.Popen(
        [sys.executable, str(BENCH), "--linktest"], env={**os.environ, "PYTHONPATH": str(SRC)},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    made = f"i21-{bench.pid % 100000}-"  # the names of its simulated hosts (``Machines``)

    def agents() -> list[str]:
        """Its agents, by their hosts' state folders in their environment (the bench's
        own names; its subnet is whichever was free)."""
        return [cmd for cmd in processes(f"/run/nestbed-{made}", where="environ")
                if " agent " in cmd]  # fmt: skip

    try:
        # Stopped once its three hosts' agents run, joining the scheduler or joined.
        until(lambda: len(agents()) >= 3 or bench.poll() is not None,
              "the bench's agents to start")  # fmt: skip
        assert bench.poll() is None, bench.stderr.read() if bench.stderr else ""
        bench.send_signal(sig)
        _, stderr = bench.communicate(timeout=180)
        assert bench.returncode == 128 + sig, stderr
        assert f"stopped by {signal.Signals(sig).name}" in stderr
        assert not [n for n in namespaces() if n.startswith(made)]
        assert f"i21g{bench.pid % 100000}" not in interfaces()
        assert not agents() and not processes(f"/run/nestbed-{made}")
        assert not list(Path("/run").glob(f"nestbed-{made}*"))
    finally:
        _remove_what_it_left(bench, made)


def _remove_what_it_left(bench: subprocess.Popen, made: str) -> None:
    """Whatever the bench left, killed if it still runs: only its own names."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(bench.pid, signal.SIGKILL)
    bench.wait()
    # The underlay's linkd (a session of its own, its state folder in its command line) and
    # the agents (their hosts' state folders in their environment).
    for pid in _pids(f"/run/nestbed-{made}"):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    gateway = f"i21g{bench.pid % 100000}"
    shown = subprocess.run(["ip", "-4", "-br", "addr", "show", "dev", gateway],
                           capture_output=True, text=True)  # fmt: skip
    address = shown.stdout.split()[2].split("/")[0] if shown.returncode == 0 else None
    subprocess.run(["ip", "link", "delete", gateway], capture_output=True)
    for name in namespaces():
        if name.startswith(made):
            subprocess.run(["ip", "netns", "delete", name], capture_output=True)
    for folder in Path("/run").glob(f"nestbed-{made}*"):
        shutil.rmtree(folder, ignore_errors=True)
    # Its experiment, if the bench was killed with it swapped in: namespaces and cgroups
    # are the whole machine's, and its name is the bench's own. Namespaces a host made but
    # had not marked yet are known to no one but by that name (their hosts' claims were in
    # the state folders removed above).
    cluster = _bench_module()
    tag = experiment_tag(cluster.tree_name(cluster.LINKTEST[0], bench.pid))
    linux.remove_leftovers({tag})
    for name in namespaces():
        if name.startswith(f"nb-{tag}"):
            subprocess.run(["ip", "netns", "delete", name], capture_output=True)
    for folder in Path(tempfile.gettempdir()).glob("nb-scheduler-*"):  # its scheduler's
        with contextlib.suppress(OSError):
            if address and f"//{address}:" in (folder / "scheduler.json").read_text():
                shutil.rmtree(folder, ignore_errors=True)


def _pids(needle: str) -> list[int]:
    """The processes whose command line or environment names ``needle``."""
    found = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if entry.name.isdigit() and any(
                needle.encode() in (entry / part).read_bytes() for part in ("cmdline", "environ")
            ):
                found.append(int(entry.name))
    return found
