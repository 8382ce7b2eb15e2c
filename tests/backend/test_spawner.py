"""nestbed-spawn through its client (``backend.spawner``): programs started outside the
caller's process, with the time their process began, their output in their files, their
status and their process group. No root needed: the programs are plain local commands."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator

import pytest

from nestbed.backend.spawner import Spawner
from nestbed.binaries import built_binary

ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "WHO": "spawned"}
WAIT_S = 30  # a failsafe: how long a test waits for what must happen


@pytest.fixture
def spawner() -> Iterator[Spawner]:
    made = Spawner(built_binary("nestbed-spawn"))
    yield made
    made.close()


def test_closing_ends_nestbed_spawn_on_its_own():
    spawner = Spawner(built_binary("nestbed-spawn"))
    spawner.close()
    assert spawner.process.returncode == 0  # not killed: it saw its socket close
    assert not spawner.reader.is_alive()


def test_a_program_begins_before_its_answer_and_its_output_and_status_come_back(spawner, tmp_path):
    before = time.monotonic()
    started = spawner.start(["sh", "-c", "echo out $WHO; echo err >&2; exit 3"], ENV,
                            tmp_path / "p.stdout", tmp_path / "p.stderr", 1 << 20)  # fmt: skip
    # Its time is nestbed-spawn's clock just after the process began: the caller's clock.
    assert before <= started.started_at <= time.monotonic()
    assert started.pid > 0 and started.pid != os.getpid()
    assert started.wait(WAIT_S) == 3 and started.returncode == 3 and started.poll() == 3
    assert started.output_ended(WAIT_S)
    assert (tmp_path / "p.stdout").read_text() == "out spawned\n"
    assert (tmp_path / "p.stderr").read_text() == "err\n"


def test_a_program_is_its_own_process_group_which_a_signal_reaches_whole(spawner, tmp_path):
    script = "sleep 300 & echo $! > $0.child; wait"
    started = spawner.start(["sh", "-c", script, str(tmp_path / "p")], ENV,
                            tmp_path / "p.stdout", tmp_path / "p.stderr", 1 << 20)  # fmt: skip
    with pytest.raises(subprocess.TimeoutExpired):
        started.wait(0.05)  # it runs: a wait with a timeout says so as Popen's does
    assert os.getpgid(started.pid) == started.pid == os.getsid(started.pid)
    child = int(_written(tmp_path / "p.child"))
    assert os.getpgid(child) == started.pid
    os.killpg(started.pid, signal.SIGTERM)
    assert started.wait(WAIT_S) == -signal.SIGTERM
    assert started.output_ended(WAIT_S)  # the child, which held the output too, is gone


def test_a_command_or_file_that_cannot_be_used_is_an_oserror_naming_it(spawner, tmp_path):
    with pytest.raises(FileNotFoundError) as missing:
        spawner.start(["no-such-command-i18s"], ENV, tmp_path / "o", tmp_path / "e", 1 << 20)
    assert missing.value.filename == "no-such-command-i18s"
    with pytest.raises(FileNotFoundError) as folder:
        spawner.start(["true"], ENV, tmp_path / "no" / "o", tmp_path / "e", 1 << 20)
    assert folder.value.filename == str(tmp_path / "no" / "o")
    assert spawner.start(["true"], ENV, tmp_path / "o", tmp_path / "e", 1 << 20).wait(WAIT_S) == 0


def test_output_beyond_the_limit_is_dropped_and_said_at_the_files_end(spawner, tmp_path):
    started = spawner.start(["sh", "-c", "head -c 5000 /dev/zero"], ENV,
                            tmp_path / "o", tmp_path / "e", 1000)  # fmt: skip
    assert started.wait(WAIT_S) == 0 and started.output_ended(WAIT_S)
    assert (tmp_path / "o").read_bytes() == (
        bytes(1000) + b"\n[nestbed: 4000 more bytes of output were dropped]\n"
    )


def test_programs_still_running_when_nestbed_spawn_dies_end_their_wait_with_no_status(
    spawner, tmp_path
):
    started = spawner.start(["sleep", "300"], ENV, tmp_path / "o", tmp_path / "e", 1 << 20)
    try:
        spawner.process.kill()
        assert started.wait(WAIT_S) is None and started.output_ended(WAIT_S)
        with pytest.raises(Exception, match="nestbed-spawn"):
            spawner.start(["true"], ENV, tmp_path / "o", tmp_path / "e", 1 << 20)
    finally:
        os.killpg(started.pid, signal.SIGKILL)


def _written(path) -> str:
    """The line a program writes into ``path``, once it has."""
    deadline = time.monotonic() + WAIT_S
    while not (path.exists() and path.read_text().endswith("\n")):
        assert time.monotonic() < deadline, f"nothing was written into {path}"
        time.sleep(0.01)
    return path.read_text().strip()
