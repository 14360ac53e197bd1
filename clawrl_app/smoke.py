"""`clawrl-app doctor --smoke`: the whole loop once, end to end, in a private temporary home.

Stages, each timed and reported as it finishes:

1. engine: resolve and load the configured model, start the endpoint, `/readyz` answers 200;
2. chat: one chat request through the endpoint with the official `openai` client; the turn
   is recorded in the store;
3. judge: a correcting follow-up ("No, shorter please.") gives that turn a next state; its
   sample is judged with a non-zero score;
4. train: the trainer process makes checkpoint v1 (batch size 1, no review grace);
5. publish: the endpoint serves `clawrl-v1`;
6. canary: the publisher's canary check passed (v1's status is `published`, none refused).

The temporary home (store, checkpoints, logs, config) is removed afterwards, also when a
stage fails or the user presses Ctrl-C. The user's own home is only read: the configured
model is resolved there once (the embedded model's conversion is cached there, as for
`serve`) and the temporary engine is pointed at the resolved folder, so nothing is converted
twice and the user's store and checkpoints are never opened.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clawrl_app.config import Settings
from clawrl_app.paths import AppPaths, app_paths

TIMEOUTS_S = {"chat": 180.0, "judge": 240.0, "train": 900.0, "publish": 240.0}
"""How long each waiting stage may take before it fails (CPU with the embedded model needs a
fraction of this; larger models on CPU need more)."""

CORRECTION = "No, shorter please. Answer in one short sentence."
"""The follow-up that makes the first reply's next state: a clear correction, so the judge's
score is non-zero and the sample trains."""

PROGRESS_EVERY_S = 15.0
"""While a stage waits, a progress line is printed this often."""


class StageFailed(Exception):
    """A stage did not pass: `reason` says what went wrong, `fix` what to do next."""

    def __init__(self, reason: str, fix: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.fix = fix


@dataclass
class StageResult:
    """One stage's outcome as printed."""

    name: str
    ok: bool
    seconds: float
    detail: str


@dataclass
class SmokeRun:
    """What the stages share: the temporary home, the running engine and what they found."""

    settings: Settings
    user_paths: AppPaths
    home: Path
    say: Callable[[str], None]
    thread: Any = None
    session_id: str = field(default_factory=lambda: f"smoke-{uuid.uuid4().hex[:8]}")
    messages: list[dict[str, Any]] = field(default_factory=list)

    @property
    def store(self) -> Any:
        return self.thread.engine.store

    def client(self) -> Any:
        import openai

        key = self.thread.engine.api_key or "smoke"
        return openai.OpenAI(base_url=self.thread.url, api_key=key, max_retries=0, timeout=300)

    def wait(self, what: str, stage: str, check: Callable[[], Any]) -> Any:
        """Poll `check` until it returns something truthy; print progress meanwhile; fail
        after the stage's timeout."""
        timeout = TIMEOUTS_S[stage]
        t0 = last = time.monotonic()
        while True:
            value = check()
            if value:
                return value
            now = time.monotonic()
            if now - t0 > timeout:
                raise StageFailed(
                    f"{what}: not done within {timeout:.0f} s",
                    "run `clawrl-app -v doctor --smoke` to see the engine's log; "
                    "`clawrl-app doctor` shows whether the plan fits this machine",
                )
            if now - last >= PROGRESS_EVERY_S:
                self.say(f"    ... {what} ({now - t0:.0f} s)")
                last = now
            time.sleep(0.25)


def smoke_settings(settings: Settings, model_path: Path) -> Settings:
    """The user's settings with what the smoke test needs: the already-resolved model folder,
    a free loopback port without an API key, training on with batch 1 and no review grace,
    and no regression guard (it would answer the general set before the one step publishes:
    the guard has its own tests; the smoke test checks the pipeline end to end). The anchor
    stays on but with 2 answers of 32 tokens a step (the user's are up to 8 of 128): the
    stage checks that a step with the anchor is taken, not the anchor's size, which made
    most of its minute."""
    data = settings.model_dump()
    data["model"]["path"] = str(model_path)
    data["server"].update(host="127.0.0.1", port=0, require_api_key=False)
    data["train"].update(enabled=True, batch_size=1)
    if data["train"]["anchor_coef"] > 0:
        data["train"].update(anchor_items=min(2, data["train"]["anchor_items"]),
                             anchor_tokens=min(32, data["train"]["anchor_tokens"]))  # fmt: skip
    data["review"].update(grace_s=0.0)
    data["guard"].update(enabled=False)
    return Settings.model_validate(data)


