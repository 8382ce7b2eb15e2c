"""The core works without the studies extra (the pub/sub study's libraries, one of which
compiles C), and the study says which extra it needs."""

from __future__ import annotations

import subprocess
import sys

from nbtest import EXAMPLES

EXTRA = ("cyclonedds", "msgpack", "zstandard", "lz4", "lzo")
# Each of the extra's modules made unimportable, as on a machine without the extra.
WITHOUT = f"import sys\nfor m in {EXTRA!r}: sys.modules[m] = None\n"


def _nestbed(*args: str) -> subprocess.CompletedProcess:
    code = WITHOUT + "sys.argv = ['nestbed', *sys.argv[1:]]\nfrom nestbed.cli import main_entry\n"
    code += "main_entry()\n"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=120)  # fmt: skip


def test_parsing_needs_nothing_of_the_studies_extra():
    done = _nestbed("parse", "--json", str(EXAMPLES / "pubsub.ns"))
    assert done.returncode == 0, done.stderr
    assert '"name": "pubsub"' in done.stdout


def test_the_pubsub_study_without_the_extra_names_it_in_one_sentence():
    done = _nestbed("study", "pubsub", "--quick")
    assert done.returncode == 3
    assert done.stderr.strip().startswith("error: the pub/sub study needs cyclonedds")
    assert "pip install 'nestbed[studies]'" in done.stderr
    assert "Traceback" not in done.stderr
