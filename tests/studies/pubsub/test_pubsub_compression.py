"""Compressors round-trip at their extreme levels; LZO says clearly when it is missing."""

from __future__ import annotations

import pytest

from nestbed.errors import UserError
from nestbed.studies.pubsub.compression import (
    METHODS,
    CompressorUnavailable,
    available,
    get_compressor,
)
from nestbed.studies.pubsub.formats import FORMATS
from nestbed.studies.pubsub.records import generate

USABLE = [name for name, reason in available().items() if reason is None]
CASES = [(n, lvl) for n in USABLE for lvl in {METHODS[n].levels[0], METHODS[n].levels[-1]}]


@pytest.fixture(scope="module")
def stream():
    return FORMATS["json"].serialize(generate(0))


@pytest.mark.parametrize(("name", "level"), CASES)
def test_round_trip(name, level, stream):
    comp = get_compressor(name, level)
    packed = comp.compress(stream)
    assert comp.decompress(packed) == stream
    if name != "none" and level > 0:  # level 0 of zlib and lz4 only frames the input
        assert len(packed) < len(stream)


def test_the_paper_s_compressors_and_two_modern_ones_are_known():
    assert {"zlib", "bzip2", "lzo", "zstd", "lz4"} <= set(METHODS)
    assert {"zlib", "bzip2", "zstd", "lz4"} <= set(USABLE)


def test_lzo_works_or_says_why_not(stream):
    reason = available()["lzo"]
    if reason is None:
        comp = get_compressor("lzo")
        assert comp.decompress(comp.compress(stream)) == stream
    else:
        assert "python-lzo" in reason and "liblzo2" in reason
        with pytest.raises(CompressorUnavailable, match="python-lzo"):
            get_compressor("lzo")


def test_default_levels_are_the_libraries_own():
    assert get_compressor("zlib").level == 6
    assert get_compressor("bzip2").level == 9


@pytest.mark.parametrize(
    ("name", "level", "message"),
    [
        ("gzip", None, "unknown compressor 'gzip'; known: none, zlib"),
        ("zlib", 10, "compressor 'zlib': level 10 is outside 0..9"),
        ("bzip2", 0, "compressor 'bzip2': level 0 is outside 1..9"),
    ],
)
def test_bad_names_and_levels_are_user_errors(name, level, message):
    with pytest.raises(UserError, match=message):
        get_compressor(name, level)
