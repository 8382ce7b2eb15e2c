"""Lossless compressors placed after the serializer: zlib, bzip2 and LZO as in the paper, zstd, lz4.

LZO needs python-lzo, which builds against the system's liblzo2; without it LZO reports itself
unavailable rather than being replaced by something else.
"""

from __future__ import annotations

import bz2
import importlib
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

from nestbed.errors import EnvironmentProblem, UserError


@dataclass(frozen=True, kw_only=True)
class Compressor:
    """A compression method at one level, with its matching decompressor."""

    name: str
    level: int
    compress: Callable[[bytes], bytes]
    decompress: Callable[[bytes], bytes]


class CompressorUnavailable(EnvironmentProblem):
    """A compressor whose library is not installed here."""


@dataclass(frozen=True, kw_only=True)
class _Method:
    levels: range
    default: int
    make: Callable[[int], tuple[Callable[[bytes], bytes], Callable[[bytes], bytes]]]


def _identity(data: bytes) -> bytes:
    return data


def _none(_level: int) -> tuple[Callable[[bytes], bytes], Callable[[bytes], bytes]]:
    return _identity, _identity


def _zlib(level: int) -> tuple[Callable[[bytes], bytes], Callable[[bytes], bytes]]:
    return (lambda d: zlib.compress(d, level)), zlib.decompress


def _bz2(level: int) -> tuple[Callable[[bytes], bytes], Callable[[bytes], bytes]]:
    return (lambda d: bz2.compress(d, level)), bz2.decompress


def _optional(module: str, package: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise CompressorUnavailable(
            f"compressor {module!r} needs the Python package {package!r}, which is not "
            f"installed here ({exc})"
        ) from exc


def _lzo(level: int) -> tuple[Callable[[bytes], bytes], Callable[[bytes], bytes]]:
    lzo = _optional("lzo", "python-lzo (it builds against liblzo2; install liblzo2-dev first)")
    return (lambda d: lzo.compress(d, level)), lzo.decompress


def _zstd(level: int) -> tuple[Callable[[bytes], bytes], Callable[[bytes], bytes]]:
    zstandard = _optional("zstandard", "zstandard")
    compressor = zstandard.ZstdCompressor(level=level)
    decompressor = zstandard.ZstdDecompressor()
    return compressor.compress, decompressor.decompress


def _lz4(level: int) -> tuple[Callable[[bytes], bytes], Callable[[bytes], bytes]]:
    frame = _optional("lz4.frame", "lz4")
    return (lambda d: frame.compress(d, compression_level=level)), frame.decompress


# Levels as each library numbers them; the defaults are the libraries' own.
METHODS: dict[str, _Method] = {
    "none": _Method(levels=range(0, 1), default=0, make=_none),
    "zlib": _Method(levels=range(0, 10), default=6, make=_zlib),
    "bzip2": _Method(levels=range(1, 10), default=9, make=_bz2),
    # python-lzo: level 1 is LZO1X-1 (fast), 9 is LZO1X-999 (slow, smaller).
    "lzo": _Method(levels=range(1, 10), default=1, make=_lzo),
    "zstd": _Method(levels=range(1, 23), default=3, make=_zstd),
    "lz4": _Method(levels=range(0, 17), default=0, make=_lz4),
}


def get_compressor(name: str, level: int | None = None) -> Compressor:
    """The compressor `name` at `level` (its library's default when None).

    Raises `UserError` for an unknown name or a level out of range, and
    `CompressorUnavailable` when the library is missing.
    """
    method = METHODS.get(name)
    if method is None:
        raise UserError(f"unknown compressor {name!r}; known: {', '.join(METHODS)}")
    if level is None:
        level = method.default
    if level not in method.levels:
        raise UserError(
            f"compressor {name!r}: level {level} is outside "
            f"{method.levels.start}..{method.levels.stop - 1}"
        )
    compress, decompress = method.make(level)
    return Compressor(name=name, level=level, compress=compress, decompress=decompress)


def available() -> dict[str, str | None]:
    """Each compressor's name, mapped to None if usable here or to why it is not."""
    reasons: dict[str, str | None] = {}
    for name in METHODS:
        try:
            get_compressor(name)
        except CompressorUnavailable as exc:
            reasons[name] = str(exc)
        else:
            reasons[name] = None
    return reasons
