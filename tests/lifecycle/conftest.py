"""The life cycle over the fake back end, with a recording stand-in for the controller, so
orchestration (states, rollback, next run, cleanup) is tested without root or processes."""

from __future__ import annotations

from typing import Any

import pytest

from nbtest import experiment
from nestbed.backend.fake import FakeBackend
from nestbed.cli import plain
from nestbed.control.client import ControllerClient
from nestbed.lifecycle import Testbed
from nestbed.model.options import RunOptions
from nestbed.store import Store

LINE = "nodes: [{name: a}, {name: b}]\nlinks: [{name: link0, members: [a, b], delay: 10ms}]\n"


class Controllers:
    """What every stand-in controller was asked, by experiment."""

    def __init__(self) -> None:
        self.started: dict[str, list[dict[str, Any]]] = {}
        self.requests: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        self.dead: set[str] = set()  # experiments whose controller "crashed"
        self.fail_launch = False


@pytest.fixture
def controllers(monkeypatch) -> Controllers:
    seen = Controllers()

    def launch(self: ControllerClient, start: Any, *, pass_fds: Any = ()) -> None:
        if seen.fail_launch:
            from nestbed.errors import InternalError

            raise InternalError("the controller exited at start: (a test's failure)")
        seen.started.setdefault(self.plan.experiment, []).append(start.model_dump(mode="json"))

    def request(self: ControllerClient, op: str, timeout: Any = 60, **fields: Any) -> dict:
        name = self.plan.experiment
        if name in seen.dead:
            from nestbed.errors import UserError

            raise UserError(f"the controller of experiment {name} is not running")
        seen.requests.setdefault(name, []).append((op, fields))
        if op == "status":
            return {"ok": True, "elapsed_s": 1.0, "finished": True, "busy": False}
        if op == "finish":
            return {"ok": True, "outcome": fields.get("outcome", "completed")}
        return {"ok": True}

    monkeypatch.setattr(ControllerClient, "launch", launch)
    monkeypatch.setattr(ControllerClient, "prestart", lambda self, **_: None)
    monkeypatch.setattr(ControllerClient, "request", request)
    return seen


@pytest.fixture
def fake(tmp_path) -> FakeBackend:
    return FakeBackend(tmp_path / "machine")


@pytest.fixture
def testbed(tmp_path, fake, controllers):  # type: ignore[no-untyped-def]
    with Store.open(str(tmp_path / "store.db")) as store:
        yield Testbed(store, fake)


@pytest.fixture
def active(testbed, fake, tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    """The experiment's name and store: active on the fake back end, which the command line
    finds (its environment set, no server), with the command line's global options unset."""
    exp = experiment(LINE, "line")
    testbed.define(exp)
    testbed.swap_in(exp.name, RunOptions(results=fake.state_root / "r"))
    monkeypatch.setenv("NESTBED_BACKEND", "fake")
    monkeypatch.setenv("NESTBED_FAKE_ROOT", str(fake.state_root))
    monkeypatch.delenv(plain.SERVER_ENV, raising=False)
    monkeypatch.setattr(plain.state, "db", None)
    monkeypatch.setattr(plain.state, "debug", False)
    return exp.name, str(tmp_path / "store.db")
