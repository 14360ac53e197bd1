"""Starts, stops and supervises the engine: model, backend, store, endpoint, loops.

`Engine` is the service interface the CLI and the TUI use. It publishes events to a sink
and keeps a small status snapshot of every loop for the UI.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from clawrl_app.api_key import get_api_key, is_loopback
from clawrl_app.config import Settings
from clawrl_app.cpu_backend import llamacpp_installed, with_cpu_backend
from clawrl_app.engine.admin.routes import engine_routers
from clawrl_app.engine.backends.base import Backend
from clawrl_app.engine.backends.setup import build_backend, canary_tolerance
from clawrl_app.engine.chat.formatter import ChatFormatter
from clawrl_app.engine.chat.openai_schema import ApiError
from clawrl_app.engine.collecting.collector import Collector
from clawrl_app.engine.collecting.event_log import EventLog
from clawrl_app.engine.collecting.storage_watch import StorageWatch
from clawrl_app.engine.core.checkpoints import newest_resumable
from clawrl_app.engine.core.cpu_share import BusyFlag, ServingActivity
from clawrl_app.engine.core.events import (
    Event,
    EventSink,
    RolledBack,
    SampleCreated,
    SessionClosed,
    StatusReported,
    StepFinished,
    TurnRecorded,
    fan_out,
)
from clawrl_app.engine.environments.jobs import EnvJobs
from clawrl_app.engine.judging.feedback import Feedback, apply_feedback, parse_feedback
from clawrl_app.engine.judging.judge import JudgeLoop, build_judge
from clawrl_app.engine.judging.teacher_answer import TeacherShowing
from clawrl_app.engine.judging.teacher_check import TeacherCheck
from clawrl_app.engine.publishing.guard import RegressionGuard
from clawrl_app.engine.publishing.publisher import Publisher
from clawrl_app.engine.publishing.retention import prune
from clawrl_app.engine.publishing.rollback import RollbackError, choose_target
from clawrl_app.engine.serving.api import create_app
from clawrl_app.engine.serving.chat_service import ChatService
from clawrl_app.engine.serving.http_server import HttpServer, bind_socket
from clawrl_app.engine.serving.sampling_defaults import OPENAI_DEFAULTS, recommended_defaults
from clawrl_app.engine.store import DeletedSession, JudgmentRow, Store, StoreError
from clawrl_app.engine.store.faults import log_failure
from clawrl_app.engine.training.config import TOPK_METHODS
from clawrl_app.engine.training.schedule import gate
from clawrl_app.engine.training.supervisor import TrainerSupervisor, trainer_config
from clawrl_app.hardware import ModelInfo, Plan, inventory, plan
from clawrl_app.models import (
    ResolvedModel,
    gguf_source,
    is_embedded,
    read_model_config,
    resolve_model,
)
from clawrl_app.paths import AppPaths
from clawrl_app.privacy.policy import PrivacyPolicy

log = logging.getLogger("clawrl.engine")
TOPK_OPD_K = 8  # teacher tokens kept per position for the top-k methods


@dataclass
class LoopStatus:
    """What the UI shows for one loop."""

    name: str
    state: str = "idle"  # idle | running | failed | stopped
    queue_depth: int = 0
    last_error: str | None = None
    updated: float = field(default_factory=time.time)


class Engine:
    """The headless app: `await start()`, serve until `await stop()`."""

    def __init__(
        self,
        settings: Settings,
        paths: AppPaths,
        *,
        events: EventSink | None = None,
        progress: bool = True,
    ) -> None:
        self.settings = settings
        self.paths = paths.ensure()
        self.progress = progress
        self._sinks: list[EventSink] = [events] if events else []
        self.store: Store | None = None
        self.backend: Backend | None = None
        self.service: ChatService | None = None
        self.http: HttpServer | None = None
        self.model: ResolvedModel | None = None
        self.plan: Plan | None = None
        self.api_key: str | None = None
        self.loops: dict[str, LoopStatus] = {"serving": LoopStatus("serving")}
        self._tasks: list[asyncio.Task[Any]] = []
        self._ready = False
        self._event_log: EventLog | None = None
        self.collector: Collector | None = None
        self.judge_loop: JudgeLoop | None = None
        self.publisher: Publisher | None = None
        self.trainer: TrainerSupervisor | None = None
        self.serving_flag: BusyFlag | None = None
        self._scheduler: Any = None
        self.storage: StorageWatch | None = None
        self.env_jobs: EnvJobs | None = None
        """Env-training/evaluation jobs started from the UI (after the endpoint is up)."""

    # -- wiring ----------------------------------------------------------------------
    def add_sink(self, sink: EventSink) -> None:
        self._sinks.append(sink)

    def _emit(self, event: Event) -> None:
        if isinstance(event, TurnRecorded) and self.storage is not None:
            self.storage.turn_recorded()
        if isinstance(event, TurnRecorded | SessionClosed) and self.collector is not None:
            self.collector.poke()
        elif isinstance(event, SampleCreated) and self.judge_loop is not None:
            self.judge_loop.poke()
        fan_out(*self._sinks)(event)
        if self._event_log is not None:
            self._event_log(event)

    @property
    def url(self) -> str:
        assert self.http is not None
        host = self.settings.server.host
        shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
        return f"http://{shown}:{self.http.port}/v1"

    def ready(self) -> bool:
        return self._ready

    # -- lifecycle -------------------------------------------------------------------
    async def start(self) -> None:
        """Resolve and load the model, start the backend and the endpoint. A failure stops
        what was started already and raises (a `StoreError` names the file and what to do)."""
        try:
            await self._start()
        except BaseException:
            try:
                await self.stop()
            except Exception:  # the start-up failure is what the user needs to see
                log.exception("cleaning up after the failed start failed")
            raise

    async def _start(self) -> None:
        s = self.settings
        self.store = Store(self.paths.store_file)
        # A damaged file is refused now, with what to do, rather than failing turn by turn.
        await asyncio.to_thread(self.store.ensure_sound)
        self.storage = StorageWatch(
            self.store,
            self._emit,
            unrecorded=lambda: self.service.unrecorded_turns if self.service else 0,
        )
        released = self.store.release_claims()  # one engine per store: old claims are dead
        if released:
            log.info("re-queued %d samples whose judging was interrupted", released)
        self._event_log = EventLog(self.store)
        needs_key = s.server.require_api_key or not is_loopback(s.server.host)
        if needs_key:
            key = get_api_key(self.paths)
            assert key is not None
            self.api_key = key.value
        log.info("resolving the model (%s)", s.model.path or "embedded default")
        self.model = await asyncio.to_thread(
            resolve_model, s.model.path, self.paths, progress=self.progress
        )
        info = ModelInfo.from_hf_config(self.model.name, read_model_config(self.model.path))
        self.plan = with_cpu_backend(
            plan(inventory(), info, s),
            s.hardware.backend,
            llamacpp_installed(),
            gguf_source(self.model),
        )
        log.info("loading %s (%s backend)", self.model.name, self.plan.backend)
        backend, tokenizer = await asyncio.to_thread(self._build_backend)
        self.backend = backend
        await backend.start()
        self.serving_flag = self._serving_flag()
        self.service = ChatService(
            backend,
            ChatFormatter(tokenizer),
            self.store,
            alias=s.server.model_alias,
            default_max_tokens=s.server.default_max_tokens,
            sampling_defaults=(
                recommended_defaults(self.model.path, is_embedded(self.model))
                if s.server.sampling_defaults == "model"
                else OPENAI_DEFAULTS
            ),
            stop_repetition=s.server.stop_repetition,
            privacy=PrivacyPolicy.from_settings(s.privacy),
            holdout_share=s.guard.holdout_share if s.guard.enabled else 0.0,
            max_concurrent=s.server.max_concurrent,
            request_timeout_s=s.server.request_timeout_s,
            events=self._emit,
            activity=ServingActivity(self.serving_flag) if self.serving_flag else None,
        )
        self.collector = Collector(self.store, events=self._emit)
        self.judge_loop = JudgeLoop(
            self.store,
            backend,
            self.service.formatter,
            build_judge(s, self.plan.judge_backend, backend, self.service.formatter),
            settings=s.judge,
            grace_s=s.review.grace_s,
            events=self._emit,
            topk=TOPK_OPD_K if s.train.method in TOPK_METHODS else 0,
            answer_tokens=s.server.default_max_tokens if s.judge.teacher_answers else 0,
            teacher_check=TeacherCheck(
                self.store,
                backend,
                self.service.formatter,
                prompts=s.judge.teacher_check_prompts,
                max_rise=s.judge.teacher_check_max_rise,
                max_tokens=s.judge.teacher_check_max_tokens,
                default_tokens=s.server.default_max_tokens,
            ),
        )
        app = create_app(
            self.service,
            api_key=self.api_key,
            max_body_bytes=s.server.max_body_bytes,
            ready=self.ready,
            feedback=self._feedback_route,
            rollback=self._rollback_route,
            routers=engine_routers(self, s.server.max_body_bytes),
            bind_host=s.server.host,
            allowed_hosts=s.server.allowed_hosts,
            allowed_origins=s.server.allowed_origins,
        )
        self.http = HttpServer(app, bind_socket(s.server.host, s.server.port))
        await self.http.start()
        self._tasks.append(asyncio.create_task(self._close_idle_sessions()))
        self._tasks.append(asyncio.create_task(self.collector.run()))
        self._tasks.append(asyncio.create_task(self.judge_loop.run()))
        self.publisher = Publisher(
            self.store,
            backend,
            events=self._emit,
            tolerance=canary_tolerance(self.plan, s),
            state_file=self.paths.data_dir / "served.json",
            activity=self.service.activity,
            guard=(
                RegressionGuard(self.store, backend, self.service.formatter, s.guard)
                if s.guard.enabled
                else None
            ),
            on_guard_refused=self._restart_trainer_from,
            retreat_after=s.guard.retreat_after,
        )
        restored = await self.publisher.restore_served()
        if restored is not None:
            log.info("serving %s again (as before the restart)", restored.version)
        self._tasks.append(asyncio.create_task(self.publisher.run()))
        if s.train.enabled:
            log.info("starting the trainer process")
            self.trainer = TrainerSupervisor(
                trainer_config(
                    self.settings, self.plan, self.paths, self.model.path, self.serving_flag
                ),
                self.paths.data_dir,
                gpus=self.plan.train_devices,
                events=self._trainer_event,
                log_file=self.paths.log_dir / "trainer.log",
            )
            self._tasks.append(asyncio.create_task(self._gate_training()))
            # after a rollback the trainer continues from the rolled-back-to version
            if restored is not None and restored.rolled_back:
                resume = "none" if restored.version == "base" else restored.version
            else:
                resume = self._resume_target()
            await self.trainer.start(resume_from=resume)
        self._tasks.append(asyncio.create_task(self._report_status()))
        loop = asyncio.get_running_loop()

        def emit_from_job(event: Event) -> None:  # the job runs in its own thread
            loop.call_soon_threadsafe(self._emit, event)

        self.env_jobs = EnvJobs(self, emit_from_job)
        self._start_retention()
        self._ready = True
        self.loops["serving"].state = "running"
        log.info("serving %s at %s", self.model.name, self.url)

    def _resume_target(self) -> str:
        """The newest checkpoint the trainer can resume from; damaged ones are skipped with
        a warning (and "none", the base model, when no checkpoint is usable)."""
        assert self.store is not None
        version, skipped = newest_resumable(self.store.list_checkpoints())
        for reason in skipped:
            log.warning("the trainer does not resume from %s", reason)
        return version or "none"

    def _build_backend(self) -> tuple[Backend, Any]:
        assert self.model is not None and self.plan is not None
        return build_backend(self.settings, self.plan, self.model, self.paths)

    async def _close_idle_sessions(self) -> None:
        idle_s = self.settings.server.session_idle_s
        while True:
            await asyncio.sleep(min(30.0, max(idle_s / 4, 0.05)))
            if self.service is not None:
                try:
                    await asyncio.to_thread(self.service.close_idle_sessions, idle_s)
                except Exception as exc:
                    log_failure(log, "closing idle sessions failed", exc)
                    self.loops["serving"].last_error = str(exc)

    def _serving_flag(self) -> BusyFlag | None:
        """The flag a CPU-sharing trainer watches (None when serving or training has GPUs)."""
        assert self.plan is not None
        t = self.settings.train
        if self.plan.serve_devices or self.plan.train_devices or not t.enabled:
            return None
        if t.yield_to_serving_s <= 0:
            return None
        return BusyFlag(self.paths.data_dir / "serving_busy.flag", create=True)

    def _trainer_event(self, event: Event) -> None:
        self._emit(event)
        if isinstance(event, StepFinished) and self.publisher is not None:
            self.publisher.poke()  # publish the new checkpoint now, not at the next poll

    def _start_retention(self) -> None:
        """Prune old checkpoints on a schedule (apscheduler), never blocking the loop."""
        from apscheduler.schedulers.asyncio import AsyncIOScheduler

        t = self.settings.train

        async def job() -> None:
            assert self.store is not None and self.publisher is not None
            pruned = await asyncio.to_thread(
                prune, self.store, self.publisher.served, t.keep_last, t.keep_every
            )
            if pruned:
                log.info("retention pruned %s", ", ".join(pruned))

        self._scheduler = AsyncIOScheduler()
        self._scheduler.add_job(
            job,
            "interval",
            minutes=t.prune_every_min,
            id="retention",
            max_instances=1,
            coalesce=True,
        )
        self._scheduler.start()

    async def _gate_training(self, every_s: float = 2.0) -> None:
        """Open or close the trainer's gate from the schedule and the user's idle time."""
        last: tuple[bool, str] | None = None
        while True:
            t = self.settings.train
            idle = time.monotonic() - (self.service.last_user_request if self.service else 0.0)
            now = gate(t.schedule, t.when_idle_s, idle, datetime.now().astimezone())
            if now != last and self.trainer is not None:
                self.trainer.set_gate(*now)
                last = now
            await asyncio.sleep(every_s)

    async def _report_status(self, every_s: float = 2.0) -> None:
        """Publish a StatusReported snapshot whenever it changed (checked every `every_s`)."""
        last: dict[str, Any] | None = None
        while True:
            await asyncio.sleep(every_s)
            try:
                snap = await asyncio.to_thread(self.status)
            except Exception:
                log.exception("status snapshot failed")
                continue
            comparable = {
                k: {kk: vv for kk, vv in v.items() if kk not in ("ts", "per_min")}
                if isinstance(v, dict)
                else v
                for k, v in snap.items()
            }
            if comparable != last:
                last = comparable
                self._emit(StatusReported(snap))

    async def stop(self) -> None:
        """Stop the endpoint, the loops and the backend; close the store."""
        self._ready = False
        if self.env_jobs is not None:  # its rollouts need the endpoint: end them first
            await asyncio.to_thread(self.env_jobs.stop, 30.0)
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await _bounded("loops", asyncio.gather(*self._tasks, return_exceptions=True))
        self._tasks.clear()
        if self._scheduler is not None:
            self._scheduler.shutdown(wait=False)
            self._scheduler = None
        if self.trainer is not None:
            await _bounded("trainer", self.trainer.stop())
        if self.http is not None:
            await _bounded("endpoint", self.http.stop())
        if self.backend is not None:
            await _bounded("backend", self.backend.stop())
        if self._event_log is not None:
            self._event_log.close()
            self._event_log = None
        if self.store is not None:
            self.store.close()
        self.loops["serving"].state = "stopped"

    @property
    def model_path(self) -> Path | None:
        return self.model.path if self.model else None

    # -- commands (the TUI and the admin API call these) --------------------------------
    async def rate_turn(
        self,
        session_id: str,
        turn: int | None,
        rating: int,
        hint: str | None = None,
        turn_id: int | None = None,
    ) -> JudgmentRow:
        """The user's explicit rating (+1/-1) and optional hint for a turn."""
        body = {
            "session_id": session_id,
            "turn": turn,
            "turn_id": turn_id,
            "rating": rating,
            "hint": hint,
        }
        return await self._apply_feedback(parse_feedback(body))

    async def _apply_feedback(self, fb: Feedback) -> JudgmentRow:
        assert self.store is not None and self.backend is not None and self.service is not None
        assert self.judge_loop is not None
        redactor = self.service.privacy.redactor
        if fb.hint and redactor is not None:  # the hint is stored and trained on too
            hint = redactor.redact(fb.hint)
            self.store.add_redactions(hint.counts)
            fb = replace(fb, hint=hint.text)
        return await apply_feedback(
            self.store,
            self.backend,
            self.service.formatter,
            fb,
            grace_s=self.settings.review.grace_s,
            teacher_version=self.judge_loop.teacher_version(),
            events=self._emit,
            topk=self.judge_loop.topk,
            answer_tokens=self.judge_loop.answer_tokens,
            showing=TeacherShowing.of(self.settings.judge),
        )

    async def rollback(
        self, version: str | None = None, before_session: str | None = None
    ) -> dict[str, Any]:
        """Serve an earlier (or later) checkpoint and restart the trainer from it."""
        assert self.store is not None and self.publisher is not None and self.backend is not None
        rows = self.store.list_checkpoints()
        target = choose_target(rows, self.backend.active_version, version, before_session)
        previous = await self.publisher.roll_back_to(
            target, lambda: self._restart_trainer_from(target)
        )
        reason = (
            f"before session {before_session}"
            if before_session
            else ("explicit version" if version else "previous version")
        )
        self._emit(RolledBack(previous, target, reason))
        return {"object": "rollback", "from": previous, "to": target, "reason": reason}

    async def _restart_trainer_from(self, served: str) -> None:
        """After a rollback, or when the guard refused a candidate: the trainer goes back to
        the served version, so the next checkpoints do not build on what was left."""
        if self.trainer is not None:
            await self.trainer.stop()
            await self.trainer.start(resume_from="none" if served == "base" else served)

    async def _rollback_route(self, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise ApiError(400, "The body must be a JSON object.")
        version, before = body.get("version"), body.get("before_session")
        for name, value in (("version", version), ("before_session", before)):
            if value is not None and not isinstance(value, str):
                raise ApiError(400, f"{name} must be a string.", param=name)
        try:
            return await self.rollback(version, before)
        except RollbackError as exc:
            raise ApiError(404 if version else 400, str(exc), param="version") from None

    async def _feedback_route(self, body: Any) -> dict[str, Any]:
        row = await self._apply_feedback(parse_feedback(body))
        return {
            "object": "feedback",
            "sample_id": row.sample_id,
            "reward": row.score,
            "hint": row.user_hint,
            "teacher_logprobs": row.teacher_logprobs is not None,
        }

    def status(self) -> dict[str, Any]:
        """A snapshot of every loop for the UI and `clawrl-app` commands."""
        out: dict[str, Any] = {
            "serving": {
                "state": self.loops["serving"].state,
                "version": self.backend.active_version if self.backend else None,
            }
        }
        if (prefix_stats := getattr(self.backend, "prefix_cache_stats", None)) is not None:
            out["serving"]["prefix_cache"] = prefix_stats()  # torch backend only
        if self.collector is not None:
            out["collection"] = self.collector.status()
        if self.judge_loop is not None:
            out["judging"] = self.judge_loop.status()
        if self.trainer is not None:
            out["training"] = self.trainer.status()
        if self.publisher is not None:
            out["publishing"] = self.publisher.status()
        if self.storage is not None:
            out["storage"] = self.storage.status()
        if self.store is not None:
            try:
                out["counts"] = counts = self.store.session_stats()
            except StoreError:  # a damaged store: the storage entry says what to do
                out["counts"] = counts = {}
            if "judging" in out:
                out["judging"]["queue_depth"] = counts.get("samples_pending", 0)
            if "collection" in out:
                out["collection"]["queue_depth"] = out["collection"]["waiting"]
            out["privacy"] = self._privacy_status()
        return out

    def _privacy_status(self) -> dict[str, Any]:
        """Redactions per kind (stored) and incognito turns since start-up (not stored)."""
        try:
            redactions = self.store.redaction_counts() if self.store is not None else {}
        except StoreError:
            redactions = {}
        return {
            "redactions": redactions,
            "incognito_turns": self.service.incognito_turns if self.service else 0,
            "redact": self.settings.privacy.redact,
        }

    def delete_session(self, session_id: str) -> DeletedSession | None:
        """Delete a session and everything derived from it (see `Store.delete_session`);
        the session tracker forgets it too. None if unknown."""
        assert self.store is not None
        gone = self.store.delete_session(session_id)
        if gone is not None and self.service is not None:
            self.service.tracker.close(session_id)
        if gone is not None:
            log.info("session %s deleted (%d turns)", session_id, gone.turns)
        return gone


async def _bounded(stage: str, awaitable: Any, timeout_s: float = 30.0) -> None:
    """Await one shutdown stage; a stage that hangs is logged (with where each unfinished
    task waits) and left behind, never blocks exit (wait_for would wait for its cancel)."""
    fut = asyncio.ensure_future(awaitable)
    done, _ = await asyncio.wait({fut}, timeout=timeout_s)
    if fut in done:
        with contextlib.suppress(asyncio.CancelledError):
            fut.result()
        return
    log.warning("stopping the %s took over %.0f s; continuing shutdown", stage, timeout_s)
    for task in asyncio.all_tasks():
        frames = task.get_stack(limit=3)
        if frames and task is not asyncio.current_task():
            where = " <- ".join(f"{f.f_code.co_name}:{f.f_lineno}" for f in frames)
            log.warning("  still running: %s at %s", task.get_name(), where)
    fut.cancel()
