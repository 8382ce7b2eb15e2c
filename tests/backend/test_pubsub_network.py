"""`nestbed study pubsub` on real namespaces, in miniature: two formats, two compressors, the
no-loss and high-loss scenarios on one reused network, small records; tables, figures, report."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pandas as pd
import pytest

from nestbed.studies.pubsub import study
from nestbed.studies.pubsub.records import Shape

pytestmark = pytest.mark.root

DELAY_S = 0.005


def test_a_minimal_study_runs_through_the_sweep_and_writes_its_report(tmp_path: Path):
    settings = study.Settings(
        formats=("cdr", "json"), compressors=("none", "zlib"), scenarios=("none", "high"),
        qos="best-effort", repetitions=3, local_repetitions=2, delay=f"{DELAY_S * 1e3:g}ms",
        shape=Shape(alternates=1, waypoints=10, trajectory_points=40, sectors=4,
                    remarks_chars=200),
    )  # fmt: skip
    # The echo timeout is the study's own (3 s, 300 round trips here), not a shorter one: on
    # a lossless link a message is counted lost only when its echo is late, and a loaded
    # 2-core machine has held the echoer or the publisher past 1 s.
    outcome = study.run(settings, tmp_path)
    assert outcome.runs == {"none": "completed", "high": "completed"}

    messages = pd.read_csv(tmp_path / "delivery.csv")
    assert len(messages) == 2 * 2 * 2 * 3  # scenarios × formats × compressors × repetitions
    lossless = messages[messages["scenario"] == "none"]
    assert lossless["lost"].sum() == 0, lossless[lossless["lost"] > 0]
    # A round trip crosses the link twice: it cannot take less than twice its delay.
    assert (lossless["delivery_s"] >= 2 * DELAY_S).all()

    # The sweep reused one network and set the high scenario's Gilbert loss on it.
    sweep = pd.read_csv(tmp_path / "sweep" / "table.csv")
    assert list(sweep["reused_network"]) == [True, True]
    high = Path(sweep.loc[sweep["index"] == 1, "results"].iloc[0])
    ir = json.loads((high / "ir.json").read_text())
    gilbert = ir["links"][0]["ports"][0]["egress"]["gilbert_elliott"]
    assert (gilbert["p"], gilbert["r"]) == pytest.approx(study.SCENARIOS["high"].p_r, rel=1e-5)
    with (high / "links" / "counters.csv").open() as f:
        counters = list(csv.DictReader(f))
    # (cumulative since the network was built, and the first run had no loss)
    assert max(int(r["drops_loss"]) for r in counters) > 0

    for name in ("figure2.png", "figure4.png", "figure5.png", "local.csv",
                 "delivery_summary.csv"):  # fmt: skip
        assert (tmp_path / name).stat().st_size > 0, name
    text = (tmp_path / "report.md").read_text()
    summary = outcome.delivery.set_index(["scenario", "format", "compressor"])
    cdr = summary.loc[("none", "cdr", "none")]
    # The report's numbers are this run's: CDR's row of the delivery table.
    row = f"| none | best-effort | cdr | none | 3 | 0 | {cdr['delivery_s_mean'] * 1e3:.3g} ms |"
    assert row in text
    assert "![figure5](figure5.png)" in text
