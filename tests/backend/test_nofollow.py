"""A folder an experiment's processes could change is read and written by folder descriptors
(``nofollow``): what a hostile program planted in it (links, FIFOs, devices, hard links) is
left out and said, never followed, and what comes back is bounded."""

from __future__ import annotations

import os
import stat

import pytest

from nestbed.backend import nofollow
from nestbed.backend.nofollow import Entry, Tree, read_tree, write_tree


@pytest.fixture
def planted(tmp_path):
    """A working folder with a program's files and a hostile program's plants."""
    secret = tmp_path / "secret"
    secret.write_text("root's own\n")
    work = tmp_path / "work"
    (work / "sub" / "deeper").mkdir(parents=True)
    (work / "empty").mkdir()
    (work / "note.txt").write_text("kept\n")
    (work / "sub" / "data.bin").write_bytes(bytes(range(256)) * 4)
    (work / "sub" / "run.sh").write_text("#!/bin/sh\n")
    (work / "sub" / "run.sh").chmod(0o4755)  # a set-id bit never comes back
    (work / "shadow").symlink_to("/etc/shadow")
    (work / "up").symlink_to(tmp_path)
    os.mkfifo(work / "fifo")
    os.link(secret, work / "hard")
    os.mknod(work / "null", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    return work


def test_files_and_folders_come_back_and_what_was_planted_is_left_out_and_said(planted, tmp_path):
    tree = read_tree(planted)
    assert [e.path for e in tree.entries] == [
        "empty", "note.txt", "sub", "sub/data.bin", "sub/deeper", "sub/run.sh"
    ]  # fmt: skip
    assert tree.left_out == {
        "fifo": "not a regular file or folder",
        "hard": "a file with 2 names (a hard link)",
        "null": "not a regular file or folder",
        "shadow": "a symbolic link",
        "up": "a symbolic link",
    }
    back = tmp_path / "back"
    back.mkdir()
    assert write_tree(back, tree, owner=(1_900_000_021, 1_900_000_022)) == {}
    assert (back / "note.txt").read_text() == "kept\n"
    assert (back / "sub" / "data.bin").read_bytes() == bytes(range(256)) * 4
    assert (back / "empty").is_dir() and (back / "sub" / "deeper").is_dir()
    assert stat.S_IMODE((back / "sub" / "run.sh").stat().st_mode) == 0o755
    found = {p.relative_to(back).as_posix() for p in back.rglob("*")}
    assert found == {e.path for e in tree.entries}
    for path in back.rglob("*"):
        info = path.lstat()
        assert not stat.S_ISLNK(info.st_mode)
        assert (info.st_uid, info.st_gid) == (1_900_000_021, 1_900_000_022)


def test_what_does_not_fit_the_limit_is_left_out_and_said(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    for name in ("a", "b", "c"):
        (work / name).write_bytes(b"x" * 1000)
    tree = read_tree(work, limit_bytes=2 * (nofollow.ENTRY_BYTES + 1000))
    assert [e.path for e in tree.entries] == ["a", "b"]
    assert tree.left_out == {"c": "beyond the limit of what a folder brings back"}
    assert tree.size == 2 * (nofollow.ENTRY_BYTES + 1000)
    # Empty files cost their entry: many of them are cut at the same limit.
    many = tmp_path / "many"
    many.mkdir()
    for i in range(10):
        (many / f"{i:02}").touch()
    tree = read_tree(many, limit_bytes=4 * nofollow.ENTRY_BYTES)
    assert len(tree.entries) == 4 and len(tree.left_out) == 6


def test_folders_nested_deeper_than_the_limit_are_left_out(tmp_path):
    work = tmp_path / "work"
    deep = work.joinpath(*["d"] * (nofollow.MAX_DEPTH + 3))
    deep.mkdir(parents=True)
    tree = read_tree(work)
    assert len(tree.entries) == nofollow.MAX_DEPTH - 1
    ((path, why),) = tree.left_out.items()
    assert path == "/".join(["d"] * nofollow.MAX_DEPTH)
    assert why == f"a folder nested deeper than {nofollow.MAX_DEPTH}"


def test_a_file_swapped_for_a_link_or_fifo_after_the_look_is_not_followed_nor_waited_on(
    tmp_path,
):
    work = tmp_path / "work"
    work.mkdir()
    (work / "link").symlink_to("/etc/shadow")
    os.mkfifo(work / "fifo")
    folder = os.open(work, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(OSError):  # ELOOP from the kernel: O_NOFOLLOW
            nofollow._read_file("link", folder, 1 << 20)
        with pytest.raises(OSError, match="no longer a regular file"):
            nofollow._read_file("fifo", folder, 1 << 20)  # opened without waiting, refused
    finally:
        os.close(folder)


def test_writing_never_goes_through_a_name_already_there(tmp_path):
    target = tmp_path / "target"
    target.write_text("untouched\n")
    back = tmp_path / "back"
    back.mkdir()
    (back / "note.txt").symlink_to(target)
    (back / "sub").symlink_to(tmp_path)
    tree = Tree([Entry("note.txt", 0o644, b"evil\n"), Entry("sub", 0o755),
                 Entry("sub/target", 0o644, b"evil\n"), Entry("../up", 0o644, b"evil\n")])  # fmt: skip
    failed = write_tree(back, tree)
    assert set(failed) == {"note.txt", "sub", "sub/target", "../up"}
    assert target.read_text() == "untouched\n"
    assert not (tmp_path / "up").exists()
