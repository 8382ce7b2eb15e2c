"""The controller's request server: a root-only Unix socket speaking JSON lines, one thread
per connection, any number of requests per connection.

A reply is ``{"ok": true, ...}``; a refusal (a UserError, such as ``Refused``) is
``{"ok": false, "user": true, "error": SENTENCE}``, the user's to fix; anything else raised is
nestbed's own bug: ``{"ok": false, "error": ...}``, its traceback in the controller's log.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nestbed.errors import NestbedError, UserError

# One request line in, its reply out; a reply with "shutdown" true stops the server after it.
Handler = Callable[[str], dict[str, Any]]


class RequestServer:
    """Serves ``handle`` on the socket at ``path``."""

    def __init__(self, path: Path, handle: Handler):
        self.path, self.handle = path, handle
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o077)  # root only
        try:
            self.server.bind(str(path))
        finally:
            os.umask(old)
        self.server.listen(16)

    def serve(self) -> None:
        """Answers until a request shuts the server down."""
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return  # closed by shutdown
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    def _connection(self, conn: socket.socket) -> None:
        with conn, conn.makefile("r", encoding="utf-8") as reader:
            for line in reader:
                reply = self.reply(line)
                try:
                    conn.sendall((json.dumps(reply) + "\n").encode())
                except OSError:
                    return  # the client went away
                if reply.get("shutdown"):
                    self.close()
                    return

    def reply(self, line: str) -> dict[str, Any]:
        """The reply to one request line."""
        try:
            return {"ok": True, **self.handle(line)}
        except UserError as exc:
            return {"ok": False, "user": True, "error": str(exc)}
        except NestbedError as exc:
            return {"ok": False, "error": str(exc)}
        except Exception as exc:
            print(f"internal error answering {line.strip()!r}:", file=sys.stderr)
            traceback.print_exc(file=sys.stderr)
            sys.stderr.flush()
            return {"ok": False, "error": f"internal error: {type(exc).__name__}: {exc}"}

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.server.shutdown(socket.SHUT_RDWR)
        self.server.close()
