"""A cluster started from this machine over SSH (`nestbed ssh-agents`): the scheduler here,
and on each host an agent started by Dask's SSH deployment, the machinery of
``distributed.SSHCluster`` (its ``Worker`` processes in a ``SpecCluster``, on asyncssh).

``SSHCluster`` itself gives every worker the same options and starts the scheduler on the
first host; nestbed's agents each need their host's name, and the scheduler belongs on the
controlling machine, where `nestbed` runs and experiments are controlled from. So the same
pieces are put together here: one ``distributed.deploy.ssh.Worker`` per host whose worker
class is the agent (``agent.SSHAgent``), beside a local ``distributed.Scheduler``.

Before anything starts, every host is reached over SSH and asked whether its Python has
nestbed, so a host that cannot serve is named with its reason and nothing is left on the
others. The agents live as long as the command: stopping it stops them (SIGTERM through
SSH, then SIGKILL after ``STOP_S``), as stopping a `nestbed agent` does.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import re
import shlex
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nestbed.backend.cluster.agent import SSH_FAILURE, resource
from nestbed.backend.cluster.share import HOST_NAME_RE
from nestbed.errors import EnvironmentProblem, UserError

DEFAULT_SSH_PORT = 22
DEFAULT_SCHEDULER_PORT = 8786
CHECK_S = 30.0  # to reach a host over SSH and ask its Python for nestbed
JOIN_S = 120.0  # for every started agent to join the scheduler
STOP_S = 10.0  # an agent asked to stop (SIGTERM) is killed after this long
_SAFE_PATH = re.compile(r"^/[A-Za-z0-9_./+-]+$")
_LOG = "distributed.deploy.ssh"  # where Dask logs each line of a starting worker's stderr


@dataclass(frozen=True)
class SSHHost:
    name: str  # the host's name in the cluster
    address: str  # what SSH connects to: a host name or an IP address


def parse_hosts(words: list[str]) -> tuple[SSHHost, ...]:
    """Hosts from ``NAME=ADDRESS`` or ``ADDRESS`` words (a host name's first label is its
    name; an IP address needs a name)."""
    hosts: list[SSHHost] = []
    for word in words:
        name, _, address = word.rpartition("=")
        if not address:
            raise UserError(f"host {word!r} has no address; write NAME=ADDRESS or ADDRESS")
        if not name:
            if _is_ip(address):
                raise UserError(f"host {address} is an IP address; name it: NAME={address}")
            name = address.split(".")[0]
        if not HOST_NAME_RE.match(name):
            raise UserError(
                f"host name {name!r} may hold only letters, digits, '-' and '_'; "
                f"write NAME={address}"
            )
        if not re.fullmatch(r"[A-Za-z0-9.:_-]+", address):
            raise UserError(f"host address {address!r} is no host name or IP address")
        if any(h.name == name for h in hosts):
            raise UserError(f"host name {name!r} is given twice; name each host once")
        hosts.append(SSHHost(name, address))
    if not hosts:
        raise UserError("no host given; name at least one host to start an agent on")
    return tuple(hosts)


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class SSHOptions:
    """How to reach the hosts and what their agents are."""

    hosts: tuple[SSHHost, ...]
    user: str | None = None  # default: this user's name
    port: int = DEFAULT_SSH_PORT
    identity: Path | None = None  # default: the SSH agent's keys and ~/.ssh's
    known_hosts: Path | None = None  # default: ~/.ssh/known_hosts
    remote_python: str = sys.executable  # the hosts' Python with nestbed (default: this one's)
    listen: str | None = None  # the scheduler's address (default: the one reaching the hosts)
    scheduler_port: int = DEFAULT_SCHEDULER_PORT
    slots: int = 64
    nic_bps: int = 1_000_000_000
    linkd_pps: int | None = None
    clock_port: int | None = 14790

    def __post_init__(self) -> None:
        if not _SAFE_PATH.match(self.remote_python):
            raise UserError(
                f"--remote-python {self.remote_python!r} is no absolute path of plain "
                "characters; give the path of the hosts' Python that has nestbed"
            )
        for path, option in ((self.identity, "--identity"), (self.known_hosts, "--known-hosts")):
            if path is not None and not path.is_file():
                raise UserError(f"{option} {path} is no file; give an existing one")


def connect_options(o: SSHOptions) -> dict[str, Any]:
    """asyncssh's ``connect`` keywords for every host."""
    options: dict[str, Any] = {"port": o.port, "connect_timeout": CHECK_S}
    if o.user:
        options["username"] = o.user
    if o.identity:
        options["client_keys"] = [str(o.identity)]
    if o.known_hosts:
        options["known_hosts"] = str(o.known_hosts)
    return options


def agent_options(o: SSHOptions, host: SSHHost) -> dict[str, Any]:
    """The keywords ``agent.SSHAgent`` gets on ``host`` (crossing as JSON)."""
    return {"host": host.name, "slots": o.slots, "nic_bps": o.nic_bps,
            "linkd_pps": o.linkd_pps, "clock_port": o.clock_port}  # fmt: skip


