"""Parsing runs nothing: hostile experiment files are refused, with file:line, and touch nothing.

Each file lives in its own folder `exp/` of a fresh temporary tree that also holds a file
outside that folder; after the parse, no file of the tree (nor the targets the scripts name)
may have been created, changed or deleted.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ns_helpers import PRELUDE, line

from nestbed.errors import Problem
from nestbed.spec.ns import Translation, translate

ALTERNATIVE = "program agent (`$node program-agent -command ...`) or tb-set-node-startup"


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(root)): (p.stat().st_mtime_ns, p.stat().st_size)
        for p in sorted(root.rglob("*"))
    }


def parse(tmp_path: Path, body: str, **kwargs: object) -> Translation:
    """Parses BODY (after the prelude) as exp/t.ns; asserts the tree is unchanged."""
    folder = tmp_path / "exp"
    folder.mkdir(exist_ok=True)
    (tmp_path / "outside.tcl").write_text("set n9 [$ns node]\n")
    (folder / "victim.txt").write_text("keep me\n")
    path = folder / "t.ns"
    text = PRELUDE + body.replace("TARGET", str(tmp_path / "made")).strip("\n") + "\n$ns run\n"
    path.write_text(text)
    before = snapshot(tmp_path)
    t = translate(path, **kwargs)  # type: ignore[arg-type]
    assert snapshot(tmp_path) == before
    assert not (tmp_path / "made").exists()
    return t


REFUSED = [
    (
        "exec touch TARGET",
        f"exec is refused: parsing an experiment file runs no programs; run commands on a node with a {ALTERNATIVE}",
    ),
    ("catch {exec touch TARGET}", "exec is refused"),
    ("proc later {} { exec touch TARGET }\nlater", "exec is refused"),
    ('open "|touch TARGET"', "open of a command pipe ('|touch "),
    (
        "socket localhost 22",
        "socket is refused: parsing an experiment file makes no connections; connect from a node with a program agent or tb-set-node-startup",
    ),
    (
        "source ../outside.tcl",
        "/exp/../outside.tcl' is refused: an experiment file may read only files in its own folder (",
    ),
    ("source /etc/hostname", "source '/etc/hostname' is refused"),
    ("open /etc/hostname", "open '/etc/hostname' is refused"),
    ("file exists /etc/hostname", "file exists of '/etc/hostname' is refused"),
    ("cd /tmp", "cd is refused"),
    (
        "file delete victim.txt",
        "file delete is refused: parsing an experiment file changes no files",
    ),
    ("file mkdir TARGET", "file mkdir is refused"),
    ("file rename victim.txt TARGET", "file rename is refused"),
    ("file mtime victim.txt 0", "wrong arguments: use `file mtime PATH`"),
    ("glob *", "glob is refused"),
    ("load /lib/x86_64-linux-gnu/libc.so.6", "load is refused"),
    ("pwd", "pwd is refused"),
]


@pytest.mark.parametrize(("body", "message"), REFUSED, ids=[b for b, _ in REFUSED])
def test_refused_with_file_line_and_nothing_touched(
    tmp_path: Path, body: str, message: str
) -> None:
    t = parse(tmp_path, body)
    matching = [e for e in t.errors if message in e.message]
    assert matching, t.errors
    assert matching[0].file == "t.ns"
    assert matching[0].line == line(body.count("\n") + 1) or matching[0].line == line(1)


def test_open_for_writing_writes_nothing_and_warns(tmp_path: Path) -> None:
    t = parse(
        tmp_path,
        "set f [open TARGET w]\nputs $f hello\nclose $f\nset g [open victim.txt w]\nputs $g gone\nclose $g",
    )
    assert not t.errors
    assert [w.line for w in t.warnings if "for writing writes nothing" in w.message] == [
        line(1),
        line(4),
    ]
    assert (tmp_path / "exp" / "victim.txt").read_text() == "keep me\n"


def test_interpreters_made_by_the_script_are_safe_too(tmp_path: Path) -> None:
    t = parse(tmp_path, "set i [interp create]\n$i eval {exec touch TARGET}")
    assert t.errors
    t = parse(tmp_path, "interp invokehidden {} exec touch TARGET")
    assert t.errors


def test_endless_recursion_is_an_error_at_its_line(tmp_path: Path) -> None:
    t = parse(tmp_path, "proc f {n} {\n    f [incr n]\n}\nf 0")
    assert t.errors == [
        Problem(
            "the script nests calls too deeply (an endless recursion?); make the recursion end",
            "t.ns",
            line(2),
        )
    ]


@pytest.mark.parametrize(
    "body",
    [
        "set s x\nwhile 1 { append s $s }",
        "set l {}\nwhile 1 { lappend l {*}[lrepeat 1000000 x] }",
    ],
)
def test_huge_strings_and_lists_are_stopped_by_the_memory_limit(tmp_path: Path, body: str) -> None:
    t = parse(tmp_path, body)
    assert [e.message for e in t.errors if e.file == "t.ns"] == [
        "the script needs more than 1024 MB of memory (a huge list or string?); make the "
        "experiment's lists and strings smaller"
    ]


def test_endless_loop_is_stopped_by_the_time_limit(tmp_path: Path) -> None:
    t = parse(tmp_path, "while 1 {}", timeout_s=2.0)
    assert [e.message for e in t.errors] == [
        "the script did not finish within 2 s (an endless loop?); fix the loop or make the "
        "experiment smaller"
    ]


def test_files_in_the_folder_are_read_and_sourced(tmp_path: Path) -> None:
    folder = tmp_path / "exp"
    folder.mkdir()
    (folder / "names.csv").write_text("a\nb\nc\n")
    (folder / "lib").mkdir()
    (folder / "lib" / "more.tcl").write_text("set d [$ns node]\n")
    t = parse(
        tmp_path,
        "set f [open names.csv]\n"
        "while {[gets $f name] >= 0} { set $name [$ns node] }\n"
        "close $f\n"
        "if {[file exists lib/more.tcl]} { source lib/more.tcl }",
    )
    assert not t.errors, t.errors
    assert [n.name for n in t.document.nodes] == ["a", "b", "c", "d"]


def test_loading_through_the_api_refuses_too(tmp_path: Path) -> None:
    """`load` (behind parse, convert, create, run, sweep and the Python API) uses the sandbox."""
    from nestbed.errors import SpecError
    from nestbed.spec import load

    folder = tmp_path / "exp"
    folder.mkdir()
    path = folder / "t.ns"
    path.write_text(PRELUDE + f"set n0 [$ns node]\nexec touch {tmp_path / 'made'}\n$ns run\n")
    with pytest.raises(SpecError) as info:
        load(path)
    assert [(p.line, p.message.split(":")[0]) for p in info.value.problems] == [
        (line(2), "exec is refused")
    ]
    assert not (tmp_path / "made").exists()


def test_a_link_in_the_folder_to_a_file_outside_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "exp"
    folder.mkdir()
    (tmp_path / "secret.txt").write_text("secret\n")
    (folder / "looks-inside.txt").symlink_to(tmp_path / "secret.txt")
    t = parse(tmp_path, "set f [open looks-inside.txt]\nputs [read $f]")
    assert [e.message.split(" is refused")[0] for e in t.errors] == ["open 'looks-inside.txt'"]
