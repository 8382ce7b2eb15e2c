"""A run's file is opened one component at a time without following links: what a program
of the experiment puts in its run folder cannot lead the server outside it."""

from __future__ import annotations

import os

import pytest

from nestbed.server.auth import NotFound
from nestbed.server.runs import open_inside


def test_only_regular_files_reached_without_links_are_opened(tmp_path):
    run = tmp_path / "run"
    (run / "plots").mkdir(parents=True)
    (run / "plots" / "a.txt").write_text("mine")
    (tmp_path / "secret.txt").write_text("not for the web")
    (run / "escape.txt").symlink_to(tmp_path / "secret.txt")
    (run / "escape-dir").symlink_to(tmp_path)
    os.mkfifo(run / "fifo")  # opened plainly, it would hang the server's reader
    fd = open_inside(run, "plots/a.txt")
    with os.fdopen(fd) as f:
        assert f.read() == "mine"
    for path in ("escape.txt", "escape-dir/secret.txt", "fifo", "plots", "../secret.txt", "",
                 "plots//a.txt", "nothing"):  # fmt: skip
        with pytest.raises(NotFound):
            os.close(open_inside(run, path))
    # The run folder itself replaced by a link (a program cannot, but a folder moved can).
    (tmp_path / "moved").symlink_to(run)
    with pytest.raises(NotFound):
        os.close(open_inside(tmp_path / "moved", "plots/a.txt"))
