"""Results folders: made on demand, with one clear sentence when the path cannot hold one."""

from __future__ import annotations

from pathlib import Path

from nestbed.errors import UserError


def make_folder(path: Path) -> Path:
    """``path`` as a directory (with its parents), or a UserError naming it and the reason."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(
            f"cannot create the results folder {path} ({exc.strerror}); give another one"
        ) from None
    return path
