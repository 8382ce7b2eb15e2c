"""A host's ledger of the node slots its experiments' shares hold (``slots``), without root:
its state folder is a temporary one."""

from __future__ import annotations

import threading

import pytest

from nestbed.backend import linux
from nestbed.backend.cluster import slots
from nestbed.backend.plan import experiment_tag


@pytest.fixture(autouse=True)
def state_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(linux, "RUN_DIR", tmp_path)
    return tmp_path


def test_slots_taken_are_held_until_given_back():
    slots.take("a", 2, limit=4)
    slots.take("b", 1, limit=4)
    assert slots.held() == 3
    assert slots.held(besides="a") == 1
    slots.give_back("a")
    assert slots.held() == 1
    slots.give_back("a")  # twice, or never taken: nothing happens
    slots.give_back("never")
    assert slots.held() == 1


def test_a_share_is_refused_the_slots_others_hold():
    slots.take("a", 3, limit=4)
    with pytest.raises(slots.HostFull, match=r"\(3 of 4 held; experiment b needs 2\)"):
        slots.take("b", 2, limit=4)
    assert slots.held() == 3  # the refused share holds nothing
    slots.take("b", 1, limit=4)
    slots.take("a", 3, limit=4)  # its own slots taken again (a retried build) are not others'
    assert slots.held() == 4


def test_shares_taking_slots_at_once_never_hold_more_than_the_host_has():
    taken, refused = [], []
    start = threading.Barrier(12)

    def share(n: int) -> None:
        start.wait()
        try:
            slots.take(f"e{n}", 1, limit=5)
            taken.append(n)
        except slots.HostFull:
            refused.append(n)

    threads = [threading.Thread(target=share, args=(n,)) for n in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(taken) == 5 and len(refused) == 7
    assert slots.held() == 5


def test_slots_left_held_are_the_experiments_leftovers_until_cleanup_removes_them(state_folder):
    slots.take("kept", 2, limit=4)
    slots.take("other", 1, limit=4)
    (state_folder / slots.LEDGER / "half.new").write_text("{")  # one being written
    tag = experiment_tag("kept")
    assert slots.leftovers_by_tag() == {
        tag: ["2 node slots held by experiment kept"],
        experiment_tag("other"): ["1 node slot held by experiment other"],
    }
    assert slots.remove_leftovers({tag}) == ["2 node slots held by experiment kept"]
    assert slots.held() == 1