async def check_hosts(o: SSHOptions) -> None:
    """Every host reached over SSH and its Python asked for nestbed, all at once; the first
    host that fails, in the order given, is raised with its reason."""
    results = await asyncio.gather(*(_check(o, h) for h in o.hosts), return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result


async def _check(o: SSHOptions, host: SSHHost) -> None:
    import asyncssh

    where = f"host {host.name} ({host.address}, port {o.port})"
    try:
        async with asyncssh.connect(host.address, **connect_options(o)) as connection:
            command = shlex.join([o.remote_python, "-c", "import nestbed"])
            result = await asyncio.wait_for(connection.run(command), CHECK_S)
    except asyncssh.HostKeyNotVerifiable:
        known = o.known_hosts or "~/.ssh/known_hosts"
        raise UserError(
            f"{where} has an SSH key that is not in {known}; connect to it once with ssh, "
            "or give --known-hosts FILE with its key"
        ) from None
    except asyncssh.PermissionDenied:
        raise UserError(
            f"{where} refused the SSH login as {o.user or 'this user'}; give --user or "
            "--identity with a key it accepts"
        ) from None
    except (OSError, asyncssh.Error, TimeoutError) as exc:
        reason = str(exc) or type(exc).__name__
        raise EnvironmentProblem(f"cannot reach {where} over SSH ({reason})") from None
    if result.exit_status != 0:
        said = str(result.stderr or "").strip().splitlines()
        raise UserError(
            f"{where} has no nestbed for {o.remote_python} "
            f"({said[-1] if said else f'exit status {result.exit_status}'}); install "
            "nestbed there or give --remote-python with the Python that has it"
        )


def scheduler_address(o: SSHOptions) -> str:
    """Where the scheduler listens: ``listen``, else this machine's address on the way to
    the first host (the agents connect to it)."""
    if o.listen:
        return o.listen
    first = o.hosts[0].address
    try:
        family, _, _, _, sockaddr = socket.getaddrinfo(first, o.port, type=socket.SOCK_DGRAM)[0]
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect(sockaddr)
            return str(probe.getsockname()[0])
    except OSError as exc:
        raise EnvironmentProblem(f"no route from here to host {first} ({exc})") from None


def _agent_class() -> type:
    from distributed.deploy import ssh

    class Agent(ssh.Worker):  # type: ignore[misc]
        """Dask's SSH worker, stopped as an agent is: SIGTERM (the agent closes its time
        service and leaves the scheduler), SIGKILL only if it has not ended in STOP_S."""

        async def close(self) -> None:
            if self.proc is not None and self.proc.exit_status is None:
                with contextlib.suppress(Exception):
                    self.proc.send_signal("TERM")
                    await asyncio.wait_for(self.proc.wait(), STOP_S)
            await super().close()

    return Agent


def cluster_spec(o: SSHOptions, listen: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The scheduler's spec and the workers' (one per host, named by it) for SpecCluster."""
    from distributed import Scheduler

    options = {"host": listen, "port": o.scheduler_port, "dashboard": False}
    scheduler = {"cls": Scheduler, "options": options}
    agent = _agent_class()
    workers = {
        h.name: {
            "cls": agent,
            "options": {
                "address": h.address,
                "connect_options": connect_options(o),
                "kwargs": agent_options(o, h),
                "worker_class": "nestbed.backend.cluster.agent.SSHAgent",
                "remote_python": o.remote_python,
            },
        }
        for h in o.hosts
    }
    return scheduler, workers


class _Failures(logging.Handler):
    """Collects what starting agents said failed (``agent.SSH_FAILURE`` lines of their
    stderr, which Dask logs as it reads them)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.said: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if SSH_FAILURE in message:
            self.said.append(message.split(SSH_FAILURE, 1)[1])


async def serve(o: SSHOptions, ready: Callable[[str], None]) -> None:
    """Starts the scheduler and every host's agent, calls ``ready`` with the scheduler's
    address once all have joined, and serves until cancelled; then stops the agents and
    the scheduler. A host that cannot start its agent fails it all, the others stopped."""
    from distributed import SpecCluster

    await check_hosts(o)
    scheduler, workers = cluster_spec(o, scheduler_address(o))
    failures = _Failures()
    logger = logging.getLogger(_LOG)
    logger.addHandler(failures)
    level = logger.level
    logger.setLevel(logging.INFO)
    cluster = None
    try:
        try:
            cluster = await SpecCluster(workers, scheduler, asynchronous=True,
                                        name="nestbed ssh-agents")  # fmt: skip
        except Exception as exc:
            reason = "; ".join(failures.said) or str(exc) or type(exc).__name__
            raise EnvironmentProblem(f"the agents did not all start over SSH: {reason}") from exc
        await _joined(cluster.scheduler, o.hosts, failures)
        ready(cluster.scheduler_address)
        await asyncio.Event().wait()  # until cancelled
    finally:
        logger.removeHandler(failures)
        logger.setLevel(level)
        if cluster is not None:
            await cluster.close()


async def _joined(scheduler: Any, hosts: tuple[SSHHost, ...], failures: _Failures) -> None:
    """Waits until every host's agent has joined the scheduler."""
    wanted = {resource(h.name) for h in hosts}
    deadline = time.monotonic() + JOIN_S
    while not wanted <= {w.name for w in scheduler.workers.values()}:
        if failures.said:
            raise EnvironmentProblem(f"an agent did not start: {'; '.join(failures.said)}")
        if time.monotonic() > deadline:
            missing = sorted(wanted - {w.name for w in scheduler.workers.values()})
            raise EnvironmentProblem(
                f"the agents of {', '.join(m.removeprefix('host-') for m in missing)} started "
                f"over SSH but did not join the scheduler in {JOIN_S:.0f} s; check that the "
                "hosts reach this machine's scheduler port"
            )
        await asyncio.sleep(0.1)
