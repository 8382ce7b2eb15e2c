"""The agent on each host of a cluster: a Dask distributed worker whose resource tag names its
host (``host-NAME``), so that work submitted for a host runs there and nowhere else.

It builds and removes the host's share of experiments (``host``), runs commands in the
host's nodes, and reports the host's facts for placement. Frames between hosts never pass
through it: Dask carries only the requests and their answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit

from nestbed.backend import linux
from nestbed.backend.cluster import slots, timeservice, workdirs
from nestbed.backend.cluster.placement import HostFacts
from nestbed.backend.plan import Plan
from nestbed.backend.sockets import reply, request_line
from nestbed.errors import EnvironmentProblem

RESOURCE_PREFIX = "host-"
DEFAULT_SLOTS = 64
DEFAULT_NIC_BPS = 1_000_000_000
CONNECT_TIMEOUT_S = 60  # an agent that cannot reach its scheduler this long gives up
# A timed link change talks to linkd on the agent's event loop, which also carries its
# heartbeats and every answer of the host: a linkd that does not answer (stopped, stuck)
# must not hold it for good. linkd answers in milliseconds after the change's time.
LINKD_ANSWER_S = 5.0


def resource(host: str) -> str:
    """The Dask resource that pins work to ``host``'s agent."""
    return RESOURCE_PREFIX + host


@dataclass(frozen=True)
class AgentConfig:
    host: str
    slots: int = DEFAULT_SLOTS
    nic_bps: int = DEFAULT_NIC_BPS
    linkd_pps: int | None = None  # as given, or as `nestbed linkd-capacity` measured it
    clock_port: int | None = timeservice.DEFAULT_PORT  # UDP, for time requests (None: none)


_serving: list[AgentConfig] = []  # the agent this process runs, once ``serve`` started it


def serve(scheduler: str, config: AgentConfig, listen: str | None = None) -> None:
    """Runs this host's agent until it is stopped (Ctrl-C, SIGTERM) or the scheduler goes.

    ``listen`` is the address to serve on (default: the one that reaches the scheduler),
    which is also the address other hosts' VXLAN devices send to.
    """
    clock = _begin(config)
    try:
        asyncio.run(_serve(scheduler, config, listen))
    except (OSError, TimeoutError, RuntimeError) as exc:  # RuntimeError: "failed to start"
        raise _unreachable(scheduler, config, exc) from exc
    finally:
        if clock is not None:
            clock.close()


def _begin(config: AgentConfig) -> timeservice.TimeServer | None:
    """What an agent does before it serves: removes the shares a previous agent of the host
    left unfinished, and opens its time service (returned, to be closed at the end)."""
    _serving[:] = [config]
    from nestbed.backend.cluster import host

    for experiment in host.remove_unfinished():
        print(f"removed the unfinished part of experiment {experiment} a previous agent of "
              f"host {config.host} was building", flush=True)  # fmt: skip
    try:
        return timeservice.TimeServer(config.clock_port) if config.clock_port else None
    except OSError as exc:
        raise EnvironmentProblem(
            f"the agent of host {config.host} cannot answer time requests on UDP port "
            f"{config.clock_port} ({exc}); give another --clock-port"
        ) from exc


def _unreachable(scheduler: str, config: AgentConfig, exc: BaseException) -> EnvironmentProblem:
    return EnvironmentProblem(
        f"the agent of host {config.host} cannot reach the scheduler at {scheduler} "
        f"({exc}); check the address and that `dask scheduler` runs there"
    )


# What an agent started over SSH writes to its stderr when it cannot serve: the controlling
# machine, which reads that stderr, takes such a line for the host's reason.
SSH_FAILURE = "nestbed agent failed: "


