"""Back ends: where an experiment's network lives (``base.Backend``), chosen by name.

``linux`` builds networks on this machine (root); ``fake`` records what it would build, for
tests without root; ``cluster`` spreads them over the hosts whose agents serve the Dask
scheduler named by $NESTBED_CLUSTER (the CLI's ``--cluster``). Importing this package imports
none of them: each is loaded when asked for.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # not typing's: `nestbed exec` imports this package (backend.entry)
if TYPE_CHECKING:
    from typing import Any

    from nestbed.backend.base import Backend

NAMES = ("linux", "fake", "cluster")
ENV = "NESTBED_BACKEND"  # the default back end's name (tests choose the fake one)
CLUSTER_ENV = "NESTBED_CLUSTER"  # the cluster's scheduler (tcp://HOST:8786): its back end


def default_name() -> str:
    """The back end ``get`` gives when asked for none: $NESTBED_BACKEND, else the cluster
    when $NESTBED_CLUSTER names one, else linux."""
    return os.environ.get(ENV) or ("cluster" if os.environ.get(CLUSTER_ENV) else "linux")


def preload(name: str | None = None) -> None:
    """Imports the modules of the back end ``get(name)`` would make, without making it: a
    process started early (the controller, while the network is built) has them loaded
    when it is told to go (the cluster's include Dask's client, which its back end loads
    only when it first reaches the scheduler: 0.3 s)."""
    modules = {"linux": ["nestbed.backend.linux"], "fake": ["nestbed.backend.fake"],
               "cluster": ["nestbed.backend.cluster.backend", "distributed"]}  # fmt: skip
    import importlib

    for module in modules.get(name or default_name(), []):
        importlib.import_module(module)


def get(name: str | None = None) -> Backend:
    """The back end called ``name`` (default: ``default_name``)."""
    from nestbed.errors import UserError  # here: `nestbed exec` imports this package, not it

    name = name or default_name()
    if name == "linux":
        from nestbed.backend.linux import LinuxBackend

        return LinuxBackend()
    if name == "fake":
        from nestbed.backend.fake import FakeBackend

        return FakeBackend()
    if name == "cluster":
        scheduler = os.environ.get(CLUSTER_ENV)
        if not scheduler:
            raise UserError(
                "the cluster back end needs its scheduler's address; give --cluster "
                f"tcp://HOST:8786 or set {CLUSTER_ENV}"
            )
        from nestbed.backend.cluster.backend import ClusterBackend

        return ClusterBackend(scheduler)
    raise UserError(f"there is no back end called {name!r}; use one of {', '.join(NAMES)}")


def __getattr__(name: str) -> Any:
    # On first use: `nestbed exec` reaches ``backend.entry`` without the plan's modules.
    if name == "Backend":
        from nestbed.backend.base import Backend

        return Backend
    raise AttributeError(f"module 'nestbed.backend' has no attribute {name!r}")