# --- the stages ------------------------------------------------------------------------------
def stage_engine(run: SmokeRun) -> str:
    import httpx

    from clawrl_app.engine.engine_thread import EngineThread
    from clawrl_app.models import ModelError, resolve_model

    try:
        model = resolve_model(run.settings.model.path, run.user_paths)
    except ModelError as exc:
        raise StageFailed(f"model: {exc}", "fix the model setting (`clawrl-app doctor`)") from exc
    paths = app_paths(run.home).ensure()
    run.say(f"    model {model.name} ({model.source}) at {model.path}")
    thread = EngineThread(smoke_settings(run.settings, model.path), paths)
    run.thread = thread
    try:
        thread.start()
    except Exception as exc:
        raise StageFailed(
            f"the engine did not start: {exc}", "`clawrl-app doctor` explains the plan"
        ) from exc
    r = httpx.get(f"{thread.base}/readyz", timeout=30)
    if r.status_code != 200:
        raise StageFailed(f"/readyz answered {r.status_code}: {r.text[:200]}", "see the log")
    return f"endpoint {thread.url}"


def _ask(run: SmokeRun, done: bool = False) -> str:
    headers = {"X-Session-Id": run.session_id, **({"X-Session-Done": "1"} if done else {})}
    r = run.client().chat.completions.create(
        model="clawrl", messages=run.messages, max_tokens=16, extra_headers=headers
    )
    text = r.choices[0].message.content or ""
    run.messages.append({"role": "assistant", "content": text})
    return text


def stage_chat(run: SmokeRun) -> str:
    run.messages = [{"role": "user", "content": "What is the capital of France?"}]
    text = _ask(run)
    turns = run.wait(
        "the turn to be recorded", "chat", lambda: run.store.turns_for_session(run.session_id)
    )
    return f"{len(turns)} turn recorded, reply {text[:40]!r}"


def stage_judge(run: SmokeRun) -> str:
    run.messages.append({"role": "user", "content": CORRECTION})
    _ask(run, done=True)

    def judged() -> Any:
        samples = run.store.samples_for_session(run.session_id)
        return samples and samples[0].judged_at is not None and samples[0]

    sample = run.wait("the judge to score the corrected turn", "judge", judged)
    if sample.state in ("skipped", "excluded"):
        raise StageFailed(
            f"the sample was {sample.state}: {sample.skip_reason}",
            "check the judge and privacy settings (`clawrl-app config show`)",
        )
    judgment = run.store.get_judgment(sample.id)
    score = judgment.score if judgment is not None else 0.0
    if not score:
        raise StageFailed(
            "the judge scored a clear correction 0: the sample cannot train",
            "try another judge backend (judge.backend) and compare with `clawrl-app judge-eval`",
        )
    return f"sample {sample.id} judged {score:+g} by {judgment.backend if judgment else '?'}"


def stage_train(run: SmokeRun) -> str:
    def made() -> Any:
        return run.store.get_checkpoint("v1")

    row = run.wait("the trainer to make checkpoint v1", "train", made)
    return f"checkpoint v1 at step {row.step}"


def served_version(run: SmokeRun) -> str:
    """The version the endpoint serves now (`clawrl-v1`, `clawrl-base`)."""
    import httpx

    data = httpx.get(f"{run.thread.url}/models", timeout=10).json()["data"]
    return str(data[0]["current_version"])


def stage_publish(run: SmokeRun) -> str:
    def published() -> bool:
        row = run.store.get_checkpoint("v1")
        if row is not None and row.status == "refused":
            return True  # the canary stage says why
        return served_version(run) == "clawrl-v1"

    run.wait("the publisher to serve v1", "publish", published)
    served = served_version(run)
    if served != "clawrl-v1":
        reason = run.thread.engine.publisher.last_error or "v1 was refused"
        raise StageFailed(f"the endpoint serves {served}: {reason}", "see the canary stage")
    return f"serving {served}"


