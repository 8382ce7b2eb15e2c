"""Local measurements of each format × compressor: efficiency and the four processing times.

Means with 95 % Student-t confidence intervals over repetitions, each on a fresh random record.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd

from nestbed.errors import InternalError, UserError
from nestbed.results.intervals import t_interval
from nestbed.studies.pubsub.compression import Compressor
from nestbed.studies.pubsub.formats import Format
from nestbed.studies.pubsub.records import Shape, content_bytes, generate

# Per-repetition quantities; `processing_s` is the local part of the paper's latency.
METRICS = (
    "efficiency",
    "stream_bytes",
    "serialize_s",
    "deserialize_s",
    "compress_s",
    "decompress_s",
    "processing_s",
)
KEYS = ["format", "compressor", "level"]
CONFIDENCE = 0.95


def _timed(function: Callable[[Any], Any], argument: Any) -> tuple[Any, float]:
    # The collector would otherwise charge this call for garbage left by others. (A full
    # gc.collect() per call costs more than the calls themselves; one per record is enough.)
    gc.disable()
    try:
        start = time.perf_counter()
        result = function(argument)
        return result, time.perf_counter() - start
    finally:
        gc.enable()


def measure_raw(
    formats: Sequence[Format],
    compressors: Sequence[Compressor],
    *,
    repetitions: int,
    seed: int,
    shape: Shape = Shape(),  # noqa: B008 (frozen, never mutated)
) -> pd.DataFrame:
    """One row per repetition × format × compressor; repetition r uses record `seed + r`."""
    if repetitions < 1:
        raise UserError(f"repetitions must be at least 1, not {repetitions}")
    if not formats or not compressors:
        raise UserError("measure needs at least one format and one compressor")
    # One untimed pass first: Cyclone DDS builds its (de)serializers on first use.
    warm = generate(seed, shape)
    for fmt in formats:
        fmt.deserialize(fmt.serialize(warm))
    rows = []
    for repetition in range(repetitions):
        record = generate(seed + repetition, shape)
        content = content_bytes(record)
        gc.collect()
        for fmt in formats:
            stream, serialize_s = _timed(fmt.serialize, record)
            decoded, deserialize_s = _timed(fmt.deserialize, stream)
            if decoded != record:
                raise InternalError(f"format {fmt.name!r}: round trip changed record {repetition}")
            for comp in compressors:
                packed, compress_s = _timed(comp.compress, stream)
                unpacked, decompress_s = _timed(comp.decompress, packed)
                if unpacked != stream:
                    raise InternalError(f"compressor {comp.name!r}: round trip changed the stream")
                rows.append(
                    {
                        "format": fmt.name,
                        "compressor": comp.name,
                        "level": comp.level,
                        "repetition": repetition,
                        "content_bytes": content,
                        "stream_bytes": len(packed),
                        "efficiency": content / len(packed),
                        "serialize_s": serialize_s,
                        "deserialize_s": deserialize_s,
                        "compress_s": compress_s,
                        "decompress_s": decompress_s,
                        "processing_s": serialize_s + compress_s + decompress_s + deserialize_s,
                    }
                )
    return pd.DataFrame(rows)


def summarize(raw: pd.DataFrame) -> pd.DataFrame:
    """One row per format × compressor × level: `n`, and `<metric>_mean/_low/_high` for each."""
    rows = []
    for key, group in raw.groupby(KEYS, sort=False):
        row: dict[str, Any] = dict(zip(KEYS, key, strict=True))
        row["n"] = len(group)
        for metric in METRICS:
            mean, _, low, high = t_interval(group[metric], CONFIDENCE)
            row |= {f"{metric}_mean": mean, f"{metric}_low": low, f"{metric}_high": high}
        rows.append(row)
    return pd.DataFrame(rows)


def measure(
    formats: Sequence[Format],
    compressors: Sequence[Compressor],
    *,
    repetitions: int,
    seed: int,
    shape: Shape = Shape(),  # noqa: B008 (frozen, never mutated)
) -> pd.DataFrame:
    """Means and 95 % confidence intervals of every metric, per format × compressor."""
    raw = measure_raw(formats, compressors, repetitions=repetitions, seed=seed, shape=shape)
    return summarize(raw)
