"""`measure` and its figures on a small, fast run."""

from __future__ import annotations

import math

import pytest
from scipy import stats

from nestbed.errors import UserError
from nestbed.studies.pubsub.compression import get_compressor
from nestbed.studies.pubsub.formats import FORMATS
from nestbed.studies.pubsub.metrics import METRICS, measure, measure_raw, summarize
from nestbed.studies.pubsub.plots import write_figures
from nestbed.studies.pubsub.records import Shape

SMALL = Shape(waypoints=10, trajectory_points=40, sectors=5, remarks_chars=200)
FORMATS_USED = [FORMATS["cdr"], FORMATS["json"], FORMATS["xml-sax"]]
COMPRESSORS = [get_compressor("none"), get_compressor("zlib", 6), get_compressor("bzip2", 9)]


@pytest.fixture(scope="module")
def summary():
    return measure(FORMATS_USED, COMPRESSORS, repetitions=4, seed=11, shape=SMALL)


def test_one_row_per_format_and_compressor(summary):
    assert len(summary) == len(FORMATS_USED) * len(COMPRESSORS)
    assert set(summary["n"]) == {4}


def test_intervals_are_student_t_over_the_repetitions():
    raw = measure_raw(FORMATS_USED[:1], COMPRESSORS[:1], repetitions=4, seed=3, shape=SMALL)
    row = summarize(raw).iloc[0]
    for metric in METRICS:
        values = raw[metric].to_numpy(dtype=float)
        half = stats.t.ppf(0.975, 3) * values.std(ddof=1) / math.sqrt(4)
        assert row[f"{metric}_mean"] == pytest.approx(values.mean()), metric
        assert row[f"{metric}_high"] - row[f"{metric}_mean"] == pytest.approx(half), metric


def test_efficiency_is_content_over_stream_bytes(summary):
    row = summary.set_index(["format", "compressor"])
    assert (
        row.loc[("cdr", "none"), "efficiency_mean"] > row.loc[("json", "none"), "efficiency_mean"]
    )
    # Compression can lift a verbose format above CDR, as in the paper's Figure 4C.
    assert (
        row.loc[("json", "bzip2"), "efficiency_mean"] > row.loc[("json", "none"), "efficiency_mean"]
    )


def test_raw_rows_reuse_one_serialization_per_format():
    raw = measure_raw(FORMATS_USED[:1], COMPRESSORS[:2], repetitions=2, seed=1, shape=SMALL)
    per_rep = raw.groupby("repetition")["serialize_s"].nunique()
    assert (per_rep == 1).all()
    assert len(summarize(raw)) == 2


def test_a_single_repetition_has_no_interval_but_still_plots(tmp_path):
    one = measure(FORMATS_USED[:2], COMPRESSORS[:2], repetitions=1, seed=2, shape=SMALL)
    assert math.isnan(one.loc[0, "efficiency_low"])
    for path in write_figures(one, tmp_path):
        assert path.stat().st_size > 0


def test_figures_are_written(summary, tmp_path):
    figure2, figure4 = write_figures(summary, tmp_path / "figs")
    assert figure2.name == "figure2.png" and figure2.stat().st_size > 10_000
    assert figure4.name == "figure4.png" and figure4.stat().st_size > 10_000


def test_zero_repetitions_is_a_user_error():
    with pytest.raises(UserError, match="repetitions must be at least 1"):
        measure(FORMATS_USED, COMPRESSORS, repetitions=0, seed=0)
