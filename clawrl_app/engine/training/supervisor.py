"""Starts the training process through `accelerate launch`, restarts it after a crash with
backoff, gates it by schedule and idle time, and stops it (its own process group only).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clawrl_app.engine.core.events import EventSink, LoopFailed, StepFinished, StepStarted
from clawrl_app.engine.training.config import TrainerConfig, tis_cap
from clawrl_app.engine.training.lease import LEASE_FILE, LOCK_FILE, OwnerLease
from clawrl_app.hardware import effective_batch_size, effective_lr
from clawrl_app.paths import write_private

if TYPE_CHECKING:
    from clawrl_app.config import Settings
    from clawrl_app.engine.core.cpu_share import BusyFlag
    from clawrl_app.hardware import Plan
    from clawrl_app.paths import AppPaths

log = logging.getLogger("clawrl.trainer")


def launch_command(
    config_file: Path, gpus: tuple[int, ...], python: str = sys.executable, ranks: int = 0
) -> list[str]:
    """How the trainer starts on the plan's devices (CPU when none): one process through
    `accelerate launch`; several ranks (one per trainer GPU, or `ranks` CPU processes)
    through `rank_launch`, which keeps them all in the supervisor's process group (torchrun
    and `accelerate launch --multi_gpu` put each rank in a session of its own, out of reach
    of the group signal). The trainer itself sets up DDP or FSDP (`TrainerConfig.sharding`)."""
    n = ranks or max(1, len(gpus))
    trainer = ["-m", "clawrl_app.engine.training.trainer", "--config", str(config_file)]
    if n > 1:
        return [
            python,
            "-m",
            "clawrl_app.engine.training.rank_launch",
            "--nproc",
            str(n),
            "--",
            *trainer[2:],
        ]
    cmd = [
        python,
        "-m",
        "accelerate.commands.launch",
        "--num_machines",
        "1",
        "--num_processes",
        "1",
        "--dynamo_backend",
        "no",
        "--mixed_precision",
        "no",
    ]
    cmd += ["--cpu"] if not gpus else []
    return [*cmd, *trainer]


def backoff_s(failures: int) -> float:
    """Seconds to wait before restart number `failures` (1, 2, 4, ... capped at 60)."""
    return float(min(60, 2 ** max(0, failures - 1)))


class TrainerSupervisor:
    """Keeps one trainer process alive; `state` is idle|running|backoff|failed|stopped."""

    def __init__(
        self,
        cfg: TrainerConfig,
        run_dir: Path,
        gpus: tuple[int, ...] = (),
        events: EventSink | None = None,
        log_file: Path | None = None,
        ranks: int = 0,
    ) -> None:
        self.cfg = replace(
            cfg,
            control_file=str(run_dir / "trainer_control.json"),
            lock_file=str(run_dir / LOCK_FILE),
        )
        self.lease = OwnerLease(run_dir / LEASE_FILE)
        """Held while this engine lives: a trainer it started stops once the engine is gone."""
        self.run_dir = run_dir
        self.gpus = gpus
        self.ranks = ranks
        """Trainer processes; 0 = one per trainer GPU (one on the CPU)."""
        self.events: EventSink = events or (lambda e: None)
        self.log_file = log_file or run_dir / "trainer.log"
        self.state = "idle"
        self.failures = 0
        self.last_error: str | None = None
        self.last_checkpoint: dict[str, Any] | None = None
        self.step_started_at: float | None = None
        """When the running step began (wall clock); None between steps."""
        self._proc: asyncio.subprocess.Process | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    @property
    def config_file(self) -> Path:
        return self.run_dir / "trainer_config.json"

    def set_gate(self, allowed: bool, reason: str) -> None:
        """Allow or pause training (schedule, idle time); the trainer checks between steps."""
        write_private(
            Path(self.cfg.control_file or ""),
            json.dumps({"allowed": allowed, "reason": reason, "ts": time.time()}).encode(),
        )

    async def start(self, resume_from: str | None = None) -> None:
        if resume_from is not None:
            self.cfg = replace(self.cfg, resume_from=resume_from)
            self.last_checkpoint = None
        token = self.lease.acquire()
        self.cfg = replace(
            self.cfg, owner_lease=str(self.lease.path) if token else None, owner_token=token
        )
        write_private(self.config_file, json.dumps(asdict(self.cfg), indent=1).encode())
        self._stopping = False
        self._task = asyncio.create_task(self._supervise())

    async def _supervise(self) -> None:
        while not self._stopping:
            rc = await self._run_once()
            if self._stopping:
                break
            if rc == 0:  # finished (max_steps reached)
                self.state = "idle"
                return
            self.failures += 1
            self.last_error = f"trainer exited with code {rc}; see {self.log_file}"
            self.events(LoopFailed("training", self.last_error))
            self.state = "backoff"
            await asyncio.sleep(backoff_s(self.failures))
            # a restart resumes from this run's own newest checkpoint (not another branch's)
            if self.last_checkpoint is not None:
                self.cfg = replace(self.cfg, resume_from=str(self.last_checkpoint["version"]))
            write_private(self.config_file, json.dumps(asdict(self.cfg), indent=1).encode())
        self.state = "stopped"

    async def _run_once(self) -> int:
        cmd = launch_command(self.config_file, self.gpus, ranks=self.ranks)
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        if self.gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in self.gpus)
        self._proc = await asyncio.create_subprocess_exec(
            *cmd,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        self.state = "running"
        assert self._proc.stdout is not None
        fd = os.open(self.log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.chmod(self.log_file, 0o600)  # the trainer's log is the user's data too
        with os.fdopen(fd, "ab") as logf:
            async for line in self._proc.stdout:
                logf.write(line)
                logf.flush()
                self._parse(line)
        self.step_started_at = None
        return await self._proc.wait()

    def _parse(self, line: bytes) -> None:
        text = line.decode(errors="replace").strip()
        if text.startswith("{") and '"event"' in text:
            with contextlib.suppress(ValueError):
                msg = json.loads(text)
                if msg.get("event") == "step_started":
                    self.step_started_at = time.time()
                    self.events(StepStarted(int(msg.get("step", 0))))
                if msg.get("event") == "checkpoint":
                    self.last_checkpoint = msg
                    self.step_started_at = None
                    self.failures = 0
                    metrics = {
                        k: float(v)
                        for k, v in msg.items()
                        if isinstance(v, int | float) and k not in ("event", "step")
                    }
                    self.events(
                        StepFinished(int(msg.get("step", 0)), str(msg.get("version")), metrics)
                    )

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc and self._proc.returncode is None else None

    async def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM the trainer's process group, SIGKILL after `grace_s`."""
        self._stopping = True
        proc = self._proc
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), grace_s)
            except asyncio.TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                await proc.wait()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.lease.release()
        self.state = "stopped"

    def status(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "failures": self.failures,
            "last_error": self.last_error,
            "pid": self.pid,
            "last_checkpoint": self.last_checkpoint,
            "stepping": self.step_started_at is not None,
            "step_started_at": self.step_started_at,
        }


