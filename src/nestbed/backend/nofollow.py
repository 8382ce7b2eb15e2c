"""Files in folders an experiment's (untrusted) processes can change, opened, read and written
as root without following anything they put there: one component at a time from a folder's
descriptor, with ``O_NOFOLLOW`` (a symbolic link is refused by the kernel, not followed), and
only regular files with one name (a hard link's other name may be anyone's file) or folders.

``open_below`` opens one file so (the server serves a run's files with it). ``read_tree``
reads a whole folder so, bounded (``LIMIT_BYTES`` and ``MAX_DEPTH``), saying what it left
out and why; ``write_tree`` writes what it read into another folder the same way, creating
every file anew (``O_EXCL``), so it never writes through a name that was there. A cluster's
host reads a node's working folder with the first and the controlling machine writes it into
the run's results with the second (``cluster/workdirs.py``).
"""

from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

# What one folder brings back at most: its files' bytes, each file or folder also counting
# ENTRY_BYTES, so that a million empty files cost as much as 512 MB would and are cut at the
# same limit. As a program's output (OUTPUT_LIMIT in control/programs.py).
LIMIT_BYTES = 64 * 1024 * 1024
ENTRY_BYTES = 512  # per file or folder
MAX_DEPTH = 32  # folders in folders: each level holds a descriptor open while it is read
_WALK = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_LIST = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO put in a file's place after it was looked at opens without waiting.
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class NotBelow(OSError):
    """A path that is no regular file reached through folders alone."""


def plain_parts(relative: str) -> list[str] | None:
    """The components of a relative path, or None if any is empty, ``.``, ``..`` or odd."""
    parts = relative.split("/") if relative else []
    if any(p in ("", ".", "..") or "\\" in p or "\0" in p for p in parts):
        return None
    return parts


def open_below(root: Path, relative: str) -> int:
    """A descriptor of the regular file ``root/relative``, opened one component at a time
    with ``O_NOFOLLOW`` from a descriptor of ``root`` (a link put in place meanwhile is
    refused by the kernel, not followed); ``NotBelow`` for anything else."""
    parts = plain_parts(relative)
    if not parts:
        raise NotBelow(f"{relative!r} is not a plain relative path")
    opened: list[int] = []
    try:
        opened.append(os.open(root, _WALK))
        for part in parts[:-1]:
            opened.append(os.open(part, _WALK, dir_fd=opened[-1]))
        fd = os.open(parts[-1], _READ, dir_fd=opened[-1])
    except OSError as exc:
        raise NotBelow(f"{relative!r}: {exc.strerror}") from exc
    finally:
        for handle in opened:
            os.close(handle)
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO or device would block or leak
        os.close(fd)
        raise NotBelow(f"{relative!r} is not a regular file")
    return fd


@dataclass(frozen=True)
class Entry:
    """A file (its bytes) or a folder (``data`` None) by its path in the folder read."""

    path: str
    mode: int  # its permission bits
    data: bytes | None = None


@dataclass
class Tree:
    """What ``read_tree`` read, in walking order (a folder before what is in it), and what it
    left out: path -> why, in a few words."""

    entries: list[Entry] = field(default_factory=list)
    left_out: dict[str, str] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return sum(ENTRY_BYTES + len(e.data or b"") for e in self.entries)


def read_tree(folder: Path, limit_bytes: int = LIMIT_BYTES) -> Tree:
    """Every folder and regular file with one name under ``folder`` (itself reached with
    no link at its end), in name order, while they fit ``limit_bytes``; links, FIFOs,
    sockets, devices, files with other names, what is nested deeper than ``MAX_DEPTH`` and
    what does not fit are left out, each said."""
    tree = Tree()
    top = os.open(folder, _LIST)
    try:
        _read_folder(top, "", 1, tree, [limit_bytes])
    finally:
        os.close(top)
    return tree


