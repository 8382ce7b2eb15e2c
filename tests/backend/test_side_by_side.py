"""The Linux back end's ``_side_by_side``: calls run on a few threads, their results in the
calls' order, and the first error raised only once every call has run. Pure: no root."""

from __future__ import annotations

import threading

import pytest

from nestbed.backend import linux


def test_results_come_in_the_calls_order_from_several_threads():
    seen: set[int] = set()
    barrier = threading.Barrier(2)  # two calls must be under way at once to pass it

    def call(i: int) -> int:
        if i < 2:
            barrier.wait(timeout=30)
        seen.add(threading.get_ident())
        return i * i

    assert linux._side_by_side([lambda i=i: call(i) for i in range(20)]) == [
        i * i for i in range(20)
    ]
    assert len(seen) >= 2


def test_the_first_error_is_raised_after_every_call_ran():
    ran: list[int] = []

    def call(i: int) -> None:
        ran.append(i)
        if i in (3, 7):
            raise ValueError(f"call {i}")

    with pytest.raises(ValueError, match="call 3"):
        linux._side_by_side([lambda i=i: call(i) for i in range(10)])
    assert sorted(ran) == list(range(10))
