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


def test_a_folder_closed_to_others_above_a_path_is_named(tmp_path):
    from nestbed.server.confinement import closed_to_others

    inner = tmp_path / "open" / "closed" / "venv" / "python"
    inner.parent.mkdir(parents=True)
    inner.touch()
    for folder in (tmp_path, tmp_path / "open", tmp_path / "open" / "closed", inner.parent):
        folder.chmod(0o755)
    # (pytest's own temporary folder, above tmp_path, is closed: nothing below it is named)
    assert tmp_path not in (closed_to_others(inner) or tmp_path.parent).parents
    (tmp_path / "open" / "closed").chmod(0o700)
    assert closed_to_others(inner) == tmp_path / "open" / "closed"


def test_a_file_gone_between_listing_and_stat_is_left_out(tmp_path, monkeypatch):
    # The report's drawer renames manifest.json.tmp over manifest.json while the server lists
    # the folder; that listing once failed the whole request (an internal error).
    from nestbed.server import runs

    (tmp_path / "manifest.json").write_text("{}")
    listed = [(str(tmp_path), [], ["manifest.json", "manifest.json.tmp"])]
    monkeypatch.setattr(runs.os, "walk", lambda root, followlinks: iter(listed))
    assert list(runs.files(tmp_path)) == [("manifest.json", 2)]


def test_a_linktest_report_of_any_shape_never_fails_the_run_s_page(tmp_path):
    # A program of the experiment can write into its run's folder, linktest's files too.
    import json

    from nestbed.results.folder import RunFolder
    from nestbed.server.runs import linktest_reports

    for folder, report in [
        ("linktest", {"checks": [{"verdict": "pass", "n": 1}, "x", {"verdict": ["?"]},
                                 {"verdict": "fail", "n": 2}]}),
        ("linktest-2", {"checks": None}),
        ("linktest-3", [1, 2]),
        ("linktest-4", {"checks": {"verdict": "fail"}}),
    ]:  # fmt: skip
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "linktest.json").write_text(json.dumps(report))
    found = {r["folder"]: r["checks"] for r in linktest_reports(RunFolder(tmp_path))}
    assert found == {
        "linktest": [{"verdict": "fail", "n": 2}, {"verdict": "pass", "n": 1}, {"verdict": ["?"]}],
        "linktest-2": [],
        "linktest-4": [],
    }