class SSHAgent:
    """The agent as Dask's SSH deployment starts it on a host (``nestbed ssh-agents``):
    ``distributed.cli.dask_spec`` makes one of the scheduler's address and these options
    (JSON: numbers, strings, null), awaits it, then awaits ``finished``, and calls ``close``
    on SIGINT or SIGTERM. It serves as ``serve`` does, rejoining a scheduler it lost."""

    def __init__(self, scheduler: str, *, host: str, slots: int, nic_bps: int,
                 linkd_pps: int | None, clock_port: int | None) -> None:  # fmt: skip
        self._scheduler = scheduler
        self._config = AgentConfig(host, slots, nic_bps, linkd_pps, clock_port)
        self._task: asyncio.Task | None = None
        self._clock: timeservice.TimeServer | None = None
        self._closing = False

    def __await__(self) -> Any:
        return self._start().__await__()

    async def _start(self) -> SSHAgent:
        try:
            self._clock = _begin(self._config)
        except EnvironmentProblem as exc:
            self._fail(exc)
        self._task = asyncio.create_task(_serve(self._scheduler, self._config, None))
        return self

    def _fail(self, exc: BaseException) -> None:
        print(SSH_FAILURE + str(exc), file=sys.stderr, flush=True)
        raise SystemExit(3)

    async def finished(self) -> None:
        assert self._task is not None
        try:
            await self._task
        except asyncio.CancelledError:
            if not self._closing:
                raise
        except (OSError, TimeoutError, RuntimeError, ValueError) as exc:
            self._fail(_unreachable(self._scheduler, self._config, exc))
        finally:
            self._close_clock()

    async def close(self) -> None:
        self._closing = True  # the end asked for (a signal): ``finished`` returns quietly
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._close_clock()

    def _close_clock(self) -> None:
        if self._clock is not None:
            self._clock.close()
            self._clock = None


async def _serve(scheduler: str, config: AgentConfig, listen: str | None) -> None:
    """Serves as a Dask worker, and joins again whenever the worker closes: its connection
    to the scheduler broke (a loaded machine, a network blip, a restarted scheduler) and
    the host's parts of experiments, kept in this process, are still here. A scheduler gone
    for good fails the join within CONNECT_TIMEOUT_S, and the agent ends with that error."""
    lost_at: float | None = None  # when the worker last closed; None: never joined yet
    while True:
        try:
            await _work(scheduler, config, listen)
        except (OSError, TimeoutError, RuntimeError, ValueError):
            if lost_at is None or time.monotonic() - lost_at > CONNECT_TIMEOUT_S:
                raise  # never reached, or gone for good
            # The scheduler may still hold the old worker's name a moment ("name taken").
            await asyncio.sleep(1)
            continue
        lost_at = time.monotonic()
        print(f"the agent of host {config.host} lost its scheduler; joining again", flush=True)


async def _work(scheduler: str, config: AgentConfig, listen: str | None) -> None:
    from distributed import Worker

    async with Worker(
        scheduler,
        name=resource(config.host),
        resources={resource(config.host): 1},
        # Shares built one at a time (the host's one slot) beside commands of several
        # experiments, each `nestbed exec` holding a thread while its command runs.
        nthreads=16,
        host=listen,
        dashboard=False,
        death_timeout=CONNECT_TIMEOUT_S,
    ) as worker:
        await worker.finished()


def facts() -> HostFacts:
    """This host's facts, as the agent serving here knows them (run on the agent)."""
    from distributed import get_worker

    if not _serving:
        raise EnvironmentProblem("this Dask worker is no nestbed agent; start `nestbed agent`")
    config = _serving[0]
    address = urlsplit(get_worker().address).hostname or ""
    return HostFacts(
        name=config.host,
        address=address,
        cores=len(os.sched_getaffinity(0)),
        memory_bytes=_memory_bytes(),
        slots=config.slots,
        held=slots.held(),
        nic_bps=config.nic_bps,
        linkd_pps=config.linkd_pps,
        clock_port=config.clock_port,
    )


def _memory_bytes() -> int:
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    return 0


def node_only(p: Plan, node: str) -> Plan:
    """The plan as far as a command in ``node`` needs it (what crosses Dask for it)."""
    return replace(p, nodes=(p.node(node),), veths=(), bridges=(), emulated=(), namespaces=())


def clock() -> int:
    """This host's time (a time request, run on the agent)."""
    return time.time_ns()


def state_only(p: Plan) -> Plan:
    """The plan as far as reaching the experiment's state on a host needs it (its name)."""
    return replace(p, nodes=(), veths=(), bridges=(), emulated=(), namespaces=())


def linkd_request(p: Plan, op: str, fields: dict[str, Any]) -> dict[str, Any]:
    """One request to this host's link emulator of the experiment (run on the agent); a
    linkd that does not answer within ``LINKD_ANSWER_S`` is given up (TimeoutError), so that
    it holds none of the agent's threads for good."""
    with linux.linkd(p, timeout_s=LINKD_ANSWER_S) as client:
        return client.request(op, **fields)


