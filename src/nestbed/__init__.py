"""nestbed: a network experimentation testbed for one Linux machine."""

__version__ = "0.1.0"

from nestbed.api import Experiment

__all__ = ["Experiment", "__version__"]