def _read_folder(fd: int, prefix: str, depth: int, tree: Tree, budget: list[int]) -> None:
    for name in sorted(os.listdir(fd)):
        path = prefix + name
        try:
            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            continue  # removed meanwhile
        why = _refused(info, depth)
        if why is None and budget[0] < ENTRY_BYTES + (info.st_size if _regular(info) else 0):
            why = "beyond the limit of what a folder brings back"
        if why is not None:
            tree.left_out[path] = why
            continue
        try:
            if stat.S_ISDIR(info.st_mode):
                child = os.open(name, _LIST, dir_fd=fd)
                try:
                    budget[0] -= ENTRY_BYTES
                    tree.entries.append(Entry(path, stat.S_IMODE(info.st_mode)))
                    _read_folder(child, path + "/", depth + 1, tree, budget)
                finally:
                    os.close(child)
            else:
                data = _read_file(name, fd, budget[0] - ENTRY_BYTES)
                budget[0] -= ENTRY_BYTES + len(data)
                tree.entries.append(Entry(path, stat.S_IMODE(info.st_mode), data))
        except OSError as exc:  # changed between the look and the open: not what was seen
            tree.left_out[path] = f"changed while it was read ({exc.strerror or exc})"


def _regular(info: os.stat_result) -> bool:
    return stat.S_ISREG(info.st_mode) and info.st_nlink == 1


def _refused(info: os.stat_result, depth: int) -> str | None:
    """Why an entry is not read, or None."""
    mode = info.st_mode
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return f"a folder nested deeper than {MAX_DEPTH}" if depth >= MAX_DEPTH else None
    if not stat.S_ISREG(mode):
        return "not a regular file or folder"
    if info.st_nlink != 1:
        return f"a file with {info.st_nlink} names (a hard link)"
    return None


def _read_file(name: str, folder: int, limit: int) -> bytes:
    """The bytes of the regular file ``name`` in ``folder``, checked again once open (it may
    have been swapped for another since it was looked at); OSError if it is not one or has
    grown beyond ``limit``."""
    fd = os.open(name, _READ, dir_fd=folder)
    try:
        if not _regular(os.fstat(fd)):
            raise OSError(0, "it is no longer a regular file with one name")
        chunks, size = [], 0
        while chunk := os.read(fd, min(1 << 20, limit + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise OSError(0, "it grew beyond the limit of what a folder brings back")
        return b"".join(chunks)
    finally:
        os.close(fd)


def write_tree(folder: Path, tree: Tree, owner: tuple[int, int] | None = None) -> dict[str, str]:
    """Writes ``tree`` into ``folder`` (which exists): every folder made (or entered, if
    there), every file made anew, never through a link; each given to ``owner`` (uid, gid)
    if any. What could not be written (a name already there), path -> why."""
    failed: dict[str, str] = {}
    stack: list[tuple[str, int]] = [("", os.open(folder, _LIST))]  # open folders, deepest last
    try:
        for entry in tree.entries:
            parent, _, name = entry.path.rpartition("/")
            while len(stack) > 1 and stack[-1][0] != parent:
                os.close(stack.pop()[1])
            if stack[-1][0] != parent or plain_parts(entry.path) is None:
                failed[entry.path] = "its folder was not written, or its name is not plain"
                continue
            try:
                fd = _write_entry(stack[-1][1], name, entry, owner)
            except OSError as exc:
                failed[entry.path] = f"could not be written ({exc.strerror or exc})"
                continue
            if fd is not None:
                stack.append((entry.path, fd))
    finally:
        for _, fd in stack:
            os.close(fd)
    return failed


def _write_entry(parent: int, name: str, entry: Entry, owner: tuple[int, int] | None) -> int | None:
    """Makes one folder (its descriptor, open) or file (None) in ``parent``."""
    mode = entry.mode & 0o777  # never set-id bits
    if entry.data is None:
        # A folder already there is entered (a link or file there is refused by the open).
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, mode, dir_fd=parent)
        fd = os.open(name, _LIST, dir_fd=parent)
    else:
        fd = os.open(name, _CREATE, mode, dir_fd=parent)
    try:
        if owner is not None:
            os.fchown(fd, *owner)
        os.fchmod(fd, mode)  # as read, not as the umask left it
        if entry.data is None:
            return fd
        view = memoryview(entry.data)
        while view:
            view = view[os.write(fd, view) :]
    except BaseException:
        os.close(fd)
        raise
    os.close(fd)
    return None
