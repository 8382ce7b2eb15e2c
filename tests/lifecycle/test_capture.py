"""`Active.capture` against a back end that records what it is asked (no root): each
capture's output goes to a file beside its pcap, so that on a cluster the pcap is the
command's own file, written on the node's host and brought back (``Backend.start_in``); the
capture's seconds count from when every capture listens; nothing but the pcaps is left."""

from __future__ import annotations

import signal
import subprocess
import threading
from pathlib import Path

import pytest

from nbtest import build
from nestbed.backend.plan import plan
from nestbed.errors import EnvironmentProblem
from nestbed.lifecycle.active import Active

TWO = """
nodes: [{name: a}, {name: b}]
links: [{name: ab, members: [a, b]}]
"""


class Capture:
    """A capture as the back end starts it: it says it listens after ``late`` polls, and
    writes its pcap when it is stopped."""

    def __init__(self, argv: list[str], stdout, stderr, late: int, says: str):
        self.argv, self.late, self.says = argv, late, says
        self.stdout, self.stderr = Path(stdout.name), Path(stderr.name)
        self.returncode: int | None = None
        self.listening = threading.Event()

    def poll(self) -> int | None:
        if self.late == 0 and not self.listening.is_set():
            self.stderr.write_text(self.says)
            self.listening.set()
            if "listening" not in self.says:
                self.returncode = 1
        self.late -= 1
        return self.returncode

    def send_signal(self, sig: int) -> None:
        assert sig == signal.SIGINT
        Path(self.argv[self.argv.index("-w") + 1]).write_bytes(b"pcap")
        self.returncode = 0

    def wait(self) -> int:
        return self.returncode if self.returncode is not None else 0


class Recording:
    def __init__(self, late: int = 3, says: str = "listening on eth1, link-type EN10MB"):
        self.started: list[tuple[str, Capture]] = []
        self.late, self.says = late, says

    def run_dir(self, p) -> Path:
        return Path("/nonexistent")  # the controller, never asked here

    def capture_argv(self, ifname: str, path: Path) -> list[str]:
        return ["tcpdump", "-i", ifname, "-w", str(path)]

    def start_in(self, p, node: str, argv: list[str], **popen) -> subprocess.Popen:
        assert set(popen) == {"stdout", "stderr"}
        proc = Capture(argv, popen["stdout"], popen["stderr"], self.late, self.says)
        self.started.append((node, proc))
        return proc  # type: ignore[return-value]


def active(backend) -> Active:
    exp = build(TWO)
    return Active("t", plan(exp), exp, backend)  # type: ignore[arg-type]


def test_each_capture_writes_beside_its_output_and_listens_before_its_seconds_count(tmp_path):
    backend = Recording()
    files = active(backend).capture("ab", tmp_path / "out", 0.01)
    out = (tmp_path / "out").resolve()
    assert files == [out / "ab-a.pcap", out / "ab-b.pcap"]
    for node, proc in backend.started:
        # The pcap is under the folder of the file given as stdout: on a cluster, the
        # command's own file, brought back when it ends.
        assert proc.stdout.parent == out and str(out / f"ab-{node}.pcap") in proc.argv
        assert proc.listening.is_set()  # waited for, before the duration
    assert sorted(p.name for p in out.iterdir()) == ["ab-a.pcap", "ab-b.pcap"]


def test_a_capture_that_ends_at_once_says_why_in_one_sentence_and_leaves_nothing(tmp_path):
    backend = Recording(late=1, says="tcpdump: eth9: No such device exists\n")
    with pytest.raises(EnvironmentProblem) as caught:
        active(backend).capture("ab", tmp_path, 0.01)
    assert str(caught.value) == "the capture ab-a ended: tcpdump: eth9: No such device exists"
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".pcap")) == []
