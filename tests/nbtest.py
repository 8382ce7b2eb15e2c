"""Helpers shared by the tests (imported as `nbtest`; pytest puts tests/ on the path)."""

from __future__ import annotations

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
