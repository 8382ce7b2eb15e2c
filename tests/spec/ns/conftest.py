"""The `run` fixture of the ns front end tests: translate a script body."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from ns_helpers import PRELUDE

from nestbed.spec.ns import Translation, translate

Run = Callable[..., Translation]


@pytest.fixture
def run(tmp_path: Path) -> Run:
    """Translates BODY (after a prelude making $ns; `$ns run` appended)."""

    def _run(
        body: str, *, parameters: dict[str, str] | None = None, raw: bool = False
    ) -> Translation:
        text = body if raw else PRELUDE + body.strip("\n") + "\n$ns run\n"
        path = tmp_path / "t.ns"
        path.write_text(text, encoding="utf-8")
        return translate(path, parameters=parameters)

    return _run
