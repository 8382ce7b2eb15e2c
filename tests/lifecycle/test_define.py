"""Defining experiments in the store: created, refreshed, or afresh as sweeps and studies do
before each run."""

from __future__ import annotations

from nbtest import experiment
from nestbed.model.options import RunOptions
from nestbed.store import State

TWO = """
nodes: [{name: a}, {name: b}]
links: [{members: [a, b]}]
"""


def test_a_definition_is_created_then_refreshed_in_place(testbed):
    first = experiment(TWO, "again")
    testbed.define(first, source_text="first", source_format="yaml")
    testbed.store.start_run(first.name, "r1")
    testbed.define(first, source_text="second", source_format="yaml")
    record = testbed.store.get(first.name)
    assert record.source_text == "second"
    assert len(testbed.store.runs(first.name)) == 1  # refreshed, not replaced


def test_an_experiment_left_defined_by_an_earlier_attempt_is_replaced(testbed, tmp_path):
    store = testbed.store
    first = experiment(TWO, "again")
    testbed.define(first, source_text="first", source_format="yaml", anew=True)
    store.start_run(first.name, tmp_path / "r1")  # an attempt that got as far as a run
    testbed.define(first, source_text="second", source_format="yaml", anew=True)
    record = store.get(first.name)
    assert record.state == State.DEFINED
    assert record.source_text == "second"
    assert store.runs(first.name) == []


def test_an_experiment_left_active_by_a_crash_is_swapped_out_before_it_is_replaced(
    testbed, fake, tmp_path
):
    exp = experiment(TWO, "crashed")
    testbed.define(exp, anew=True)
    testbed.swap_in(exp.name, RunOptions(results=tmp_path / "results"))
    testbed.define(exp, anew=True)
    assert testbed.store.get(exp.name).state == State.DEFINED
    assert fake.leftovers() == {}
    assert [e["op"] for e in fake.journal() if e["op"].startswith("swap")] == [
        "swap_in",
        "swap_out",
    ]
