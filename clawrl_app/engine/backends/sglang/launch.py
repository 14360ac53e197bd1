"""Launching an SGLang server as a child process and waiting until it can generate.

`build_launch_command` is pure: it turns our settings into the argv and environment of
`python -m sglang.launch_server` (every flag spelled in full; SGLang 0.5.23 rejects
prefixes as ambiguous). `SGLangServer` runs that command in its own process group,
forwards its output line by line to the `clawrl.sglang` logger and polls
`GET /health_generate` (a one-token generation) until it answers 200.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections import deque
from collections.abc import Mapping, Sequence

import httpx

from clawrl_app.engine.backends.base import BackendError

log = logging.getLogger("clawrl.sglang")

DEFAULT_LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
_SECRET_FLAGS = ("--api-key", "--admin-api-key")


def build_launch_command(
    python: str,
    model_path: str,
    served_name: str,
    port: int,
    *,
    gpus: tuple[int, ...],
    mem_fraction: float | None,
    context_length: int | None,
    lora_rank: int,
    lora_targets: tuple[str, ...],
    max_loras_per_batch: int,
    api_key: str | None,
    colocated: bool,
    nccl_port: int,
    tool_call_parser: str | None = None,
    max_loaded_loras: int | None = None,
    deterministic: bool = False,
    base_env: Mapping[str, str] | None = None,
) -> tuple[list[str], dict[str, str]]:
    """The argv and child environment of one SGLang server on `gpus` (pure).

    `max_loras_per_batch` counts the base model as one slot; `max_loaded_loras`
    (default: the same number, SGLang's minimum) must leave room for the new adapter
    while the old one still finishes its requests. `deterministic` makes `sampling_seed`
    count (SGLang ignores it otherwise). `base_env` defaults to os.environ.
    """
    if not gpus:
        raise ValueError("an SGLang server needs at least one GPU")
    if lora_rank <= 0 or not lora_targets:
        raise ValueError("--enable-lora needs a positive rank and target modules")
    loaded = max_loaded_loras if max_loaded_loras is not None else max_loras_per_batch
    if loaded < max_loras_per_batch:
        raise ValueError("max_loaded_loras must be >= max_loras_per_batch (SGLang asserts it)")
    argv = [
        python, "-m", "sglang.launch_server",
        "--model-path", model_path,
        "--served-model-name", served_name,
        "--host", "127.0.0.1",
        "--port", str(port),
        "--tp-size", str(len(gpus)),
        "--dp-size", "1",  # dynamic LoRA and weight updates require a single DP rank
        "--nccl-port", str(nccl_port),
        "--skip-server-warmup",
        "--enable-lora",
        "--max-lora-rank", str(lora_rank),
        "--lora-target-modules", *lora_targets,
        "--max-loras-per-batch", str(max_loras_per_batch),
        "--max-loaded-loras", str(loaded),
    ]  # fmt: skip
    if mem_fraction is not None:
        argv += ["--mem-fraction-static", f"{mem_fraction:g}"]
    if context_length is not None:
        argv += ["--context-length", str(context_length)]
    if api_key:
        argv += ["--api-key", api_key]
    if tool_call_parser:
        argv += ["--tool-call-parser", tool_call_parser]
    if colocated:
        argv += ["--enable-memory-saver", "--enable-weights-cpu-backup"]
    if deterministic:
        argv += ["--enable-deterministic-inference"]

    env = dict(os.environ if base_env is None else base_env)
    env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpus)
    env["PYTHONUNBUFFERED"] = "1"  # log lines arrive as they are written
    if colocated:
        # The memory saver's allocator hooks conflict with a custom caching-allocator config.
        env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    return argv, env


def redact(argv: Sequence[str]) -> list[str]:
    """The argv with key values replaced, for logs and error messages."""
    out = list(argv)
    for i, arg in enumerate(out[:-1]):
        if arg in _SECRET_FLAGS:
            out[i + 1] = "***"
    return out


class SGLangServer:
    """One SGLang child process: start, wait until it generates, stop.

    `argv` is usually `build_launch_command(...)[0]`; tests pass the stand-in's command.
    Only the child's own process group is ever signalled.
    """

    def __init__(
        self,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        *,
        base_url: str,
        ready_timeout_s: float = 900.0,
        poll_interval_s: float = 3.0,
        probe_timeout_s: float = 30.0,
        stop_grace_s: float = 15.0,
        log_tail: int = 40,
    ) -> None:
        self.argv = list(argv)
        self.env = dict(env) if env is not None else None
        self.base_url = base_url.rstrip("/")
        self.ready_timeout_s = ready_timeout_s
        self.poll_interval_s = poll_interval_s
        self.probe_timeout_s = probe_timeout_s
        self.stop_grace_s = stop_grace_s
        self._tail: deque[str] = deque(maxlen=log_tail)
        self._proc: asyncio.subprocess.Process | None = None
        self._pump: asyncio.Task[None] | None = None
        self._exited: asyncio.Task[int] | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode if self._proc is not None else None

    def last_log_lines(self) -> list[str]:
        """The child's most recent output lines (for error messages)."""
        return list(self._tail)

    async def start(self) -> None:
        """Launch the child and return once `/health_generate` answers 200."""
        if self._proc is not None and self._proc.returncode is None:
            return
        log.info("starting SGLang: %s", " ".join(redact(self.argv)))
        self._tail.clear()
        self._proc = await asyncio.create_subprocess_exec(
            *self.argv,
            env=self.env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,  # its own process group: stop() signals only that group
            limit=1 << 20,
        )
        self._pump = asyncio.create_task(self._forward_output(self._proc))
        self._exited = asyncio.create_task(self._proc.wait())
        try:
            await self._wait_ready()
        except BaseException:
            await self.stop()
            raise

    async def _forward_output(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        while True:
            try:
                raw = await proc.stdout.readline()
            except ValueError:  # a line longer than the buffer: take what is there
                raw = await proc.stdout.read(1 << 16)
            if not raw:
                return
            line = raw.decode("utf-8", "replace").rstrip()
            if line:
                self._tail.append(line)
                log.info("%s", line)

    async def _wait_ready(self) -> None:
        assert self._exited is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.ready_timeout_s
        async with httpx.AsyncClient() as client:
            while True:
                if self._exited.done():
                    await self._drain_output()
                    raise BackendError(
                        f"SGLang exited with code {self._exited.result()} before it was ready; "
                        f"last log lines:\n{self._tail_text()}"
                    )
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise BackendError(
                        f"SGLang did not become ready within {self.ready_timeout_s:g} s; "
                        f"last log lines:\n{self._tail_text()}"
                    )
                with contextlib.suppress(httpx.HTTPError):
                    probe = await client.get(
                        f"{self.base_url}/health_generate",
                        timeout=min(self.probe_timeout_s, remaining),
                    )
                    if probe.status_code == 200:
                        log.info("SGLang is ready at %s", self.base_url)
                        return
                pause = min(self.poll_interval_s, max(deadline - loop.time(), 0.0))
                await asyncio.wait({self._exited}, timeout=pause)

    async def stop(self) -> None:
        """SIGTERM the child's process group, SIGKILL it after the grace period."""
        proc = self._proc
        if proc is None:
            return
        pgid = proc.pid  # start_new_session made the child its group's leader
        if proc.returncode is None:
            _signal_group(pgid, signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), self.stop_grace_s)
            except asyncio.TimeoutError:
                log.warning("SGLang ignored SIGTERM for %g s; killing it", self.stop_grace_s)
                _signal_group(pgid, signal.SIGKILL)
                await proc.wait()
        await self._reap_group(pgid)
        await self._drain_output()
        for task in (self._exited, self._pump):
            if task is not None and not task.done():
                task.cancel()
        self._proc = None

    async def _reap_group(self, pgid: int) -> None:
        """Give the child's helpers (scheduler, detokenizer) the grace to exit, then kill them."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.stop_grace_s
        while _signal_group(pgid, 0) and loop.time() < deadline:
            await asyncio.sleep(0.1)
        _signal_group(pgid, signal.SIGKILL)

    async def _drain_output(self) -> None:
        if self._pump is not None:
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(self._pump), 2.0)

    def _tail_text(self) -> str:
        return "\n".join(self._tail) or "(no output)"


def _signal_group(pgid: int, sig: int) -> bool:
    """Signal our child's process group; False when the group no longer exists."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:  # the id now belongs to someone else's group: leave it alone
        return False
    return True
