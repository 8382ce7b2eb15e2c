"""A results file is put in place whole: a reader finds the old file or the new one."""

from __future__ import annotations

import pytest

from nestbed.results.folder import write_whole


def test_a_file_is_replaced_whole_and_a_failed_writing_leaves_the_old_one(tmp_path):
    path = tmp_path / "report.md"
    path.write_text("old\n")
    seen = []

    def writing(tmp):
        tmp.write_text("new, half")
        seen.append(path.read_text())  # what a reader finds meanwhile
        tmp.write_text("new\n")

    write_whole(path, writing)
    assert seen == ["old\n"] and path.read_text() == "new\n"

    def failing(tmp):
        tmp.write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_whole(path, failing)
    assert path.read_text() == "new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.md"]  # no temporary left
