"""Embedded uvicorn: our own bound socket, a clear BindError, no signal handlers installed.

Each test runs its loop with `asyncio.run` in the main thread, because uvicorn only
installs signal handlers from the main thread: that is where a leak would show.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
import uvicorn

from clawrl_app.engine.serving.http_server import BindError, HttpServer, bind_socket

Scope = dict[str, Any]


async def tiny_app(
    scope: Scope,
    receive: Callable[[], Awaitable[Any]],
    send: Callable[[Any], Awaitable[None]],
) -> None:
    assert scope["type"] == "http"
    body = f"pong {scope['path']}".encode()
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"text/plain")],
        }
    )
    await send({"type": "http.response.body", "body": body})


def test_bind_port_zero_gives_a_listening_nonblocking_socket() -> None:
    sock = bind_socket("127.0.0.1", 0)
    try:
        port = sock.getsockname()[1]
        assert port > 0
        assert sock.getblocking() is False
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            pass  # listen() was called: the kernel accepts the connection
    finally:
        sock.close()


def test_bind_port_in_use_raises_bind_error_not_system_exit() -> None:
    taken = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    try:
        with pytest.raises(BindError) as err:
            bind_socket("127.0.0.1", port)
    finally:
        taken.close()
    msg = str(err.value)
    assert f"127.0.0.1:{port}" in msg
    assert "pick another" in msg and "--port" in msg
    assert isinstance(err.value, OSError)


def test_http_server_serves_and_stops_without_touching_signals() -> None:
    assert threading.current_thread() is threading.main_thread()
    sigs = (signal.SIGINT, signal.SIGTERM)

    async def scenario() -> dict[str, Any]:
        # asyncio.run installs its own SIGINT handler: compare against what the loop has.
        before = {sig: signal.getsignal(sig) for sig in sigs}
        server = HttpServer(tiny_app, bind_socket("127.0.0.1", 0))
        await server.start()
        during = {sig: signal.getsignal(sig) for sig in sigs}
        async with httpx.AsyncClient() as client:
            r = await client.get(f"http://127.0.0.1:{server.port}/ping")
        port = server.port
        await server.stop()
        after = {sig: signal.getsignal(sig) for sig in sigs}
        return {
            "before": before,
            "during": during,
            "after": after,
            "status": r.status_code,
            "text": r.text,
            "port": port,
            "server": server,
        }

    got = asyncio.run(scenario())
    assert got["status"] == 200
    assert got["text"] == "pong /ping"
    assert got["during"] == got["before"]
    assert got["after"] == got["before"]
    assert got["server"].sock.fileno() == -1  # socket closed by stop()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", got["port"]), timeout=1).close()


def test_plain_uvicorn_would_install_handlers() -> None:
    """Control for the test above: stock uvicorn does replace SIGINT in the main thread."""

    async def scenario() -> tuple[Any, Any, Any]:
        before = signal.getsignal(signal.SIGINT)
        sock = bind_socket("127.0.0.1", 0)
        server = uvicorn.Server(uvicorn.Config(tiny_app, log_level="warning", lifespan="off"))
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:
            await asyncio.sleep(0.01)
        during = signal.getsignal(signal.SIGINT)
        server.should_exit = True
        await task
        sock.close()
        return before, during, signal.getsignal(signal.SIGINT)

    before, during, after = asyncio.run(scenario())
    assert during != before
    assert after == before


def test_stop_before_start_closes_socket() -> None:
    server = HttpServer(tiny_app, bind_socket("127.0.0.1", 0))
    asyncio.run(server.stop())
    assert server.sock.fileno() == -1
