"""nestbed: a network experimentation testbed for one Linux machine."""

from __future__ import annotations

__version__ = "0.1.0"

TYPE_CHECKING = False  # not typing's: a plain `nestbed exec` imports nothing it need not
if TYPE_CHECKING:
    from typing import Any

    from nestbed.api import Experiment

__all__ = ["Experiment", "__version__", "swapin"]


def __getattr__(name: str) -> Any:
    # The Python API loads on first use: the controller and the CLI, which import nestbed's
    # modules but not the builder, start a quarter of a second sooner.
    if name == "Experiment":
        from nestbed.api import Experiment

        return Experiment
    raise AttributeError(f"module 'nestbed' has no attribute {name!r}")


def swapin(*args: Any, **kwargs: Any) -> Any:
    """``with nestbed.swapin(exp) as live:`` — see :func:`nestbed.lifecycle.live.swapin`."""
    from nestbed.lifecycle.live import swapin as live_swapin  # the back end loads only when used

    return live_swapin(*args, **kwargs)
