"""Env-training and evaluation jobs run by the engine itself (the Environments screen).

`clawrl-app env train|eval` drives rollouts from a separate process; the terminal UI
starts the same work here instead, in one background thread of the engine: rollouts go
through the engine's own endpoint (so every model turn is recorded like any client's) and
their groups are posted to its own admin route, so the trainer learns from them unchanged.
One job at a time. Its progress (episodes, success rate and mean outcome reward per round,
checkpoints made, the live episode turn by turn) is kept in memory for `status()`, the
per-round figures are also appended to the store's metrics (`env/<name>/success_rate`,
`env/<name>/reward_mean`), and each change is published as an `EnvJobUpdated` event.

Stopping sets a flag: no new rollout group starts, and the episodes in flight end at their
next model call as ABORTED, which is never trained on.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from clawrl_app.engine.core.events import EnvJobUpdated, Event

log = logging.getLogger("clawrl.env_jobs")
NO_SIGNAL = "every group scored the same: this model gets no signal from this env"
"""Shown while no training group had any variance (= `envs.training.NO_SIGNAL`)."""
LIVE_TURNS = 30  # turns of the live episode kept for the UI
TEXT_CHARS = 1500  # per model reply / observation shown
PROBE_TTL_S = 60.0
NEEDS = {"terminal": "sandbox", "swe": "sandbox", "browser": "browser"}
"""What an env needs besides Python (envs not named here need nothing)."""


class JobRefused(ValueError):
    """A job that cannot start (one is running, unknown env, training off): says why."""


class JobStopped(RuntimeError):
    """Raised into a rollout's model call once the job is stopped (the episode aborts)."""


@dataclass(frozen=True)
class JobRequest:
    kind: str  # "train" or "eval"
    env: str
    steps: int = 2
    """train: new checkpoints to make before the job ends."""
    split: str = "heldout"
    """eval: which tasks."""
    limit: int = 0
    """eval: only the first N tasks (0 = all)."""
    group_size: int | None = None
    """train: episodes per task; None: `[envs] group_size`."""
    tasks_per_round: int | None = None
    """train: tasks per round; None: `[envs] tasks_per_round`."""
    max_tokens: int | None = None
    """Per model turn; None: the endpoint's default (`server.default_max_tokens`)."""
    max_rounds: int = 50
    seed: int = 0
    families: tuple[str, ...] = ()
    """Only these task families (empty: all)."""


@dataclass
class _Job:
    request: JobRequest
    id: str = field(default_factory=lambda: f"job-{uuid.uuid4().hex[:10]}")
    state: str = "starting"  # starting | running | stopping | finished | stopped | failed
    started: float = field(default_factory=time.time)
    finished: float | None = None
    error: str | None = None
    checkpoints: int = 0
    episodes: int = 0
    successes: int = 0
    aborted: int = 0
    groups: int = 0
    varied: int = 0
    """Training groups, and those with any variance (some advantage not 0)."""
    rounds: list[dict[str, Any]] = field(default_factory=list)
    pending: list[float | None] = field(default_factory=list)
    """Outcome rewards of this round's episodes so far (None: aborted)."""
    live: dict[str, Any] | None = None

    def snapshot(self) -> dict[str, Any]:
        r = self.request
        return {
            "id": self.id, "kind": r.kind, "env": r.env, "state": self.state,
            "started": self.started, "finished": self.finished, "error": self.error,
            "steps": r.steps if r.kind == "train" else None,
            "split": r.split if r.kind == "eval" else "train", "families": list(r.families),
            "checkpoints": self.checkpoints, "episodes": self.episodes,
            "successes": self.successes, "aborted": self.aborted,
            "success_rate": self.successes / self.episodes if self.episodes else None,
            "groups": self.groups, "varied": self.varied,
            "note": NO_SIGNAL if self.groups and not self.varied else None,
            "rounds": [dict(x) for x in self.rounds],
            "live": None if self.live is None else {**self.live, "turns": list(self.live["turns"])},
        }  # fmt: skip