async def linkd_requests_at(p: Plan, due_ns: int, requests: list[tuple[str, dict]]) -> int:
    """Hands this host's link emulator of the experiment ``requests`` (of one link) at once,
    with their time, as the controller does on one host (``LinkdClient.request_at``): linkd's
    worker for the link applies them when this host's monotonic clock reads ``due_ns`` (at
    once if it has passed); linkd's answer, when it applied them, on that clock. Run on the
    agent's event loop: the answer is awaited holding none of its threads, so a host's other
    work (another experiment's swap-in) does not hold it up; linkd is given up
    ``LINKD_ANSWER_S`` after the change's time (TimeoutError), so that the loop is never
    held longer. Started by ``start_timed``, so that no Dask slot waits for the time. Before,
    the agent slept until the time and then sent the change, so it took effect when the
    agent's loop woke and linkd served the request, not at its time."""
    timed = [{"op": op, **fields} for op, fields in requests]
    path = linux.linkd_socket(p)
    wait_s = max(0.0, (due_ns - time.monotonic_ns()) / 1e9) + LINKD_ANSWER_S
    async with asyncio.timeout(wait_s):
        reader, writer = await asyncio.open_unix_connection(str(path))
        try:
            writer.write(request_line("at", at_ns=due_ns, requests=timed))
            await writer.drain()
            line = await reader.readline()
        finally:
            writer.close()
    return int(reply(line, "at", "nestbed-linkd", path)["applied_ns"])


# Timed changes this agent holds for their time, by key (``start_timed``): a Dask task holds
# one of its worker's ``nthreads`` threads while it runs, coroutine or not, so a task that
# waited for a change's time held a thread through the whole lead; four changes ahead filled
# an agent of four threads (at 20 events a second each was handed over 2.5 s late of its 3 s
# lead, and a command's poll or a swap-in waited behind them).
_timed: dict[str, tuple[int, asyncio.Task[Any]]] = {}  # key -> (due_ns, its task)
_KEPT_NS = 600 * 10**9  # an answer nobody asked for is dropped this long after its time


async def start_timed(key: str, due_ns: int, function: Callable[..., Any], *args: Any) -> None:
    """Starts ``function(*args)`` (a coroutine function due at ``due_ns``, on this host's
    monotonic clock) on the agent's event loop and returns at once, so that the Dask task's
    slot is free again; ``timed_result(key)`` gives its result once it is done."""
    now_ns = time.monotonic_ns()
    for old, (due, task) in list(_timed.items()):  # never asked for (a controller gone)
        if task.done() and due + _KEPT_NS < now_ns:
            del _timed[old]
    _timed[key] = (due_ns, asyncio.get_running_loop().create_task(function(*args)))


async def timed_result(key: str) -> Any:
    """The result of what ``start_timed`` started under ``key`` (waited for), or what it
    raised."""
    if key not in _timed:
        raise EnvironmentProblem(
            "its agent holds no such change (the agent restarted since it was handed over)"
        )
    _, task = _timed.pop(key)
    return await task


def exec_in(p: Plan, node: str, argv: list[str], run: dict[str, Any]) -> Any:
    """Runs a command in one of this host's nodes (run on the agent)."""
    return linux.exec_in(p, node, argv, **run)


def node_usage(p: Plan, nodes: list[str]) -> dict[str, tuple[float, int]]:
    """CPU seconds and memory bytes of this host's nodes that have a cgroup (run on the
    agent)."""
    found = {}
    for node in nodes:
        cgroup = linux.node_cgroup(p, node)
        if cgroup is not None:
            found[node] = (cgroup.cpu_seconds(), cgroup.memory_bytes())
    return found


def leftovers() -> dict[str, list[str]]:
    found = linux.leftovers_by_tag()
    for module in (workdirs, slots):
        for tag, things in module.leftovers_by_tag().items():
            found.setdefault(tag, []).extend(things)
    return found


def remove_leftovers(tags: set[str]) -> list[str]:
    # The namespaces first: the programs writing in the working folders end with them.
    removed = linux.remove_leftovers(tags) + workdirs.remove_leftovers(tags)
    return removed + slots.remove_leftovers(tags)


def traces() -> list[str]:
    kept = (workdirs.leftovers_by_tag(), slots.leftovers_by_tag())
    return linux.traces() + [t for found in kept for ts in found.values() for t in ts]