def trainer_config(
    settings: Settings,
    plan: Plan,
    paths: AppPaths,
    model_path: Path,
    serving_flag: BusyFlag | None,
) -> TrainerConfig:
    """The trainer process's configuration from the settings and the hardware plan (the
    effective learning rate and batch size, the mode auto chose, where it may pause)."""
    t = settings.train
    mode = plan.train_mode  # the asked mode, or what auto chose
    return TrainerConfig(
        store_path=str(paths.store_file),
        checkpoints_dir=str(paths.checkpoints_dir),
        model_path=str(model_path),
        method=t.method,
        mode=mode,
        batch_size=effective_batch_size(plan),
        lr=effective_lr(plan),
        updates_per_batch=t.updates_per_batch,
        lora_rank=t.lora_rank,
        lora_alpha=t.lora_alpha,
        weight_decay=0.1 if mode == "full" else 0.0,
        token_budget=plan.token_budget or t.token_budget,
        max_staleness=t.max_staleness,
        baseline=t.baseline,
        credit_accepted=t.credit_accepted,
        replay_demos=t.replay_demos,
        replay_uses=t.replay_uses,
        opd_center=t.opd_baseline == "batch_mean",
        w_rl=t.w_rl,
        w_opd=t.w_opd,
        kl_coef=t.kl_coef,
        anchor_coef=t.anchor_coef,
        anchor_items=t.anchor_items,
        anchor_tokens=t.anchor_tokens,
        anchor_free_stop=t.anchor_free_stop,
        signal_norm=t.signal_norm,
        repeat_ngram=t.repeat_ngram,
        repeat_penalty=t.repeat_penalty,
        tis_cap=tis_cap(t.behaviour_correction, t.tis_cap, plan.backend),
        approved_only=settings.review.mode == "manual",
        device="cuda" if plan.train_devices else "cpu",
        gradient_checkpointing=plan.gradient_checkpointing,
        sharding=plan.train_sharding,
        custom_loss_path=t.custom_loss_path,
        serving_flag_file=str(serving_flag.path) if serving_flag else None,
        yield_max_s=t.yield_to_serving_s if serving_flag else 0.0,
    )