def _clip(text: Any) -> str:
    s = str(text or "")
    return s if len(s) <= TEXT_CHARS else s[: TEXT_CHARS - 1] + "…"


def round_figures(index: int, rewards: list[float | None], successes: int) -> dict[str, Any]:
    """One round's row: episodes, successes, success rate and mean outcome reward (over the
    episodes that have one; aborted episodes count as episodes, never as rewards)."""
    scored = [r for r in rewards if r is not None]
    return {
        "round": index,
        "episodes": len(rewards),
        "successes": successes,
        "success_rate": successes / len(rewards) if rewards else 0.0,
        "reward_mean": sum(scored) / len(scored) if scored else None,
    }


class EnvJobs:
    """Runs at most one env job at a time for `engine` (an `Engine`, typed loosely to keep
    this module free of the orchestrator's imports)."""

    def __init__(self, engine: Any, emit: Callable[[Event], None]) -> None:
        self.engine = engine
        self._emit = emit
        self._lock = threading.Lock()
        self._job: _Job | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._probe: tuple[float, dict[str, Any]] | None = None

    # -- what the screen shows ------------------------------------------------------------
    def requirements(self) -> dict[str, Any]:
        """Sandbox and browser availability (probed at most once a minute)."""
        now = time.monotonic()
        if self._probe is not None and now - self._probe[0] < PROBE_TTL_S:
            return self._probe[1]
        out: dict[str, Any] = {}
        try:
            from clawrl_app.envs.sandbox.probe import probe

            st = probe()
            out["sandbox"] = {"ok": st.ok, "name": st.name, "detail": st.detail}
        except Exception as exc:
            out["sandbox"] = {"ok": False, "name": "none", "detail": str(exc)}
        out["browser"] = browser_status()
        self._probe = (now, out)
        return out

    def overview(self) -> dict[str, Any]:
        """Every env with its task families and counts, whether it can run here, and the
        sandbox/browser status."""
        from clawrl_app.envs import env_names, make_env

        req = self.requirements()
        envs = []
        for name in env_names():
            row: dict[str, Any] = {"name": name, "needs": NEEDS.get(name)}
            try:
                tasks = make_env(name, allow_unsafe=True).tasks()
            except Exception as exc:
                row.update(tasks=0, train=0, heldout=0, families={}, available=False,
                           why=f"{type(exc).__name__}: {exc}")  # fmt: skip
                envs.append(row)
                continue
            split = Counter(t.split for t in tasks)
            need = NEEDS.get(name)
            missing = None if need is None or req[need]["ok"] else str(req[need]["detail"])
            row.update(
                tasks=len(tasks), train=split["train"], heldout=split["heldout"],
                families=dict(sorted(Counter(t.family for t in tasks).items())),
                available=missing is None, why=missing,
            )  # fmt: skip
            envs.append(row)
        return {"envs": envs, **req}

    def status(self) -> dict[str, Any] | None:
        """The running (or last) job, None when none ran since the engine started."""
        with self._lock:
            return None if self._job is None else self._job.snapshot()

    # -- commands -------------------------------------------------------------------------
    def start(self, request: JobRequest) -> dict[str, Any]:
        """Start a job; JobRefused says why it cannot."""
        from clawrl_app.envs import env_names, make_env

        if request.kind not in ("train", "eval"):
            raise JobRefused("kind must be train or eval")
        if request.env not in env_names():
            raise JobRefused(f"unknown env {request.env!r}; known: {', '.join(env_names())}")
        if request.kind == "train" and not self.engine.settings.train.enabled:
            raise JobRefused(
                "training is off (train.enabled = false): turn it on in the config, or "
                "start an evaluation instead"
            )
        if request.families:
            known = {t.family for t in make_env(request.env, allow_unsafe=True).tasks()}
            unknown = sorted(set(request.families) - known)
            if unknown:
                raise JobRefused(
                    f"{request.env} has no task family {', '.join(unknown)}; "
                    f"its families: {', '.join(sorted(known))}"
                )
        need = NEEDS.get(request.env)
        if need is not None and not self.requirements()[need]["ok"]:
            raise JobRefused(
                f"{request.env} cannot run here: {self.requirements()[need]['detail']}"
            )
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                raise JobRefused("a job is running: stop it first")
            self._stop.clear()
            self._job = job = _Job(request)
            self._thread = threading.Thread(
                target=self._run, args=(job,), name="clawrl-env-job", daemon=True
            )
            self._thread.start()
            snap = job.snapshot()
        log.info("env job %s: %s %s", job.id, request.kind, request.env)
        self._publish(job)
        return snap

    def stop(self, wait_s: float = 0.0) -> dict[str, Any] | None:
        """Ask the running job to stop; wait up to `wait_s` for it to end."""
        with self._lock:
            job, thread = self._job, self._thread
            if job is not None and job.state in ("starting", "running"):
                job.state = "stopping"
        self._stop.set()
        if job is not None:
            self._publish(job)
        if thread is not None and wait_s > 0:
            thread.join(wait_s)
        return self.status()

    # -- the job thread -------------------------------------------------------------------
    def _publish(self, job: _Job) -> None:
        with self._lock:
            ev = EnvJobUpdated(job.id, job.request.kind, job.request.env, job.state,
                               job.episodes, job.successes, job.checkpoints)  # fmt: skip
        try:
            self._emit(ev)
        except Exception:  # a sink must never break the job
            log.exception("publishing an env job update failed")

    def _run(self, job: _Job) -> None:
        from clawrl_app.envs.engine_client import EngineClient

        base = self.engine.url.removesuffix("/v1")
        client = EngineClient(base, self.engine.api_key, timeout_s=300)
        try:
            with self._lock:
                job.state = "running"
            self._publish(job)
            if job.request.kind == "train":
                self._train(job, client)
            else:
                self._eval(job, client)
            end = "stopped" if self._stop.is_set() else "finished"
        except Exception as exc:
            log.exception("env job %s failed", job.id)
            end = "stopped" if self._stop.is_set() else "failed"
            with self._lock:
                job.error = f"{type(exc).__name__}: {exc}"
        finally:
            client.close()
        with self._lock:
            job.state, job.finished = end, time.time()
        log.info("env job %s %s", job.id, end)
        self._publish(job)

    def _policy_for(self, job: _Job, temperature: float) -> Callable[[int], Any]:
        from clawrl_app.envs.endpoint_policy import EndpointPolicy

        stop = self._stop
        r = job.request

        def make(seed: int) -> Any:
            inner = EndpointPolicy(
                base_url=self.engine.url, env_name=r.env,
                model=self.engine.settings.server.model_alias, api_key=self.engine.api_key,
                temperature=temperature, max_tokens=r.max_tokens,
                seed=seed if temperature == 0 else None,
                tool_choice=self.engine.settings.envs.tool_choice_for(r.env),
            )  # fmt: skip

            def policy(messages: Any, tools: Any, *, session_id: str) -> Any:
                if stop.is_set():
                    raise JobStopped("the job was stopped")
                return inner(messages, tools, session_id=session_id)

            return policy

        return make

    def _hooks(self, job: _Job) -> Any:
        from clawrl_app.envs.training import RolloutHooks

        def on_turn(task: Any, session_id: str, rec: Any) -> None:
            turn = {
                "index": rec.index,
                "response": _clip(rec.response_text),
                "actions": [_clip(f"{a.tool or 'text'} {a.arguments or a.text}")
                            for a in rec.actions],
                "observations": [_clip(o.text) for o in rec.observations],
                "parse_error": rec.parse_error,
            }  # fmt: skip
            with self._lock:
                live = job.live
                if live is None or live["session_id"] != session_id:
                    live = job.live = {
                        "task_id": task.id, "instruction": _clip(task.instruction),
                        "session_id": session_id, "turns": [], "result": None,
                    }  # fmt: skip
                live["turns"] = (live["turns"] + [turn])[-LIVE_TURNS:]
            self._publish(job)

        def on_episode(task: Any, ep: Any) -> None:
            v = ep.verdict
            result = {
                "status": ep.status.value, "reason": ep.reason,
                "score": v.score if v else None, "success": bool(v and v.success),
                "reward": ep.outcome_reward,
            }  # fmt: skip
            with self._lock:
                job.episodes += 1
                job.successes += bool(ep.trainable and v and v.success)
                job.aborted += not ep.trainable
                job.pending.append(ep.outcome_reward if ep.trainable else None)
                if job.live is not None and job.live["session_id"] == ep.session_id:
                    job.live["result"] = result
            self._publish(job)

        return RolloutHooks(on_turn=on_turn, on_episode=on_episode, should_stop=self._stop.is_set)

    def _close_round(
        self, job: _Job, index: int, successes: int, checkpoints: int, rep: Any = None
    ) -> None:
        with self._lock:
            row = round_figures(index, job.pending, successes)
            row["checkpoints"] = checkpoints
            if rep is not None and rep.groups:
                row["groups"], row["varied"] = rep.groups, rep.varied
                row["outcome_varied"] = rep.outcome_varied
                job.groups += rep.groups
                job.varied += rep.varied
            if rep is not None and rep.validated:
                row["validation"] = {"version": rep.validated[0], "success": rep.validated[1]}
            job.rounds.append(row)
            job.pending = []
            job.checkpoints = checkpoints
        store = self.engine.store
        if store is not None and row["episodes"]:
            name = job.request.env
            base = len(store.metrics(f"env/{name}/success_rate"))
            store.add_metric(base + 1, f"env/{name}/success_rate", row["success_rate"])
            if row["reward_mean"] is not None:
                store.add_metric(base + 1, f"env/{name}/reward_mean", row["reward_mean"])
        self._publish(job)

    def _settings(self, job: _Job) -> Any:
        from clawrl_app.envs.training import RolloutSettings

        r, envs = job.request, self.engine.settings.envs
        return RolloutSettings(group_size=r.group_size or envs.group_size,
                               tasks_per_round=r.tasks_per_round or envs.tasks_per_round,
                               judge=envs.step_judge, max_tokens=r.max_tokens, seed=r.seed,
                               families=r.families,
                               validation_per_family=envs.validation_per_family)  # fmt: skip

    def _train(self, job: _Job, client: Any) -> None:
        from clawrl_app.envs.training import train_env

        cfg = self._settings(job)

        def on_round(index: int, rep: Any, made: int) -> None:
            self._close_round(job, index + 1, rep.successes, made, rep)

        train_env(
            job.request.env, client, self._policy_for(job, cfg.temperature), job.request.steps,
            cfg, on_round=on_round, max_rounds=job.request.max_rounds, hooks=self._hooks(job),
            greedy_for=self._policy_for(job, 0.0),
        )  # fmt: skip

    def _eval(self, job: _Job, client: Any) -> None:
        from clawrl_app.envs.training import evaluate_env

        r = job.request
        _, rep = evaluate_env(
            r.env, client, self._policy_for(job, 0.0), self._settings(job), split=r.split,
            limit=r.limit, hooks=self._hooks(job),
        )  # fmt: skip
        self._close_round(job, 1, rep.successes, job.checkpoints)


def browser_status() -> dict[str, Any]:
    """Whether the browser env can run: Debian's Chromium and the Playwright package."""
    import importlib.util
    import shutil

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    playwright = importlib.util.find_spec("playwright") is not None
    if chromium and playwright:
        return {"ok": True, "detail": f"Chromium at {chromium}, Playwright installed"}
    missing = []
    if not chromium:
        missing.append("Chromium (sudo apt-get install -y chromium)")
    if not playwright:
        missing.append("Playwright (pip install playwright; never `playwright install`)")
    return {"ok": False, "detail": "missing " + " and ".join(missing)}
