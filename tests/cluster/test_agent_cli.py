"""`nestbed agent` refuses what cannot make an agent in one sentence, before serving."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"


def agent(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(SRC), "COLUMNS": "200"}
    argv = [sys.executable, "-m", "nestbed", "agent", *args]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--scheduler", "10.0.0.1:8786"), "--scheduler 10.0.0.1:8786 is no address; write tcp://HOST:8786"),
        (("--scheduler", "tcp://10.0.0.1:8786", "--host", "pc.lab"),
         "host name 'pc.lab' may hold only letters, digits, '-' and '_'; give --host"),
        (("--scheduler", "tcp://10.0.0.1:8786", "--nic", "fast"), "--nic: bandwidth 'fast' is not a valid bandwidth"),
        (("--scheduler", "tcp://10.0.0.1:8786", "--linkd-pps", "fast"),
         "--linkd-pps fast is no packet rate; give packets per second, or 'measure'"),
    ],
)  # fmt: skip
def test_what_cannot_make_an_agent_is_refused_in_one_sentence(args, message):
    result = agent(*args)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"error: {message}"), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
