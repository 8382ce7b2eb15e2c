"""Creating, reading, listing, changing and deleting experiments, on both backends."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime

import pytest

from nestbed.errors import InternalError, UserError
from nestbed.store import State, Store

IR = json.dumps({"name": "dumbbell", "nodes": ["h1", "h2"]}, sort_keys=True)
SOURCE = "set ns [new Simulator]\nset h1 [$ns node]\nset h2 [$ns node]\n$ns run\n"


def create(store: Store, name: str = "dumbbell", source: str = SOURCE, ir: str = IR):
    return store.create_experiment(
        name, source_text=source, source_format="ns", source_file=f"{name}.ns", ir_json=ir
    )


def test_create_then_get_returns_every_column(store: Store) -> None:
    before = datetime.now(UTC)
    created = create(store)
    after = datetime.now(UTC)

    got = store.get("dumbbell")
    assert got == created
    assert got.name == "dumbbell"
    assert got.source_text == SOURCE
    assert got.source_format == "ns"
    assert got.source_file == "dumbbell.ns"
    assert got.source_sha256 == hashlib.sha256(SOURCE.encode()).hexdigest()
    assert got.ir_json == IR
    assert got.ir_sha256 == hashlib.sha256(IR.encode()).hexdigest()
    assert got.state is State.DEFINED
    assert got.error is None
    for stamp in (got.created_at, got.updated_at, got.state_changed_at):
        assert stamp.tzinfo is not None and stamp.utcoffset().total_seconds() == 0
        assert before <= stamp <= after


def test_record_is_frozen(store: Store) -> None:
    record = create(store)
    with pytest.raises(AttributeError):
        record.state = State.ACTIVE  # type: ignore[misc]


def test_list_is_ordered_by_name(store: Store) -> None:
    names = ["m-2", "b", "Z9", "a-1", "m-10"]
    for name in names:
        create(store, name)
    assert [r.name for r in store.list()] == sorted(names)


def test_list_of_empty_store_is_empty(store: Store) -> None:
    assert store.list() == []


def test_find_returns_none_for_unknown_name(store: Store) -> None:
    assert store.find("ghost") is None


def test_get_unknown_name_names_it_and_suggests_list(store: Store) -> None:
    with pytest.raises(UserError) as caught:
        store.get("ghost")
    assert str(caught.value) == (
        "there is no experiment named 'ghost'; see the experiments with `nestbed list`"
    )


def test_duplicate_name_is_refused_and_keeps_the_first(store: Store) -> None:
    first = create(store)
    with pytest.raises(UserError) as caught:
        create(store, source="something else")
    assert str(caught.value) == (
        "an experiment named 'dumbbell' already exists; delete it with "
        "`nestbed delete dumbbell` or choose another name with --name"
    )
    assert store.get("dumbbell") == first
    assert len(store.history("dumbbell")) == 1


@pytest.mark.parametrize("bad", ["", "has space", "under_score", "dot.ted", "ümlaut", "a/b"])
def test_invalid_names_are_refused(store: Store, bad: str) -> None:
    with pytest.raises(UserError) as caught:
        create(store, bad)
    assert str(caught.value) == (
        f"experiment name {bad!r} is not valid; use only letters, digits and '-' "
        "(names become parts of host names)"
    )
    assert store.list() == []


def test_unknown_source_format_is_a_bug(store: Store) -> None:
    with pytest.raises(InternalError):
        store.create_experiment(
            "x", source_text="", source_format="tcl", source_file=None, ir_json="{}"
        )


def test_ir_that_is_not_json_is_a_bug(store: Store) -> None:
    with pytest.raises(InternalError):
        store.create_experiment(
            "x", source_text="", source_format="yaml", source_file=None, ir_json="{nope"
        )


def test_delete_removes_experiment_history_and_runs(store: Store, tmp_path) -> None:
    create(store)
    create(store, "other")
    store.start_run("dumbbell", tmp_path)
    store.delete("dumbbell")
    assert store.find("dumbbell") is None
    assert [r.name for r in store.list()] == ["other"]
    again = create(store)
    assert [c.to_state for c in store.history("dumbbell")] == [State.DEFINED]
    assert store.runs("dumbbell") == []
    assert again.state is State.DEFINED


def test_delete_unknown_name_is_a_user_error(store: Store) -> None:
    with pytest.raises(UserError, match="there is no experiment named 'ghost'"):
        store.delete("ghost")


def test_delete_of_active_experiment_is_refused(store: Store) -> None:
    create(store)
    store.transition("dumbbell", State.SWAPPING_IN)
    store.transition("dumbbell", State.ACTIVE)
    with pytest.raises(UserError) as caught:
        store.delete("dumbbell")
    assert str(caught.value) == (
        "experiment 'dumbbell' is active and cannot be deleted; "
        "swap it out first with `nestbed swapout dumbbell`"
    )
    assert store.get("dumbbell").state is State.ACTIVE


@pytest.mark.parametrize(
    ("path", "deletable"),
    [
        ([], True),
        ([State.SWAPPING_IN], False),
        ([State.SWAPPING_IN, State.ACTIVE, State.SWAPPING_OUT], False),
        ([State.SWAPPING_IN, State.ACTIVE, State.SWAPPING_OUT, State.SWAPPED], True),
        ([State.SWAPPING_IN, State.FAILED], True),
    ],
)
def test_delete_is_allowed_only_when_nothing_runs(
    store: Store, path: list[State], deletable: bool
) -> None:
    create(store)
    for state in path:
        store.transition("dumbbell", state)
    if deletable:
        store.delete("dumbbell")
        assert store.find("dumbbell") is None
    else:
        with pytest.raises(UserError, match="cannot be deleted"):
            store.delete("dumbbell")
        assert store.find("dumbbell") is not None


def test_update_ir_replaces_definition_and_hashes(store: Store) -> None:
    created = create(store)
    new_ir = json.dumps({"name": "dumbbell", "nodes": ["h1", "h2", "h3"]})
    updated = store.update_ir(
        "dumbbell",
        source_text="nodes: [h1, h2, h3]\n",
        source_format="yaml",
        source_file="dumbbell.yaml",
        ir_json=new_ir,
    )
    assert updated == store.get("dumbbell")
    assert updated.source_format == "yaml"
    assert updated.source_file == "dumbbell.yaml"
    assert updated.ir_json == new_ir
    assert updated.ir_sha256 == hashlib.sha256(new_ir.encode()).hexdigest()
    assert updated.source_sha256 == hashlib.sha256(b"nodes: [h1, h2, h3]\n").hexdigest()
    assert updated.ir_sha256 != created.ir_sha256
    assert updated.created_at == created.created_at
    assert updated.updated_at >= created.updated_at
    assert updated.state_changed_at == created.state_changed_at


def test_update_ir_of_active_experiment_is_refused(store: Store) -> None:
    created = create(store)
    store.transition("dumbbell", State.SWAPPING_IN)
    store.transition("dumbbell", State.ACTIVE)
    with pytest.raises(UserError) as caught:
        store.update_ir(
            "dumbbell", source_text="", source_format="ns", source_file=None, ir_json="{}"
        )
    assert str(caught.value) == (
        "experiment 'dumbbell' is active, so its definition cannot be changed; "
        "swap it out first with `nestbed swapout dumbbell`"
    )
    assert store.get("dumbbell").ir_json == created.ir_json


def test_data_survives_reopening(db_url: str) -> None:
    with Store.open(db_url) as first:
        created = create(first)
    with Store.open(db_url) as second:
        assert second.get("dumbbell") == created
