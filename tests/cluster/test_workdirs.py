"""A confined command's folders on a cluster's host (``workdirs``), on this machine: made with
nothing above the node's folder the identity's, a link in their place refused and never
followed, removal that does not follow a link out, and the command's paths and environment
as the host's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nestbed.backend.cluster import workdirs
from nestbed.backend.confine import USER_ENV
from nestbed.errors import EnvironmentProblem
from nestbed.model.options import RunAs

pytestmark = pytest.mark.root

IDENTITY = RunAs(uid=1_900_000_021, gid=1_900_000_022)
HOME = "/results/p/run-1/work/h1"  # the node's working folder on the controlling machine


@pytest.fixture
def root(tmp_path, monkeypatch):
    found = tmp_path / "lib" / "nestbed" / "work"  # the folder above it made too
    monkeypatch.setenv(workdirs.WORK_ENV, str(found))
    return found


def owner_and_mode(path: Path) -> tuple[int, int, int]:
    info = path.lstat()
    return info.st_uid, info.st_gid, info.st_mode & 0o7777


def test_a_nodes_folder_is_the_identitys_and_everything_above_it_roots(root):
    folder = workdirs.prepare("i21iexp", "h1", HOME, IDENTITY)
    assert folder.parent.parent == root / "i21iexp"
    assert owner_and_mode(folder)[:2] == (IDENTITY.uid, IDENTITY.gid)
    assert owner_and_mode(folder.parent) == (0, IDENTITY.gid, 0o750)
    assert owner_and_mode(root / "i21iexp") == (0, IDENTITY.gid, 0o750)
    assert owner_and_mode(root) == (0, 0, 0o711)
    (folder / "kept").write_text("x")
    # A second command of the run on the node finds it as it was; another run gets its own.
    assert workdirs.prepare("i21iexp", "h1", HOME, IDENTITY) == folder
    assert (folder / "kept").exists()
    assert workdirs.prepare("i21iexp", "h1", "/results/p/run-2/work/h1", IDENTITY) != folder


def test_a_link_in_place_of_a_folder_is_refused_and_what_it_points_to_untouched(root, tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    folder = workdirs.prepare("i21iexp", "h1", HOME, IDENTITY)
    os.rmdir(folder)
    folder.symlink_to(target)
    with pytest.raises(EnvironmentProblem, match="is not a folder"):
        workdirs.prepare("i21iexp", "h1", HOME, IDENTITY)
    run = folder.parent
    for path in (folder, run):  # a link of the run's, in its experiment's folder, too
        path.unlink() if path.is_symlink() else os.rmdir(path)
    run.symlink_to(target)
    with pytest.raises(EnvironmentProblem, match="is not a folder"):
        workdirs.prepare("i21iexp", "h1", HOME, IDENTITY)
    assert owner_and_mode(target) == (0, 0, 0o700) and not list(target.iterdir())


def test_removal_takes_the_experiments_folders_and_not_what_a_link_in_them_points_to(
    root, tmp_path
):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("x")
    folder = workdirs.prepare("i21iexp", "h1", HOME, IDENTITY)
    (folder / "link").symlink_to(outside)
    other = workdirs.prepare("i21iother", "h1", HOME, IDENTITY)
    tag = workdirs.leftovers_by_tag()
    assert sorted(t for things in tag.values() for t in things) == [
        f"work folder {root / 'i21iexp'}", f"work folder {root / 'i21iother'}"
    ]  # fmt: skip
    workdirs.remove("i21iexp")
    assert not (root / "i21iexp").exists() and other.exists()
    assert (outside / "precious").read_text() == "x"


def test_a_tools_files_are_made_empty_and_the_identitys_in_a_roots_folder(root):
    found = workdirs.command_folder("i21iexp", HOME, "k1", IDENTITY, ["0-cbr0-0.log"])
    assert owner_and_mode(found) == (0, IDENTITY.gid, 0o750)
    log = found / "0-cbr0-0.log"
    assert log.read_bytes() == b"" and owner_and_mode(log)[:2] == (IDENTITY.uid, IDENTITY.gid)


def test_the_controllers_folder_becomes_the_hosts_in_the_command_and_nothing_else(monkeypatch):
    for name in [*USER_ENV, *(k for k in os.environ if k.startswith("LC_"))]:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setenv("I21I_AGENTS_SECRET", "the-agents")
    there = Path("/var/lib/nestbed/work/e/r/h1")
    argv, env, cwd = workdirs.moved(
        ["sh", "-c", f"cd {HOME} && exec sh -c 'ls {HOME}/x {HOME}0 {HOME}.d'"],
        {"HOME": HOME, "NESTBED_NODE": "h1"}, HOME, there, HOME, confined=True,
    )  # fmt: skip
    assert argv[2] == f"cd {there} && exec sh -c 'ls {there}/x {HOME}0 {HOME}.d'"
    assert env == {"PATH": "/usr/bin:/bin", "HOME": str(there), "NESTBED_NODE": "h1"}
    assert cwd == str(there)
    assert workdirs.moved([], {}, HOME, there, f"{HOME}/sub", confined=True)[2] == f"{there}/sub"
    assert workdirs.moved([], {}, HOME, there, "/tmp", confined=True)[2] == "/tmp"
    assert workdirs.moved([], {}, HOME, there, confined=True)[2] is None
    # An unconfined program keeps the host's environment, under the controller's changes.
    argv, env, _ = workdirs.moved([f"cd {HOME}"], {"NESTBED_NODE": "h1"}, HOME, there,
                                  confined=False)  # fmt: skip
    assert argv == [f"cd {there}"]
    assert env["I21I_AGENTS_SECRET"] == "the-agents" and env["NESTBED_NODE"] == "h1"
    assert workdirs.names(f"cd {HOME} && x", HOME) and not workdirs.names(f"cd {HOME}0", HOME)


def test_an_unconfined_programs_folder_is_roots(root):
    folder = workdirs.prepare("i21kexp", "h1", HOME, None)
    assert owner_and_mode(folder) == (0, 0, 0o755)
    assert owner_and_mode(folder.parent) == (0, 0, 0o750)


def test_a_runs_folders_come_back_without_what_was_planted_and_go_from_the_host(root, tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("root's\n")
    folder = workdirs.prepare("i21kexp", "h1", HOME, IDENTITY)
    (folder / "out").mkdir()
    (folder / "out" / "result.csv").write_text("a,b\n")
    (folder / "shadow").symlink_to("/etc/shadow")
    os.mkfifo(folder / "fifo")
    os.link(secret, folder / "hard")
    other = workdirs.prepare("i21kexp", "h1", "/results/p/run-2/work/h1", IDENTITY)
    found = workdirs.bring_back("i21kexp", {"h1": HOME, "h2": HOME.replace("h1", "h2")})
    assert list(found) == ["h1"]  # h2 never ran a program here
    assert [e.path for e in found["h1"].entries] == ["out", "out/result.csv"]
    assert sorted(found["h1"].left_out) == ["fifo", "hard", "shadow"]
    assert not folder.parent.exists() and other.exists()  # the run's gone, the next's kept
    assert secret.read_text() == "root's\n"
    said = workdirs.left_out_sentence("work/h1", "hostA", found["h1"].left_out)
    assert said == (
        "work/h1 on host hostA: 3 entries did not come back (fifo: not a regular file or "
        "folder; hard: a file with 2 names (a hard link); shadow: a symbolic link)"
    )


def test_a_large_bring_back_is_taken_in_chunks_and_its_spool_goes_with_the_last(root, monkeypatch):
    import pickle

    monkeypatch.setattr(workdirs, "CHUNK_BYTES", 1000)
    folder = workdirs.prepare("i21kexp", "h1", HOME, IDENTITY)
    written = os.urandom(4500)
    (folder / "big.bin").write_bytes(written)
    head, name, size = workdirs.spool_back("i21kexp", {"h1": HOME})
    assert name is not None and len(head) == 1000 < size
    data = bytearray(head)
    while len(data) < size:
        chunk = workdirs.take("i21kexp", name, len(data))
        assert 0 < len(chunk) <= 1000
        data += chunk
    (tree,) = pickle.loads(data).values()
    assert [(e.path, e.data) for e in tree.entries] == [("big.bin", written)]
    assert not (root / "i21kexp" / name).exists()  # taken whole, the spool is gone
    with pytest.raises(EnvironmentProblem):
        workdirs.take("i21kexp", "../../etc/shadow", 0)


def test_a_small_bring_back_comes_in_its_first_answer(root):
    folder = workdirs.prepare("i21kexp", "h1", HOME, IDENTITY)
    (folder / "small.txt").write_text("hello")
    head, name, size = workdirs.spool_back("i21kexp", {"h1": HOME})
    assert name is None and len(head) == size
