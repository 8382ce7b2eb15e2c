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
import ipaddress
import json
import logging
import re
import shlex
import socket
import sys
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
MEASURE_S = 90.0  # for a host's `nestbed linkd-capacity` (about 8 s)
JOIN_S = 120.0  # for every agent to start over SSH and join the scheduler
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
        if not HOST_NAME_RE.fullmatch(name):
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
    measure_linkd: bool = False  # each host's link emulator measured before its agent starts
    clock_port: int | None = 14790

    def __post_init__(self) -> None:
        if not _SAFE_PATH.fullmatch(self.remote_python):
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


def agent_options(o: SSHOptions, host: SSHHost, linkd_pps: int | None = None) -> dict[str, Any]:
    """The keywords ``agent.SSHAgent`` gets on ``host`` (crossing as JSON); ``linkd_pps``
    as measured there, else the options'."""
    return {"host": host.name, "slots": o.slots, "nic_bps": o.nic_bps,
            "linkd_pps": linkd_pps or o.linkd_pps, "clock_port": o.clock_port}  # fmt: skip


async def check_hosts(o: SSHOptions) -> dict[str, int | None]:
    """Every host reached over SSH, asked whether it can serve, and (``measure_linkd``) its
    link emulator measured, all at once; each host's measured packets/s. The first host
    that fails, in the order given, is raised with its reason."""
    results = await asyncio.gather(*(_check(o, h) for h in o.hosts), return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return dict(zip((h.name for h in o.hosts), results, strict=True))  # type: ignore[arg-type]


async def _check(o: SSHOptions, host: SSHHost) -> int | None:
    import asyncssh

    where = f"host {host.name} ({host.address}, port {o.port})"
    try:
        async with asyncssh.connect(host.address, **connect_options(o)) as connection:
            user = await asyncio.wait_for(connection.run("id -u"), CHECK_S)
            command = shlex.join([o.remote_python, "-c", "import nestbed"])
            result = await asyncio.wait_for(connection.run(command), CHECK_S)
            measured = None
            if o.measure_linkd and result.exit_status == 0 and str(user.stdout).strip() == "0":
                command = shlex.join([o.remote_python, "-m", "nestbed", "linkd-capacity", "--json"])
                measured = await asyncio.wait_for(connection.run(command), MEASURE_S)
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
    except asyncssh.KeyImportError as exc:
        raise UserError(
            f"cannot use the SSH key {o.identity or '(default)'} ({exc}); give --identity with "
            "a key without a passphrase, or load it into ssh-agent and give none"
        ) from None
    except (OSError, asyncssh.Error, TimeoutError) as exc:
        reason = str(exc) or type(exc).__name__
        raise EnvironmentProblem(f"cannot reach {where} over SSH ({reason})") from None
    if str(user.stdout or "").strip() != "0":
        raise UserError(
            f"{where}: the SSH user {o.user or '(yours)'} is not root there, and the agent "
            "builds namespaces; give --user root"
        )
    if result.exit_status != 0:
        said = str(result.stderr or "").strip().splitlines()
        raise UserError(
            f"{where} has no nestbed for {o.remote_python} "
            f"({said[-1] if said else f'exit status {result.exit_status}'}); install "
            "nestbed there or give --remote-python with the Python that has it"
        )
    if measured is None:
        return None
    try:
        pps = int(json.loads(str(measured.stdout))["pps"]) if measured.exit_status == 0 else 0
    except (ValueError, KeyError, TypeError):
        pps = 0
    if pps <= 0:
        said = str(measured.stderr or "").strip().splitlines()
        raise EnvironmentProblem(
            f"{where} could not measure its link emulator "
            f"({said[-1] if said else f'exit status {measured.exit_status}'}); "
            "give --linkd-pps with a figure instead"
        )
    return pps


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


def _agent_class(started: list[Any], say: Callable[[str], None]) -> type:
    """Dask's SSH worker as an agent: each one made is appended to ``started`` (so that a
    start that fails halfway can stop those already running), what its host says after it
    started is passed to ``say`` line by line (read, so the agent never blocks on a full
    channel), and it is stopped as an agent is: SIGTERM, SIGKILL only if it has not ended
    in STOP_S."""
    from distributed.deploy import ssh

    class Agent(ssh.Worker):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.host = self.kwargs["host"]
            self._readers: list[asyncio.Task] = []
            started.append(self)

        async def start(self) -> None:
            try:
                await super().start()
            except Exception as exc:
                raise EnvironmentProblem(
                    f"the agent of host {self.host} did not start over SSH "
                    f"({str(exc) or type(exc).__name__})"
                ) from exc
            for stream in (self.proc.stdout, self.proc.stderr):
                self._readers.append(asyncio.create_task(self._relay(stream)))

        async def _relay(self, stream: Any) -> None:
            async for line in stream:
                say(f"[{self.host}] {line.rstrip()}")

        async def close(self) -> None:
            import asyncssh

            if self.proc is not None and self.proc.exit_status is None:
                try:
                    self.proc.send_signal("TERM")
                    await asyncio.wait_for(self.proc.wait(), STOP_S)
                    say(f"[{self.host}] agent stopped")
                except (TimeoutError, OSError, asyncssh.Error):
                    say(f"[{self.host}] agent killed: it had not stopped {STOP_S:g} s "
                        "after SIGTERM")  # fmt: skip
            await super().close()
            for reader in self._readers:
                reader.cancel()

    return Agent


def cluster_spec(
    o: SSHOptions, listen: str, started: list[Any] | None = None,
    say: Callable[[str], None] = print, measured: dict[str, int | None] | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:  # fmt: skip
    """The scheduler's spec and the workers' (one per host, named by it) for SpecCluster;
    the workers made are appended to ``started``, their hosts' lines passed to ``say``;
    ``measured`` the hosts' link emulators' packets/s."""
    from distributed import Scheduler

    options = {"host": listen, "port": o.scheduler_port, "dashboard": False}
    scheduler = {"cls": Scheduler, "options": options}
    agent = _agent_class([] if started is None else started, say)
    workers = {
        h.name: {
            "cls": agent,
            "options": {
                "address": h.address,
                "connect_options": connect_options(o),
                "kwargs": agent_options(o, h, (measured or {}).get(h.name)),
                "worker_class": "nestbed.backend.cluster.agent.SSHAgent",
                "remote_python": o.remote_python,
            },
        }
        for h in o.hosts
    }
    return scheduler, workers


class _Failures(logging.Handler):
    """Collects what starting agents said failed (``agent.SSH_FAILURE`` lines of their
    stderr, which Dask logs as it reads them until the agent has started)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.said: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if SSH_FAILURE in message:
            self.said.append(message.split(SSH_FAILURE, 1)[1])


async def serve(o: SSHOptions, ready: Callable[[str], None],
                say: Callable[[str], None] = print) -> None:  # fmt: skip
    """Starts the scheduler and every host's agent, calls ``ready`` with the scheduler's
    address once all have joined, and serves until cancelled; then stops the agents and
    the scheduler, whatever became of the start (a host that cannot start its agent, or
    none joining within JOIN_S, fails it all with the others stopped). What the hosts'
    agents say once started, and how each ended, goes to ``say``."""
    from distributed import SpecCluster

    measured = await check_hosts(o)
    for host, pps in measured.items():
        if pps:
            say(f"[{host}] its link emulator carries {pps} packets/s")
    started: list[Any] = []
    scheduler, workers = cluster_spec(o, scheduler_address(o), started, say, measured)
    failures = _Failures()
    logger = logging.getLogger(_LOG)
    logger.addHandler(failures)
    level = logger.level
    logger.setLevel(logging.INFO)
    cluster = SpecCluster(workers, scheduler, asynchronous=True, name="nestbed ssh-agents")
    try:
        try:
            async with asyncio.timeout(JOIN_S):
                await cluster
                await _joined(cluster.scheduler, o.hosts, failures)
        except TimeoutError:
            raise EnvironmentProblem(
                f"the agents did not all start over SSH and join the scheduler within "
                f"{JOIN_S:g} s; check that the hosts reach this machine's scheduler port"
            ) from None
        except EnvironmentProblem as exc:  # a host's, naming it
            if failures.said:
                raise EnvironmentProblem("; ".join(failures.said)) from exc
            raise
        except Exception as exc:
            reason = "; ".join(failures.said) or str(exc) or type(exc).__name__
            raise EnvironmentProblem(f"the agents did not all start over SSH: {reason}") from exc
        ready(cluster.scheduler_address)
        await asyncio.Event().wait()  # until cancelled
    finally:
        logger.removeHandler(failures)
        logger.setLevel(level)
        # Every agent made is stopped, started or not (SpecCluster knows only those whose
        # whole start succeeded), then the cluster with its scheduler; not given up if
        # this task is cancelled meanwhile.
        stopping = asyncio.gather(*(a.close() for a in started), return_exceptions=True)
        await asyncio.shield(stopping)
        await asyncio.shield(cluster.close())


async def _joined(scheduler: Any, hosts: tuple[SSHHost, ...], failures: _Failures) -> None:
    """Waits until every host's agent has joined the scheduler."""
    wanted = {resource(h.name) for h in hosts}
    while not wanted <= {w.name for w in scheduler.workers.values()}:
        if failures.said:
            raise EnvironmentProblem("; ".join(failures.said))
        await asyncio.sleep(0.1)
