"""Sweep descriptions, their points, and the tables and plots across points (no root)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from nbtest import EXAMPLES
from nestbed.errors import UserError
from nestbed.spec import load
from nestbed.sweep import table
from nestbed.sweep.metrics import metrics
from nestbed.sweep.spec import expand, from_flags, load_sweep, settings, with_options


def sweep_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text("experiment: " + str(EXAMPLES / "armada.ns") + "\n" + text)
    return path


def test_a_grid_is_the_product_of_its_lists_repeated(tmp_path: Path):
    sweep = load_sweep(sweep_file(tmp_path, "grid: {bw: [1Mb, 2Mb], delay: [5ms, 9ms, 20ms]}\n"
                                            "repetitions: 2\n"))  # fmt: skip
    points = expand(sweep)
    assert len(points) == 12
    assert [p.key for p in points[:3]] == ["p0000-r0", "p0000-r1", "p0001-r0"]
    assert points[0].parameters == {"bw": "1Mb", "delay": "5ms"}
    assert points[-1].parameters == {"bw": "2Mb", "delay": "20ms"}


def test_zipped_lists_vary_together_and_explicit_points_come_first(tmp_path: Path):
    sweep = load_sweep(sweep_file(tmp_path, """
grid: {bw: [1Mb, 2Mb]}
zip: [{delay: [5ms, 50ms], streams: [1, 4]}]
points: [{bw: 9Mb, delay: 1ms, streams: 2}]
"""))  # fmt: skip
    found = settings(sweep.doc)
    assert found[0] == {"bw": "9Mb", "delay": "1ms", "streams": "2"}
    assert found[1:] == [
        {"bw": "1Mb", "delay": "5ms", "streams": "1"},
        {"bw": "1Mb", "delay": "50ms", "streams": "4"},
        {"bw": "2Mb", "delay": "5ms", "streams": "1"},
        {"bw": "2Mb", "delay": "50ms", "streams": "4"},
    ]


def test_shuffling_is_reproducible_from_the_seed(tmp_path: Path):
    text = "grid: {bw: [1Mb, 2Mb, 3Mb, 4Mb, 5Mb]}\nshuffle: true\nseed: 7\n"
    one = [p.key for p in expand(load_sweep(sweep_file(tmp_path, text)))]
    two = [p.key for p in expand(load_sweep(sweep_file(tmp_path, text)))]
    other = [p.key for p in expand(load_sweep(sweep_file(tmp_path, text.replace("7", "8"))))]
    assert one == two and sorted(one) == sorted(other) and one != sorted(one)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("grid: {bw: []}\n", "the grid is empty: bw has no values"),
        ("zip: [{bw: [1Mb, 2Mb], delay: [5ms]}]\n", "zipped lists bw, delay have different"),
        ("repetitions: 0\n", "repetitions: Input should be greater than or equal to 1"),
        ("grid: {bw: [1Mb]}\nwhat: 1\n", "what: Extra inputs are not permitted"),
        ("", "the sweep has no points"),
    ],
)
def test_bad_sweeps_are_one_sentence(tmp_path: Path, text, message):
    with pytest.raises(UserError, match=message):
        expand(load_sweep(sweep_file(tmp_path, text)))


def test_a_grid_of_a_million_points_is_refused_with_its_count(tmp_path: Path):
    values = ", ".join(str(i) for i in range(1000))
    sweep = load_sweep(sweep_file(tmp_path, f"grid: {{a: [{values}], b: [{values}]}}\n"))
    with pytest.raises(UserError, match=r"has 1000000 runs .* --max-points 1000000"):
        expand(sweep)


def test_flags_give_the_same_sweep_as_a_file(tmp_path: Path):
    flags = from_flags(EXAMPLES / "armada.ns", ["bw=1Mb,2Mb"], ["delay=5ms,9ms", "streams=1,2"],
                       repetitions=3)  # fmt: skip
    file = load_sweep(sweep_file(tmp_path, "grid: {bw: [1Mb, 2Mb]}\n"
                                           "zip: [{delay: [5ms, 9ms], streams: [1, 2]}]\n"
                                           "repetitions: 3\n"))  # fmt: skip
    assert [p.parameters for p in expand(flags)] == [p.parameters for p in expand(file)]
    with pytest.raises(UserError, match="--grid 'bw' is not NAME=V1,V2"):
        from_flags(EXAMPLES / "armada.ns", ["bw"], [])


def test_yaml_fields_are_set_by_their_path():
    exp = load(EXAMPLES / "dumbbell.yaml",
               parameters={"links.bottleneck.bandwidth": "3Mb"}).experiment  # fmt: skip
    bottleneck = next(x for x in exp.links if x.name == "bottleneck")
    assert bottleneck.ports[0].egress.bandwidth_bps == 3_000_000
    with pytest.raises(UserError, match="no item named nope in links"):
        load(EXAMPLES / "dumbbell.yaml", parameters={"links.nope.delay": "1ms"})


ROWS = [
    {"point": f"p{i:04d}-r{r}", "index": i, "repetition": r, "param.bw": bw,
     "param.delay": delay, "outcome": "completed", "metric.time": t}
    for i, (bw, delay, times) in enumerate([("10Mb", "5ms", [1.0, 1.2, 1.4]),
                                           ("100Mb", "5ms", [0.2, 0.2, 0.2]),
                                           ("10Mb", "50ms", [2.0, 2.1, 2.2]),
                                           ("100Mb", "50ms", [0.9, 1.0, 1.1])])
    for r, t in enumerate(times)
]  # fmt: skip


def test_the_summary_has_means_and_t_intervals_per_setting(tmp_path: Path):
    data = table.write_tables(ROWS, tmp_path)
    summary = pd.read_csv(tmp_path / "summary.csv")
    first = summary[(summary["param.bw"] == "10Mb") & (summary["param.delay"] == "5ms")].iloc[0]
    # mean 1.2, sd 0.2, n 3: half width t(0.975, 2) × 0.2 / √3 = 4.303 × 0.1155 = 0.4968
    assert (first["n"], first["mean"], first["sd"]) == (3, pytest.approx(1.2), pytest.approx(0.2))
    assert first["ci_high"] - first["mean"] == pytest.approx(0.4968, abs=1e-3)
    assert pd.read_parquet(tmp_path / "table.parquet")["metric.time"].sum() == pytest.approx(
        data["metric.time"].sum()
    )
    flat = summary[summary["param.bw"] == "100Mb"].iloc[0]
    assert flat["sd"] == pytest.approx(0) and flat["ci_high"] - flat["ci_low"] == pytest.approx(0)


def test_plots_of_a_metric_against_one_and_two_parameters(tmp_path: Path):
    data = table.frame(ROWS)
    lines = table.plot(data, "metric.time", "bw", None, tmp_path / "lines.png")
    heat = table.plot(data, "metric.time", "bw", "delay", tmp_path / "heat.png")
    assert lines.stat().st_size > 1000 and heat.stat().st_size > 1000
    with pytest.raises(UserError, match="no parameter streams"):
        table.plot(data, "metric.time", "streams", None, tmp_path / "x.png")
    with pytest.raises(UserError, match="no metric nope"):
        table.plot(data, "nope", "bw", None, tmp_path / "x.png")


def test_metrics_come_from_programs_and_their_metrics_json(tmp_path: Path):
    (tmp_path / "programs" / "transfer").mkdir(parents=True)
    (tmp_path / "programs.csv").write_text(
        "program,node,command,started_s,ended_s,exit_code,expected_exit_code,timed_out,"
        "outcome,stdout,stderr\ntransfer,client,x,0.5,2.25,0,,False,ok,,\n"
    )
    (tmp_path / "programs" / "transfer" / "metrics.json").write_text('{"goodput": 9.5}')
    found = metrics(tmp_path)
    assert found["program.transfer.seconds"] == pytest.approx(1.75)
    assert found["program.transfer.goodput"] == 9.5


def test_a_name_in_both_grid_and_zip_is_refused(tmp_path: Path):
    sweep = load_sweep(sweep_file(tmp_path, "grid: {bw: [1Mb]}\nzip: [{bw: [2Mb, 3Mb]}]\n"))
    with pytest.raises(UserError, match="parameter bw is given in more than one of grid and zip"):
        expand(sweep)


def test_command_line_options_over_a_file_are_validated(tmp_path: Path):
    sweep = load_sweep(sweep_file(tmp_path, "grid: {bw: [1Mb]}\n"))
    with pytest.raises(UserError, match="repetitions: Input should be greater than or equal to 1"):
        with_options(sweep, {"repetitions": 0, "duration": None})
    assert with_options(sweep, {"repetitions": 3}).doc.repetitions == 3
