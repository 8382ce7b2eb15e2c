"""Where nestbed's own Rust programs are: one lookup for every layer that starts them."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from nestbed.errors import EnvironmentProblem

_CHECKOUT = Path(__file__).resolve().parents[2]


def built_binary(name: str) -> str:
    """A nestbed Rust binary: $NESTBED_<NAME>, this checkout's release build, or the PATH."""
    env = "NESTBED_" + name.removeprefix("nestbed-").upper()
    here = _CHECKOUT / "target" / "release" / name
    found = os.environ.get(env) or (str(here) if here.exists() else None) or shutil.which(name)
    if not found:
        raise EnvironmentProblem(
            f"{name} is not built; run `make setup` (it runs cargo build --release)"
        )
    return found


# A delay measured by nestbed-probe is the link's when arrivals are timed by the kernel's
# receive time (when the datagram reached the receiving node), not by when the probe, waiting
# for a core on a busy host, read it.
KERNEL_TIMES = "--kernel-times"


def probe_recv(bind: str, *options: str) -> list[str]:
    """nestbed-probe receiving on ``bind`` (ADDRESS:PORT) with further options."""
    return [built_binary("nestbed-probe"), "recv", "--bind", bind, *options]


def probe_send(to: str, *options: str) -> list[str]:
    """nestbed-probe sending to ``to`` (ADDRESS:PORT) with further options."""
    return [built_binary("nestbed-probe"), "send", "--to", to, *options]
