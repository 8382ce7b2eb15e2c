"""Names of a sweep's experiments."""

from __future__ import annotations

from pathlib import Path

from nestbed.sweep.execute import point_name
from nestbed.sweep.spec import Point, Sweep, SweepDoc


def test_a_sweep_of_a_file_whose_stem_is_no_valid_name_still_names_its_points():
    sweep = Sweep(Path("014_lab_basic.ns"), SweepDoc(experiment="014_lab_basic.ns"))
    point = Point(index=3, repetition=1, parameters={"bw": "1Mb"})
    assert point_name(sweep, point) == "014-lab-basic-p0003-r1"
