"""The experiment's life: defined, swapped in, run, swapped out, cleaned up.

``Testbed`` (a store and a back end) owns the state machine and every step of it;
``Active`` is a swapped-in experiment and what a user does with it; ``runs`` holds whole
runs; ``live`` the Python API. Everything that runs experiments — the CLI, the API, sweeps,
linktest, validate, calibrate, the studies — comes through here.
"""

from nestbed.lifecycle.active import Active
from nestbed.lifecycle.testbed import Cleaned, Testbed

__all__ = ["Active", "Cleaned", "Testbed"]
