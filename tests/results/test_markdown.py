"""The one markdown table writer: escaping and shape."""

from __future__ import annotations

import pytest

from nestbed.results.markdown import table


def test_cells_with_pipes_and_line_breaks_stay_in_their_column():
    lines = table(["program", "output"], [["p|1", "a\nb"], ["p2", None]], ["left", "right"])
    assert lines == [
        "| program | output |",
        "|---|---:|",
        "| p\\|1 | a b |",
        "| p2 |  |",
    ]
    # Every line has as many unescaped separators as the header.
    assert {line.replace("\\|", "").count("|") for line in lines} == {3}


def test_a_backslash_before_a_pipe_cannot_undo_its_escape():
    (_, _, row) = table(["x"], [["a\\|b"]])
    assert row == "| a\\\\\\|b |"


def test_a_row_of_the_wrong_width_is_a_bug_not_a_short_row():
    with pytest.raises(ValueError, match="a row of 1 cells in a table of 2 columns"):
        table(["a", "b"], [["only"]])
