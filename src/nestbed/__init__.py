"""nestbed: a network experimentation testbed for one Linux machine."""

__version__ = "0.1.0"

from typing import Any

from nestbed.api import Experiment

__all__ = ["Experiment", "__version__", "swapin"]


def swapin(*args: Any, **kwargs: Any) -> Any:
    """``with nestbed.swapin(exp) as live:`` — see :func:`nestbed.live.swapin`."""
    from nestbed.live import swapin as live_swapin  # the back end loads only when used

    return live_swapin(*args, **kwargs)
