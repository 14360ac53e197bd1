"""A minimal HTTP/1.1 keep-alive client for timing the endpoint itself.

httpx (and the `openai` SDK on top of it) spends about a millisecond of its own per request
building it and parsing the answer, in the client's process. To see what the server adds,
bench/serve.py also times the same request sent as raw bytes on one kept-alive socket: the
difference is the client library's cost, not the endpoint's. Handles exactly what the
endpoint answers a non-streaming request with: a status line, headers, a Content-Length
body.
"""

from __future__ import annotations

import json
import socket
from typing import Any
from urllib.parse import urlsplit


class RawHttpClient:
    """POSTs JSON to one URL over a single kept-alive connection."""

    def __init__(self, url: str, timeout: float = 60.0) -> None:
        parts = urlsplit(url)
        self.host, self.port, self.path = (
            parts.hostname or "127.0.0.1",
            parts.port or 80,
            parts.path,
        )
        self.sock = socket.create_connection((self.host, self.port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._buf = b""

    def post_json(self, body: dict[str, Any]) -> tuple[int, bytes]:
        data = json.dumps(body).encode()
        head = (
            f"POST {self.path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
        )
        self.sock.sendall(head.encode() + data)
        header = self._read_until(b"\r\n\r\n")
        lines = header.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        length = next(
            int(v) for k, _, v in (ln.partition(":") for ln in lines[1:])
            if k.strip().lower() == "content-length"
        )  # fmt: skip
        return status, self._read_exactly(length)

    def _read_until(self, marker: bytes) -> bytes:
        while marker not in self._buf:
            self._fill()
        head, _, self._buf = self._buf.partition(marker)
        return head

    def _read_exactly(self, n: int) -> bytes:
        while len(self._buf) < n:
            self._fill()
        out, self._buf = self._buf[:n], self._buf[n:]
        return out

    def _fill(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        self._buf += chunk

    def close(self) -> None:
        self.sock.close()
