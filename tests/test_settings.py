"""The user's configuration file (``nestbed.settings``): its entries are defaults of the
environment, an option or variable beats them, and a bad file is named at its line."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from nbtest import until
from nestbed import settings
from nestbed.errors import UserError

SRC = Path(__file__).resolve().parents[1] / "src"


@pytest.fixture
def config(tmp_path, monkeypatch):
    """The configuration file where the user's would be (``$XDG_CONFIG_HOME``), not written
    yet; none of the variables it sets set."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    # Set, then removed: monkeypatch then removes at the end what ``apply`` set meanwhile.
    for variable in [settings.CONFIG_ENV, *settings.ENTRIES.values()]:
        monkeypatch.setenv(variable, "")
        monkeypatch.delenv(variable)
    (tmp_path / "nestbed").mkdir()
    return tmp_path / "nestbed" / "config.yaml"


def test_no_file_sets_nothing(config):
    settings.apply()
    assert not any(v in os.environ for v in settings.ENTRIES.values())


def test_each_entry_becomes_its_variable_unless_the_variable_is_set(config, monkeypatch):
    config.write_text("cluster: tcp://pc1.lab:8786\nserver: https://testbed.lab\n"
                      "project: netlab\ndb: /srv/nestbed/store.db\n")  # fmt: skip
    monkeypatch.setenv("NESTBED_PROJECT", "mine")
    monkeypatch.setenv("NESTBED_DB", "")  # set, if empty: this machine's default store
    settings.apply()
    assert os.environ["NESTBED_CLUSTER"] == "tcp://pc1.lab:8786"
    assert os.environ["NESTBED_SERVER"] == "https://testbed.lab"
    assert os.environ["NESTBED_PROJECT"] == "mine"
    assert os.environ["NESTBED_DB"] == ""


def test_a_relative_store_is_the_files_neighbour_and_a_url_is_kept(config):
    config.write_text("db: stores/lab.db\n")
    assert settings.read(config) == {"db": str(config.parent / "stores" / "lab.db")}
    config.write_text("db: postgresql://lab@db.lab/nestbed\n")
    assert settings.read(config) == {"db": "postgresql://lab@db.lab/nestbed"}


def test_nestbed_config_names_another_file(config, tmp_path, monkeypatch):
    other = tmp_path / "lab.yaml"
    other.write_text("cluster: tcp://10.0.0.1:8786\n")
    monkeypatch.setenv(settings.CONFIG_ENV, str(other))
    settings.apply()
    assert os.environ["NESTBED_CLUSTER"] == "tcp://10.0.0.1:8786"
    monkeypatch.setenv(settings.CONFIG_ENV, str(tmp_path / "missing.yaml"))
    with pytest.raises(UserError, match=r"NESTBED_CONFIG names .*missing.yaml, which does not"):
        settings.apply()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("server: https://a\nclusters: tcp://a:8786\n",
         ":2: 'clusters' is no setting; the file may set cluster, server, project, db"),
        ("cluster: pc1.lab:8786\n", ":1: cluster pc1.lab:8786 is no address; write tcp://HOST:8786"),
        ("db: /a\nproject: [a, b]\n", ":2: project is not a string; write project: VALUE"),
        ("cluster: tcp://a:8786\n  server: x\n", ":2: mapping values are not allowed here"),
        ("- cluster\n", ": the configuration file is a YAML mapping (cluster: ADDR, ...)"),
    ],
)  # fmt: skip
def test_a_bad_file_is_named_at_its_line(config, text, message):
    config.write_text(text)
    with pytest.raises(UserError) as raised:
        settings.apply()
    assert str(raised.value).startswith(f"{config}{message}")


def test_the_cli_takes_its_cluster_from_the_file_and_says_what_is_wrong_with_one(config):
    env = {**os.environ, "PYTHONPATH": str(SRC), "COLUMNS": "200"}
    config.write_text("cluster: tcp://10.0.0.1\n  db: x\n")
    done = subprocess.run([sys.executable, "-m", "nestbed", "hosts"], env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2
    assert (
        done.stderr == f"error: {config}:2: mapping values are not allowed here; "
        "the configuration file is a YAML mapping\n"
    )
    # `nestbed hosts` needs a cluster: the file's is asked (a scheduler no agent has joined
    # yet); an empty variable overrides the file.
    with scheduler(config.parent) as address:
        config.write_text(f"cluster: {address}\n")
        done = subprocess.run([sys.executable, "-m", "nestbed", "hosts"], env=env,
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert done.stdout == "no host has an agent connected to the scheduler yet\n"
        done = subprocess.run([sys.executable, "-m", "nestbed", "hosts"],
                              env={**env, "NESTBED_CLUSTER": ""}, capture_output=True, text=True,
                              timeout=60)  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.startswith("error: hosts lists a cluster's hosts; give --cluster")


@contextlib.contextmanager
def scheduler(folder: Path) -> Iterator[str]:
    """A Dask scheduler on loopback, at a port the kernel picks; its address."""
    address_file = folder / "scheduler.json"
    process = subprocess.Popen(
        [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
         "--port", "0", "--no-dashboard", "--scheduler-file", str(address_file)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        until(lambda: address_file.exists() and address_file.read_text().endswith("}"),
              "the scheduler to listen")  # fmt: skip
        yield json.loads(address_file.read_text())["address"]
    finally:
        process.terminate()
        process.wait(timeout=30)
