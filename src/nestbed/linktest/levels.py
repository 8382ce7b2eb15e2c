"""linktest's levels, as Emulab numbers them (light to import: no statistics)."""

from __future__ import annotations

from collections.abc import Callable

from nestbed.errors import UserError

LEVELS = {
    1: "connectivity and latency",
    2: "routing",
    3: "loss",
    4: "bandwidth",
}
Notify = Callable[[str], None]  # told what linktest is doing


def check_level(level: int) -> int:
    if level not in LEVELS:
        raise UserError(f"linktest level {level} does not exist; use 1 to 4 ({_levels()})")
    return level


def _levels() -> str:
    return ", ".join(f"{k} {v}" for k, v in LEVELS.items())
