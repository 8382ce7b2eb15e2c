"""Storing an experiment afresh, as sweeps and studies do before each run."""

from __future__ import annotations

from nbtest import experiment
from nestbed.store import State, Store
from nestbed.swap import define_anew

TWO = """
nodes: [{name: a}, {name: b}]
links: [{members: [a, b]}]
"""


def test_an_experiment_left_defined_by_an_earlier_attempt_is_replaced(tmp_path):
    with Store.open(str(tmp_path / "store.db")) as store:
        first = experiment(TWO, "again")
        define_anew(store, first, source_text="first", source_format="yaml")
        store.start_run(first.name, tmp_path / "r1")  # an attempt that got as far as a run
        define_anew(store, first, source_text="second", source_format="yaml")
        record = store.get(first.name)
        assert record.state == State.DEFINED
        assert record.source_text == "second"
        assert store.runs(first.name) == []
