"""A pty's window size, set one way for every pty nestbed makes: a server session's, and the
one a command on another host gets there (``cluster.remote``)."""

from __future__ import annotations

import fcntl
import struct
import termios


def resize(master: int, cols: int, rows: int) -> None:
    """Sets the window size on a pty's master end; its foreground group gets SIGWINCH."""
    fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