def stage_canary(run: SmokeRun) -> str:
    row = run.store.get_checkpoint("v1")
    publisher = run.thread.engine.publisher
    if row is None or row.status != "published" or publisher.refused:
        raise StageFailed(
            f"v1 is {row.status if row else 'missing'}: {publisher.last_error}",
            "the served model and the trainer disagree: report this with `clawrl-app doctor`",
        )
    took = publisher.last_publish_s
    return "v1 published" + (f" (load + canary {took:.1f} s)" if took is not None else "")


STAGES: list[tuple[str, Callable[[SmokeRun], str]]] = [
    ("engine", stage_engine),
    ("chat", stage_chat),
    ("judge", stage_judge),
    ("train", stage_train),
    ("publish", stage_publish),
    ("canary", stage_canary),
]
"""The stages in order; a failed stage skips the ones after it."""


# --- running them ----------------------------------------------------------------------------
@contextmanager
def temporary_home() -> Iterator[Path]:
    """A private temporary home, removed afterwards whatever happens."""
    home = Path(tempfile.mkdtemp(prefix="clawrl-smoke-"))
    try:
        yield home
    finally:
        shutil.rmtree(home, ignore_errors=True)


NOISY_LOGGERS = ("clawrl", "httpx", "httpx2", "apscheduler", "uvicorn")
"""Their INFO lines (every poll, every request) would bury the stage lines; -v keeps them."""


@contextmanager
def _quiet_engine_logs(verbose: bool) -> Iterator[None]:
    """Keep only warnings from the engine and the HTTP clients while the stages run."""
    loggers = [logging.getLogger(name) for name in NOISY_LOGGERS]
    saved = [logger.level for logger in loggers]
    if not verbose:
        for logger in loggers:
            logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        for logger, level in zip(loggers, saved, strict=True):
            logger.setLevel(level)


def _timed(
    name: str, stage: Callable[[SmokeRun], str], run: SmokeRun
) -> tuple[StageResult, StageFailed | None]:
    t0 = time.monotonic()
    try:
        detail = stage(run)
    except StageFailed as exc:
        return StageResult(name, False, time.monotonic() - t0, exc.reason), exc
    except Exception as exc:  # an unexpected error is this stage's failure too
        failed = StageFailed(f"{type(exc).__name__}: {exc}", "run with -v and read the log")
        return StageResult(name, False, time.monotonic() - t0, failed.reason), failed
    return StageResult(name, True, time.monotonic() - t0, detail), None


def run_smoke(
    settings: Settings,
    user_paths: AppPaths,
    *,
    say: Callable[[str], None] = print,
    verbose: bool = False,
) -> int:
    """Run every stage, print one line each, then a summary; 0 if all passed, else 1."""
    results: list[StageResult] = []
    failure: StageFailed | None = None
    t_all = time.monotonic()
    say("clawrl-app doctor --smoke: serve -> record -> judge -> train -> publish -> canary")
    with temporary_home() as home, _quiet_engine_logs(verbose):
        say(f"  temporary home {home} (removed afterwards)")
        run = SmokeRun(settings, user_paths, home, say)
        try:
            for i, (name, stage) in enumerate(STAGES, 1):
                say(f"[{i}/{len(STAGES)}] {name} ...")
                result, failure = _timed(name, stage, run)
                results.append(result)
                mark = "PASS" if result.ok else "FAIL"
                say(f"  {mark} {name:<8} {result.seconds:7.1f} s  {result.detail}")
                if failure is not None:
                    break
        except KeyboardInterrupt:
            say("  interrupted: stopping and removing the temporary home")
            raise
        finally:
            if run.thread is not None:
                say("  stopping the engine ...")
                run.thread.stop()
    total = time.monotonic() - t_all
    say("")
    for name, _ in STAGES[len(results) :]:
        say(f"  SKIP {name}")
    if failure is None:
        say(f"smoke test passed: {len(results)} stages in {total:.1f} s")
        return 0
    say(f"smoke test FAILED at {results[-1].name}: {failure.reason}")
    say(f"what to do: {failure.fix}")
    return 1
