"""Output handling for sandboxed commands: capped capture (first and last half of the cap,
with a marker saying how much was cut) and control characters stripped before anything is
shown to the model, the judge or the user's terminal."""

from __future__ import annotations

import re
import threading
from typing import IO

ANSI_RE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
CONTROL_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def clean(text: str) -> str:
    """ANSI escape sequences and control characters (but newlines and tabs) removed."""
    return CONTROL_RE.sub("", ANSI_RE.sub("", text.replace("\r\n", "\n")))


class CappedReader:
    """Reads a pipe to its end in a thread, keeping at most `cap` bytes: the first half and
    the last half; `text()` joins them with a "[... N bytes cut ...]" marker."""

    def __init__(self, pipe: IO[bytes], cap: int) -> None:
        self.pipe, self.half = pipe, max(1, cap // 2)
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self.thread = threading.Thread(target=self._run, daemon=True, name="capped-reader")
        self.thread.start()

    def _run(self) -> None:
        try:
            while chunk := self.pipe.read(65536):
                self.total += len(chunk)
                room = self.half - len(self.head)
                if room > 0:
                    self.head += chunk[:room]
                    chunk = chunk[room:]
                if chunk:
                    self.tail += chunk
                    if len(self.tail) > self.half:
                        del self.tail[: len(self.tail) - self.half]
        except (OSError, ValueError):
            pass  # the pipe was closed under us (a killed process group)

    def join(self, timeout: float) -> None:
        self.thread.join(timeout)

    @property
    def truncated(self) -> bool:
        return self.total > len(self.head) + len(self.tail)

    def text(self) -> str:
        cut = self.total - len(self.head) - len(self.tail)
        body = self.head.decode("utf-8", "replace")
        if cut > 0:
            body += f"\n[... {cut} bytes cut ...]\n"
        return clean(body + self.tail.decode("utf-8", "replace"))
