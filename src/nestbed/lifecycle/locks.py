"""Who owns an experiment on this machine: a lock per experiment and one for the machine.

An experiment's lock (``.locks/TAG.lock`` under the back end's state root) is taken by its
swap-in and inherited by its controller, which holds it for as long as the experiment lives;
the kernel releases it the moment its last holder dies. So an experiment whose lock can be
taken has no living owner: a crashed swap-in, a killed controller. That is the test
``cleanup`` uses; it never asks the store, which may be another user's. The machine's lock
is shared by every swap-in and swap-out while it works and taken exclusively by cleanup, so
cleanup never removes what a swap-in is still building or a swap-out is taking apart.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from nestbed.backend.plan import experiment_tag
from nestbed.errors import UserError

_DIR = ".locks"  # hidden: no experiment is called that
_MACHINE = "machine.lock"


def _path(root: Path, name: str) -> Path:
    directory = root / _DIR
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    return directory / name


class ExperimentLock:
    """The exclusive hold on one experiment (by its tag), as an open file descriptor."""

    def __init__(self, root: Path, experiment: str):
        self.path = _path(root, f"{experiment_tag(experiment)}.lock")
        self.experiment = experiment
        self.fd: int | None = None

    def acquire(self) -> ExperimentLock:
        """Takes the lock, or one UserError if someone alive holds it."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise UserError(
                f"experiment {self.experiment} is being swapped in or out, or is active, in "
                "another process on this machine; wait for it, or swap it out first"
            ) from None
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> ExperimentLock:
        return self.acquire()

    def __exit__(self, *_: object) -> None:
        self.release()


def owned(root: Path, tag: str) -> bool:
    """Whether a living process (a swap-in, swap-out or controller) holds the lock of the
    experiment with this tag."""
    path = root / _DIR / f"{tag}.lock"
    if not path.exists():
        return False
    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


@contextlib.contextmanager
def machine(root: Path, *, shared: bool) -> Iterator[None]:
    """The machine's lock: shared by swap-ins while they take their experiment's lock,
    exclusive for cleanup, so cleanup never sees a swap-in that holds nothing yet."""
    fd = os.open(_path(root, _MACHINE), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
