"""Embedding uvicorn: serve on a socket we bound ourselves, with no signal handlers.

uvicorn calls `sys.exit` when binding fails and installs its own SIGINT/SIGTERM
handlers; the app owns both concerns, so binding happens here (with a clear error) and
`capture_signals` is a no-op.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Generator
from typing import Any

import uvicorn

log = logging.getLogger("clawrl.http")


class BindError(OSError):
    """The endpoint's address could not be bound; the message says what to do."""


class EmbeddedServer(uvicorn.Server):
    """uvicorn without signal handling (the host app decides when to stop)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind and listen on host:port (port 0 = any free port); BindError explains failures."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise BindError(
            f"Cannot listen on {host}:{port} ({exc.strerror}). Another program (or another "
            "clawrl-app) may use the port: stop it, or pick another with --port / PORT."
        ) from None
    # Accepted sockets inherit this: without it Nagle + delayed ACK add ~40 ms to every
    # keep-alive response (measured: 42 ms -> 0.7 ms per request).
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.listen(128)
    sock.setblocking(False)
    return sock


class HttpServer:
    """Runs an ASGI app on a bound socket as an asyncio task."""

    def __init__(self, app: Any, sock: socket.socket) -> None:
        self.sock = sock
        config = uvicorn.Config(
            app, log_level="warning", access_log=False, lifespan="off", timeout_graceful_shutdown=5
        )
        self.server = EmbeddedServer(config)
        self._task: asyncio.Task[None] | None = None

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    async def start(self) -> None:
        self._task = asyncio.create_task(self.server.serve(sockets=[self.sock]))
        while not self.server.started:
            if self._task.done():
                self._task.result()  # re-raise why it stopped
                raise RuntimeError("HTTP server stopped during start-up")
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        self.server.should_exit = True
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError, SystemExit):
                await self._task
        self.sock.close()
