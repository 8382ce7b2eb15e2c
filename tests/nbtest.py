"""Helpers shared by the tests (imported as `nbtest`; pytest puts tests/ on the path)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"


def semantic(exp: Any) -> Any:
    """The IR as plain data without where it came from (source, file:line, warnings)."""

    def strip(o: Any) -> Any:
        if isinstance(o, dict):
            return {k: strip(v) for k, v in o.items() if k not in ("where", "source", "warnings")}
        if isinstance(o, list | tuple):
            return [strip(x) for x in o]
        return o

    return strip(exp.model_dump(mode="json"))


def build(text: str) -> Any:
    """The IR of a YAML experiment given as (indented) text, as file t.yaml."""
    import textwrap

    from nestbed.spec import yaml as yaml_front_end
    from nestbed.spec.resolve import resolve

    document, locations = yaml_front_end.read(textwrap.dedent(text), "t.yaml")
    return resolve(document, file="t.yaml", locations=locations)


def experiment(text: str, name: str) -> Any:
    """Like build, named NAME-PID so that parallel test runs do not collide."""
    import os

    exp = build(text)
    return exp.model_copy(update={"name": f"{name}-{os.getpid()}"})


def until(condition: Callable[[], Any], what: str, deadline_s: float = 180) -> Any:
    """Waits for ``condition`` to be true (its value), failing with ``what`` at the deadline
    (generous: the machine is shared and loaded; never a measured threshold)."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"still waiting after {deadline_s} s for {what}")
