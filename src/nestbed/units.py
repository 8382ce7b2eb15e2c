"""Units of experiment files: bandwidth, delay, event time, loss and size, parsed and printed.

Parsing is strict and each failure names the value and the accepted forms. Printing picks the
most readable unit that parses back to exactly the same number, so conversions round-trip.
"""

from __future__ import annotations

import math
import re

_NUMBER = r"(-?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)"

# ns-2 / Emulab bandwidth suffixes; all are bits per second, decimal multiples.
_BANDWIDTH_UNITS = {
    "": 1,
    "b": 1,
    "bps": 1,
    "k": 1_000,
    "kb": 1_000,
    "kbps": 1_000,
    "K": 1_000,
    "Kb": 1_000,
    "Kbps": 1_000,
    "M": 1_000_000,
    "Mb": 1_000_000,
    "Mbps": 1_000_000,
    "G": 1_000_000_000,
    "Gb": 1_000_000_000,
    "Gbps": 1_000_000_000,
}
_DELAY_UNITS = {"": 1, "s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
_SIZE_UNITS = {
    "": 1,
    "B": 1,
    "KB": 1_000,
    "MB": 1_000_000,
    "GB": 1_000_000_000,
    "KiB": 1 << 10,
    "MiB": 1 << 20,
    "GiB": 1 << 30,
}
_QUANTITY = re.compile(rf"^\s*{_NUMBER}\s*([A-Za-z]*)\s*$")
_CLOCK = re.compile(r"^(?:([0-9]+)h)?(?:([0-9]+)m(?!s))?(?:([0-9]*\.?[0-9]+)s)?$")


class UnitError(ValueError):
    """A value that is not a valid quantity; the message names the value and the fix."""


def _split(value: str | int | float, what: str, accepted: str) -> tuple[float, str]:
    if isinstance(value, bool):
        raise UnitError(f"{what} {value!r} is not a number; {accepted}")
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise UnitError(f"{what} {value!r} is not a finite number; {accepted}")
        return float(value), ""
    match = _QUANTITY.match(str(value))
    if not match:
        raise UnitError(f"{what} {str(value)!r} is not a valid {what}; {accepted}")
    return float(match.group(1)), match.group(2)


def parse_bandwidth(value: str | int | float) -> int:
    """Bits per second from `10Mb`, `1.544Mbps`, `56kb` or a bare number of bits per second."""
    accepted = (
        "write bits per second with b, kb, Mb or Gb (for example 10Mb); bytes (B) are not accepted"
    )
    number, unit = _split(value, "bandwidth", accepted)
    if unit not in _BANDWIDTH_UNITS:
        raise UnitError(f"bandwidth {str(value)!r} has unknown unit {unit!r}; {accepted}")
    bps = number * _BANDWIDTH_UNITS[unit]
    if bps < 0:
        raise UnitError(f"bandwidth {str(value)!r} is negative; {accepted}")
    return round(bps)


def parse_delay(value: str | int | float) -> float:
    """Seconds from `20ms`, `1.5s`, `100us`, `500ns` or a bare number of seconds."""
    accepted = "write a non-negative delay in s, ms, us or ns (for example 20ms)"
    number, unit = _split(value, "delay", accepted)
    if unit not in _DELAY_UNITS:
        raise UnitError(f"delay {str(value)!r} has unknown unit {unit!r}; {accepted}")
    if number < 0:
        raise UnitError(f"delay {str(value)!r} is negative; {accepted}")
    return number / _DELAY_UNITS[unit]


def parse_time(value: str | int | float) -> float:
    """Seconds from an event time: `10.5`, `90s`, `1h20m3s`."""
    accepted = "write seconds (10.5) or hours, minutes and seconds (1h20m3s)"
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        text = str(value).strip()
        try:
            seconds = float(text)
        except ValueError:
            match = _CLOCK.match(text)
            if not text or not match or not any(match.groups()):
                raise UnitError(f"time {text!r} is not a valid time; {accepted}") from None
            h, m, s = match.groups()
            seconds = int(h or 0) * 3600 + int(m or 0) * 60 + float(s or 0)
    if not math.isfinite(seconds) or seconds < 0:
        raise UnitError(f"time {str(value)!r} is not a non-negative time; {accepted}")
    return seconds


def parse_probability(value: str | int | float, what: str = "loss") -> float:
    """A probability in [0, 1] (loss 0.001 is 0.1 %; percentages are not accepted)."""
    accepted = f"write {what} as a probability between 0 and 1 (for example 0.01 for 1 %)"
    number, unit = _split(value, what, accepted)
    if unit or not 0.0 <= number <= 1.0:
        raise UnitError(f"{what} {str(value)!r} is not between 0 and 1; {accepted}")
    return number


def parse_size(value: str | int | float, what: str = "size") -> int:
    """Bytes from `512MB`, `1GiB`, `1500B` or a bare number of bytes."""
    accepted = f"write {what} in B, KB, MB, GB, KiB, MiB or GiB (for example 512MB)"
    number, unit = _split(value, what, accepted)
    if unit not in _SIZE_UNITS:
        raise UnitError(f"{what} {str(value)!r} has unknown unit {unit!r}; {accepted}")
    if number < 0:
        raise UnitError(f"{what} {str(value)!r} is negative; {accepted}")
    return round(number * _SIZE_UNITS[unit])


def _pretty(number: float, units: list[tuple[str, int]], parse) -> str:
    # Prefer the largest unit giving a whole number, then the shortest decimal; both must parse
    # back to exactly the same float.
    for style in ("{:.0f}", "{:g}", "{!r}"):
        for suffix, scale in units:
            candidate = style.format(number * scale) + suffix
            try:
                if parse(candidate) == number:
                    return candidate
            except UnitError:
                pass
    return repr(number)


def format_bandwidth(bps: int) -> str:
    """`10Mb` for 10_000_000, `1.5Mb` for 1_500_000; always parses back to the same number."""
    if bps == 0:
        return "0"
    for suffix, scale in (("Gb", 10**9), ("Mb", 10**6), ("kb", 10**3)):
        if bps >= scale:
            for text in (f"{bps // scale}{suffix}", f"{bps / scale:g}{suffix}"):
                if parse_bandwidth(text) == bps:
                    return text
    return f"{bps}b"


def format_delay(seconds: float) -> str:
    """`20ms` for 0.02; always parses back to the same float."""
    if seconds == 0:
        return "0ms"
    units = [("s", 1), ("ms", 1000), ("us", 1_000_000), ("ns", 10**9)]
    return _pretty(seconds, units, parse_delay)


def format_time(seconds: float) -> str:
    """An event time as the shortest decimal that parses back to the same float."""
    return repr(seconds) if seconds != int(seconds) else str(int(seconds))
