"""An SSH server for the cluster tests, one in each simulated host: asyncssh's server (the
library Dask's SSH deployment connects with), run inside the host's network namespace with
the host's environment, so a session's command runs there as sshd would run it on a real
host (``/bin/sh -c``, stdout and stderr back over the channel, its exit status, signals the
client sends). Keys are checked both ways: the server's host key and the client's.

Run as ``python sshserver.py ADDRESS PORT HOST_KEY AUTHORIZED_KEYS``; it prints ``ready``
once it listens, and on SIGTERM kills what its sessions still run, then ends. OpenSSH's
sshd is not used: installing Debian's package starts a system-wide sshd on port 22 where
init scripts run, and sshd needs /run/sshd; this server touches nothing outside its host.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys

import asyncssh

_running: set[asyncio.subprocess.Process] = set()


class Session(asyncssh.SSHServerSession):
    def __init__(self) -> None:
        self._channel: asyncssh.SSHServerChannel | None = None
        self._command = ""
        self._process: asyncio.subprocess.Process | None = None

    def connection_made(self, channel: asyncssh.SSHServerChannel) -> None:
        self._channel = channel

    def exec_requested(self, command: str) -> bool:
        self._command = command
        return True

    def session_started(self) -> None:
        asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        assert self._channel is not None
        process = await asyncio.create_subprocess_exec(
            "/bin/sh", "-c", self._command, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            start_new_session=True, cwd="/",
        )  # fmt: skip
        self._process = process
        _running.add(process)
        channel = self._channel

        async def pump(stream: asyncio.StreamReader, write: object) -> None:
            while data := await stream.read(65536):
                with contextlib.suppress(Exception):  # the client went: keep draining
                    write(data)  # type: ignore[operator]

        assert process.stdout is not None and process.stderr is not None
        await asyncio.gather(pump(process.stdout, channel.write),
                             pump(process.stderr, channel.write_stderr))  # fmt: skip
        status = await process.wait()
        _running.discard(process)
        with contextlib.suppress(Exception):
            channel.exit(status if status >= 0 else 128 - status)

    def signal_received(self, name: str) -> None:
        if self._process is not None and self._process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._process.pid, signal.Signals["SIG" + name])


class Server(asyncssh.SSHServer):
    def session_requested(self) -> Session:
        return Session()


async def main(address: str, port: int, host_key: str, authorized: str) -> None:
    server = await asyncssh.create_server(
        Server, address, port, server_host_keys=[host_key], authorized_client_keys=authorized,
        encoding=None,
    )  # fmt: skip
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    print("ready", flush=True)
    await stop.wait()
    server.close()
    for process in list(_running):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        await process.wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]))
