"""Runs of an experiment: started, ended once, listed in order."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from nestbed.errors import UserError
from nestbed.store import Store


@pytest.fixture
def experiment(store: Store) -> str:
    store.create_experiment(
        "dumbbell", source_text="", source_format="ns", source_file=None, ir_json="{}"
    )
    return "dumbbell"


def test_start_and_end_a_run(store: Store, experiment: str, tmp_path: Path) -> None:
    before = datetime.now(UTC)
    run_id = store.start_run(experiment, tmp_path / "run-1")
    (running,) = store.runs(experiment)
    assert running.id == run_id
    assert running.experiment == experiment
    assert running.results_dir == str(tmp_path / "run-1")
    assert running.ended_at is None and running.outcome is None
    assert running.started_at >= before

    ended = store.end_run(run_id, "ok")
    assert ended.outcome == "ok"
    assert ended.ended_at is not None and ended.ended_at >= running.started_at
    assert store.runs(experiment) == [ended]


def test_runs_are_listed_oldest_first_and_per_experiment(
    store: Store, experiment: str, tmp_path: Path
) -> None:
    store.create_experiment(
        "other", source_text="", source_format="ns", source_file=None, ir_json="{}"
    )
    ids = [store.start_run(experiment, tmp_path / f"r{i}") for i in range(3)]
    other = store.start_run("other", tmp_path / "o")
    assert [r.id for r in store.runs(experiment)] == ids
    assert [r.id for r in store.runs("other")] == [other]
    assert len({*ids, other}) == len(ids) + 1


def test_the_open_runs_alone_leave_the_ended_ones_unread(
    store: Store, experiment: str, tmp_path: Path
) -> None:
    # A swap-in reads its experiment's open runs at every command; the soak's thousandth
    # cycle read all 999 ended ones too (1.2x the first cycles' CPU time).
    ids = [store.start_run(experiment, tmp_path / f"r{i}") for i in range(3)]
    store.end_run(ids[0], "ok")
    store.end_run(ids[2], "failed")
    (still,) = store.runs(experiment, open_only=True)
    assert still.id == ids[1] and still.ended_at is None
    assert [r.id for r in store.runs(experiment)] == ids


def test_a_run_ends_only_once(store: Store, experiment: str, tmp_path: Path) -> None:
    run_id = store.start_run(experiment, tmp_path)
    first = store.end_run(run_id, "ok")
    with pytest.raises(UserError) as caught:
        store.end_run(run_id, "failed")
    assert str(caught.value) == (
        f"run {run_id} of experiment 'dumbbell' already ended at "
        f"{first.ended_at.isoformat()} with outcome 'ok'; start a new run instead"
    )
    assert store.runs(experiment) == [first]


def test_ending_an_unknown_run(store: Store, experiment: str, tmp_path: Path) -> None:
    run_id = store.start_run(experiment, tmp_path)
    with pytest.raises(UserError) as caught:
        store.end_run(run_id + 1000, "ok")
    assert str(caught.value) == (
        f"there is no run with id {run_id + 1000}; see an experiment's runs with "
        "`nestbed show NAME`"
    )


def test_runs_of_unknown_experiment(store: Store, tmp_path: Path) -> None:
    with pytest.raises(UserError, match="there is no experiment named 'ghost'"):
        store.start_run("ghost", tmp_path)
    with pytest.raises(UserError, match="there is no experiment named 'ghost'"):
        store.runs("ghost")
