"""Each user's places for open sessions (``server.session_limit``): taken under the limit,
counted per user, given back once, never taken again after the session is over."""

from __future__ import annotations

import pytest

from nestbed.server.auth import TooMany
from nestbed.server.session_limit import UserSessions


def test_places_are_counted_per_user_and_given_back_once():
    sessions = UserSessions()
    first, second, third = (sessions.place("ada") for _ in range(3))
    first.take(2)
    first.take(2)  # the same session twice is one place
    second.take(2)
    with pytest.raises(TooMany, match=r"already has 2 .*--max-sessions 2\)"):
        third.take(2)
    sessions.place("cy").take(2)  # another user's count is their own
    second.give_back()
    second.give_back()  # once, however often
    assert (sessions.count("ada"), sessions.count("cy")) == (1, 1)
    third.take(2)
    assert sessions.count("ada") == 2
    sessions.place("ada").take(None)  # no limit
    assert sessions.count("ada") == 3


def test_a_session_over_before_its_place_is_taken_never_holds_one():
    sessions = UserSessions()
    late = sessions.place("ada")
    late.give_back()  # its client gone while its start was still checked
    with pytest.raises(TooMany, match="ended before it started"):
        late.take(8)
    assert sessions.count("ada") == 0
