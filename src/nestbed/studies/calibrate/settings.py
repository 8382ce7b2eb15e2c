"""What a calibration measures and how much: ``Settings()`` is the paper's grid,
``Settings.quick()`` a few minutes' worth; ``check`` refuses bad input before anything runs."""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from nestbed.errors import UserError
from nestbed.studies.calibrate.topology import PROFILES, TOPOLOGIES

HEADER_BYTES = 12  # nestbed-probe's header: sequence, burst id, send timestamp
MAX_PAYLOAD = 65_507
# Memory one datagram of a burst may hold at once, beyond its payload: the receiver's record
# (24 B), the sender's and receiver's log rows and the kernel's sk_buff (about 700 B).
PER_PACKET_OVERHEAD = 1024


@dataclass(frozen=True)
class Settings:
    sizes: tuple[int, ...] = (50, 100, 150, 200, 250, 300, 350, 400, 450, 500, 600, 800, 1000, 1200)
    bursts: tuple[int, ...] = (100, 500, 1000, 2000, 5000)
    repetitions: int = 5
    gap_s: float = 1.0  # after each burst; the paper waited 100 s
    topologies: tuple[str, ...] = TOPOLOGIES
    profiles: tuple[str, ...] = PROFILES
    receivers: int = 20  # on the LAN, as the paper's 1 × 20
    loss: float = 0.05  # of the loss topology's link
    threshold_pct: float = 1.0  # the knee: loss at or below this
    tune_host: bool = False  # also raise the host's netdev_max_backlog (restored after)
    capture: bool = False  # tcpdump at the sender's and receivers' interfaces, cross-checked

    @classmethod
    def quick(cls) -> Settings:
        return cls(
            sizes=(50, 100, 200, 400, 800, 1200),
            bursts=(100, 1000, 5000),
            repetitions=3,
            gap_s=0.3,
            receivers=8,
        )

    def with_(self, **changes: Any) -> Settings:
        return replace(self, **{k: v for k, v in changes.items() if v is not None})

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _available_bytes() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def check(s: Settings, *, available_bytes: int | None = None) -> None:
    """Every problem with the settings in one UserError, before anything is swapped in."""
    problems = []
    if not s.sizes or not s.bursts:
        problems.append("give at least one packet size and one burst size")
    for size in s.sizes:
        if size < HEADER_BYTES:
            problems.append(
                f"packet size {size} B is below the {HEADER_BYTES}-byte probe header "
                "(sequence, burst id, send time); use 12 B or more"
            )
        elif size > MAX_PAYLOAD:
            problems.append(
                f"packet size {size} B exceeds the largest UDP payload ({MAX_PAYLOAD} B)"
            )
    for burst in s.bursts:
        if burst < 1:
            problems.append(f"burst size {burst} must be at least 1 packet")
    if s.repetitions < 1:
        problems.append(f"--repetitions {s.repetitions} must be at least 1")
    if not (math.isfinite(s.gap_s) and s.gap_s >= 0):
        problems.append(f"--gap {s.gap_s} must be a number of seconds, not negative")
    if not (math.isfinite(s.threshold_pct) and 0 <= s.threshold_pct <= 100):
        problems.append(f"--threshold {s.threshold_pct} must be a loss in percent, 0 to 100")
    if not 1 <= s.receivers <= 250:
        problems.append(f"--receivers {s.receivers} must be between 1 and 250")
    if not 0 <= s.loss < 1:
        problems.append(f"--loss {s.loss} must be a probability in [0, 1)")
    for t in s.topologies:
        if t not in TOPOLOGIES:
            problems.append(f"topology {t!r} is not one of {', '.join(TOPOLOGIES)}")
    for p in s.profiles:
        if p not in PROFILES:
            problems.append(f"profile {p!r} is not one of {', '.join(PROFILES)}")
    if s.sizes and s.bursts and not problems:
        available = _available_bytes() if available_bytes is None else available_bytes
        copies = 1 + (s.receivers if "lan" in s.topologies else 1)
        burst, size = max(s.bursts), max(s.sizes)
        need = burst * (size + PER_PACKET_OVERHEAD) * copies
        if need > available // 2:
            problems.append(
                f"a burst of {burst} packets of {size} B needs about {need >> 20} MiB "
                f"({copies} copies in flight), more than half the {available >> 20} MiB "
                "this machine has available; use smaller bursts"
            )
    if problems:
        raise UserError("; ".join(problems))
