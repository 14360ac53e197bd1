"""Training on CPU with the real embedded model: steps, checkpoints, publishing, resume."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import torch

from clawrl_app.engine.core.checkpoints import read_manifest
from clawrl_app.engine.core.cpu_share import BusyFlag
from clawrl_app.engine.store import Store
from clawrl_app.engine.training.config import TrainerConfig
from clawrl_app.engine.training.train_data import TrainItem, build_item
from clawrl_app.engine.training.trainer import Trainer
from tests.conftest import start_engine, wait_for

pytestmark = pytest.mark.slow
REPLIES = ["No, that's too long. Answer in one short sentence.", "Thanks, perfect!"]


def converse(url: str, n_sessions: int, tag: str) -> None:
    """Two-reply conversations: the first answer is corrected, the second thanked."""
    c = openai.OpenAI(base_url=url, api_key="x", max_retries=0)
    for k in range(n_sessions):
        msgs: list[dict[str, Any]] = [
            {"role": "user", "content": f"Tell me about topic {k} ({tag})."}
        ]
        for i in range(3):
            done = {"X-Session-Done": "1"} if i == 2 else {}
            # The thanked answer must end by itself (a stop string): a cut-off answer
            # (`length`) is never rewarded +1 by a thanks (judge.cap_cut_off).
            stop = [" ", "\n", ".", ","] if i == 1 else None
            r = c.chat.completions.create(
                model="clawrl",
                messages=msgs,
                max_tokens=12,
                temperature=1.0,
                stop=stop,
                extra_headers={"X-Session-Id": f"{tag}-{k}", **done},
            )
            if i < 2:
                msgs = [
                    *msgs,
                    {"role": "assistant", "content": r.choices[0].message.content},
                    {"role": "user", "content": REPLIES[i]},
                ]


@pytest.fixture(scope="module")
def training_events() -> list[Any]:
    return []


@pytest.fixture(scope="module")
def training_engine(
    embedded_model: Any, tmp_path_factory: pytest.TempPathFactory, training_events: list[Any]
) -> Any:
    """An engine whose trainer process runs (batch 2, no review grace; a step pauses for
    serving at most 2 s, so continuous test traffic cannot stall it for long)."""
    env = {
        "CLAWRL_MODEL__PATH": str(embedded_model.path),
        "CLAWRL_SERVER__PORT": "0",
        "CLAWRL_TRAIN__BATCH_SIZE": "2",
        "CLAWRL_TRAIN__YIELD_TO_SERVING_S": "2",
        "CLAWRL_REVIEW__GRACE_S": "0",
        "CLAWRL_TRAIN__W_OPD": "1.5",  # the combine weights reach the trainer's loss
        "CLAWRL_TRAIN__KL_COEF": "0.05",  # and the KL anchor (the trainer scores the base)
        "CLAWRL_TRAIN__ANCHOR_COEF": "1.0",  # and the anchor on general prompts, as shipped
        "CLAWRL_TRAIN__ANCHOR_ITEMS": "2",
        "CLAWRL_TRAIN__ANCHOR_TOKENS": "16",
        "CLAWRL_TRAIN__ANCHOR_FREE_STOP": "true",
    }
    running = start_engine(tmp_path_factory.mktemp("train-home"), env, training_events.append)
    yield running
    running.stop()


class ChatWhileTraining:
    """Chats continuously in a thread; records every status code and failure."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.codes: list[int] = []
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        with httpx.Client(timeout=120) as c:
            while not self.stop.is_set():
                try:
                    r = c.post(
                        f"{self.url}/chat/completions",
                        headers={"X-Turn-Type": "side"},
                        json={
                            "model": "clawrl",
                            "max_tokens": 6,
                            "messages": [{"role": "user", "content": "hi"}],
                        },
                    )
                    self.codes.append(r.status_code)
                except httpx.HTTPError as exc:
                    self.errors.append(repr(exc))
                time.sleep(0.05)


def test_trainer_process_steps_publishes_and_serves_the_new_version(training_engine: Any) -> None:
    eng = training_engine.engine
    chatter = ChatWhileTraining(training_engine.url)
    chatter.thread.start()
    converse(training_engine.url, 2, "t")  # 2 sessions x 2 judged turns = 4 samples = 2 steps
    store = eng.store
    rows = wait_for(
        lambda: [c for c in store.list_checkpoints() if c.step >= 2] and store.list_checkpoints(),
        timeout=240,
    )
    wait_for(lambda: eng.backend.active_version == "v2", timeout=60)
    chatter.stop.set()
    chatter.thread.join(60)
    # chat requests issued while training steps and publishes ran all completed
    assert chatter.errors == [] and chatter.codes and set(chatter.codes) == {200}
    assert [c.version for c in rows][:2] == ["v1", "v2"]
    manifest = read_manifest(Path(rows[1].path))
    assert (
        manifest.parent == "v1" and manifest.sessions and set(manifest.sessions) <= {"t-0", "t-1"}
    )
    assert len(manifest.samples) == 2 and manifest.canary
    assert (Path(rows[1].path) / "adapter_model.safetensors").exists()
    losses = store.metrics("loss")
    assert len(losses) >= 2 and all(torch.isfinite(torch.tensor(m.value)) for m in losses)
    assert store.metrics("time/step_s") and store.metrics("reward/mean")
    for sid in manifest.samples:
        assert store.get_sample(sid).trained_in == "v2"
    # the publisher loaded v2 (canary passed) and routes new requests to it
    wait_for(lambda: eng.backend.active_version == "v2", timeout=60)
    ids = [m["id"] for m in httpx.get(f"{training_engine.url}/models").json()["data"]]
    assert "clawrl-v2" in ids
    r = openai.OpenAI(
        base_url=training_engine.url, api_key="x", max_retries=0
    ).chat.completions.create(
        model="clawrl",
        messages=[{"role": "user", "content": "Hello again"}],
        max_tokens=4,
        extra_headers={"X-Session-Id": "after-publish"},
    )
    assert r.model == "clawrl-v2"
    assert store.turns_for_session("after-publish")[0].policy_version == "v2"
    assert store.get_checkpoint("v2").status == "published"
    written = json.loads(eng.trainer.config_file.read_text())
    assert (written["w_opd"], written["w_rl"], written["method"]) == (1.5, 1.0, "combine")
    assert written["kl_coef"] == 0.05
    assert (written["anchor_coef"], written["anchor_items"], written["anchor_tokens"]) == (
        1.0,
        2,
        16,
    )
    assert written["anchor_free_stop"] is True


def test_steps_pause_for_serving_within_their_budget_and_report_events(
    training_engine: Any, training_events: list[Any]
) -> None:
    """CPU-only: the endpoint raises the shared flag while answering and the trainer
    pauses at its layer hooks. The chatter above talked without a break, so each step
    paused, and never longer than train.yield_to_serving_s (2 s here)."""
    eng = training_engine.engine
    assert eng.serving_flag is not None and not eng.serving_flag.busy()
    paused = [m.value for m in eng.store.metrics("time/paused_s")]
    assert paused and paused[0] > 0.0
    assert all(p <= 2.0 + 0.5 for p in paused)
    kinds = [e.kind for e in training_events]
    assert "StepStarted" in kinds and "StepFinished" in kinds
    finished = [e for e in training_events if e.kind == "StepFinished"]
    assert finished[0].version == "v1" and finished[0].step == 1
    assert "loss" in finished[0].metrics
    assert kinds.index("StepStarted") < kinds.index("StepFinished")


def test_rollback_and_roll_forward_switch_the_served_version(training_engine: Any) -> None:
    eng, url = training_engine.engine, training_engine.url
    admin = f"{url.removesuffix('/v1')}/admin/rollback"
    wait_for(lambda: eng.backend.active_version == "v2", timeout=120)
    client = openai.OpenAI(base_url=url, api_key="x", max_retries=0)

    def served_model() -> str:
        return client.chat.completions.create(
            model="clawrl",
            max_tokens=2,
            messages=[{"role": "user", "content": "hi"}],
            extra_headers={"X-Turn-Type": "side"},
        ).model

    r = httpx.post(admin, json={}, timeout=120)
    assert r.status_code == 200 and r.json()["from"] == "v2" and r.json()["to"] == "v1"
    assert served_model() == "clawrl-v1"
    assert httpx.get(f"{url}/models").json()["data"][0]["current_version"] == "clawrl-v1"
    assert (
        eng.trainer.cfg.resume_from == "v1"
    )  # the trainer restarts from the rolled-back-to version
    r = httpx.post(admin, json={"version": "v2"}, timeout=120)
    assert r.json()["to"] == "v2" and served_model() == "clawrl-v2"  # roll forward
    r = httpx.post(admin, json={"before_session": "t-0"}, timeout=120)
    consumed_t0 = {c.version for c in eng.store.list_checkpoints() if "t-0" in c.sessions}
    assert r.json()["to"] not in consumed_t0 and served_model() == f"clawrl-{r.json()['to']}"
    bad = httpx.post(admin, json={"version": "v999"}, timeout=30)
    assert bad.status_code == 404 and "v999" in bad.json()["error"]["message"]
    kinds = [e.kind for e in eng.store.events_since(0, limit=5000)]
    assert kinds.count("RolledBack") == 3


def test_env_training_serves_the_version_best_on_validation(training_engine: Any) -> None:
    """`Validation.keep_best` through the real admin route: the served version scored below
    an earlier one is replaced by it (a rollback), then put back by hand."""
    from clawrl_app.envs.engine_client import EngineClient
    from clawrl_app.envs.selection import Validation, served_version

    eng = training_engine.engine
    wait_for(lambda: eng.backend.active_version is not None, timeout=120)
    client = EngineClient(training_engine.url.removesuffix("/v1"))
    try:
        served = served_version(client)
        other = next(c.version for c in eng.store.list_checkpoints() if c.version != served)
        validation = Validation([], [(other, 0.6), (served, 0.2)])
        assert validation.keep_best(client) == other
        assert served_version(client) == other == eng.backend.active_version
        assert Validation([], [(other, 0.2), (served, 0.2)]).keep_best(client) is None
        client.rollback(served)
        assert served_version(client) == served
    finally:
        client.close()


def copy_store(src: Path, dst: Path) -> Path:
    """A consistent copy of a live WAL store (SQLite backup API)."""
    with sqlite3.connect(src) as a, sqlite3.connect(dst) as b:
        a.backup(b)
    return dst


def judged_items(store: Store, step: int = 0) -> list[TrainItem]:
    items = []
    for sess in store.list_sessions(limit=100):
        for s in store.samples_for_session(sess.id):
            j, t = store.get_judgment(s.id), store.get_turn(s.turn_id)
            if j is not None and t is not None:
                got = build_item(s, t, j, "combine", step, 8)
                if isinstance(got, TrainItem):
                    items.append(got)
    return items


def test_two_lora_steps_change_every_trainable_parameter_and_resume(
    training_engine: Any, tmp_path: Path
) -> None:
    """In-process trainer on a copy of real recorded, judged samples."""
    converse(training_engine.url, 1, "p")
    src = Path(training_engine.engine.store.path)
    wait_for(lambda: len(judged_items(training_engine.engine.store)) >= 2, timeout=60)
    db = copy_store(src, tmp_path / "copy.sqlite3")
    cfg = TrainerConfig(
        store_path=str(db),
        checkpoints_dir=str(tmp_path / "ckpt"),
        model_path=str(training_engine.engine.model.path),
        batch_size=2,
        resume_from="none",
        serving_flag_file=str(tmp_path / "no-such.flag"),  # missing: train, never pause
        yield_max_s=30.0,
        kl_coef=0.1,
        anchor_coef=0.5,  # and the anchor on the base's answers to general prompts
        anchor_items=2,
        anchor_tokens=8,
    )
    trainer = Trainer(cfg)
    assert trainer.serving is None and trainer.yield_to_serving() == 0.0
    with Store(db) as store:
        items = judged_items(store)[:2]
    assert len(items) == 2
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    assert before and all("lora_" in n for n in before)
    m1 = trainer.train_step(items)
    m2 = trainer.train_step(items)
    after = dict(trainer.model.named_parameters())
    unchanged = [n for n, p in before.items() if torch.equal(p, after[n].detach())]
    assert unchanged == [], f"{len(unchanged)} trainable tensors did not change"
    for m in (m1, m2):
        assert torch.isfinite(torch.tensor(m["loss"])) and m["tokens"] > 0
    # the KL anchor: a fresh adapter is the base (0), one step later it has moved away
    assert m1["kl"] == pytest.approx(0.0, abs=1e-6) and m2["kl"] > 1e-6
    assert m1["loss/anchor_kl"] == pytest.approx(0.0, abs=1e-6) and m2["loss/anchor_kl"] > 0
    assert trainer.anchor is not None and len(trainer.anchor.seqs) >= 24
    with Store(db) as store:
        existing = [c.version for c in store.list_checkpoints()]
    version = trainer.save(items, m2)
    assert version not in existing and version.startswith("v")  # never reused, even across runs
    saved = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    # resume: weights, optimizer state and step come back from the registered checkpoint
    resumed = Trainer(TrainerConfig(**{**cfg.__dict__, "resume_from": version}))
    assert resumed.step == 2 and resumed.parent == version
    got = dict(resumed.model.named_parameters())
    assert all(torch.allclose(p, got[n].detach()) for n, p in saved.items())
    assert resumed.optimizer.state_dict()["state"], "optimizer state was restored"
    shutil.rmtree(tmp_path / "ckpt")


ENGINE_HOLDING_THE_LEASE = """
import sys, time
from pathlib import Path
from clawrl_app.engine.training.lease import OwnerLease
print(OwnerLease(Path(sys.argv[1])).acquire(), flush=True)
time.sleep(600)
"""


def test_a_trainer_whose_engine_dies_mid_step_drops_the_step(
    training_engine: Any, tmp_path: Path
) -> None:
    """The engine (a child process holding the owner lease) is killed while the trainer is
    inside a step (paused at a pause point, the endpoint being busy): the trainer stops
    within about a second and registers nothing, for the next engine's trainer to redo."""
    converse(training_engine.url, 1, "o")
    wait_for(lambda: len(judged_items(training_engine.engine.store)) >= 2, timeout=60)
    db = copy_store(Path(training_engine.engine.store.path), tmp_path / "copy.sqlite3")
    with Store(db) as store:
        ids = [it.sample_id for it in judged_items(store)[:2]]
        for i in ids:  # trainable again in the copy, whatever the live trainer did
            store.set_sample_state(i, "judged")
        before = len(store.list_checkpoints())
    flag = BusyFlag(tmp_path / "busy.flag", create=True)
    flag.set(True)  # the endpoint is answering: the step waits at its first pause point
    engine = subprocess.Popen(
        [sys.executable, "-c", ENGINE_HOLDING_THE_LEASE, str(tmp_path / "trainer.lease")],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert engine.stdout is not None
        token = engine.stdout.readline().strip()
        cfg = TrainerConfig(
            store_path=str(db),
            checkpoints_dir=str(tmp_path / "ckpt"),
            model_path=str(training_engine.engine.model.path),
            batch_size=2,
            resume_from="none",
            serving_flag_file=str(flag.path),
            yield_max_s=300.0,
            owner_lease=str(tmp_path / "trainer.lease"),
            owner_token=token,
            lock_file=str(tmp_path / "trainer.lock"),
            max_steps=1,
        )
        trainer = Trainer(cfg)
        out = io.StringIO()  # the trainer's stdout (its events to the supervisor)
        runner = threading.Thread(target=trainer.run, daemon=True)
        with contextlib.redirect_stdout(out):
            runner.start()
            wait_for(lambda: "step_started" in out.getvalue() or not runner.is_alive(), 120)
            time.sleep(1.0)
            assert runner.is_alive()  # inside the step, waiting for the endpoint
            engine.kill()
            t0 = time.monotonic()
            runner.join(10)
        assert not runner.is_alive() and time.monotonic() - t0 < 5
    finally:
        engine.kill()
        engine.wait(10)
        flag.close()
    assert trainer.step == 0
    with Store(db) as store:
        assert len(store.list_checkpoints()) == before
        assert {store.get_sample(i).state for i in ids} == {"judged"}  # type: ignore[union-attr]
    assert not (tmp_path / "ckpt").exists() or not any((tmp_path / "ckpt").iterdir())


def test_killed_trainer_restarts_and_resumes_without_training_a_sample_twice(
    training_engine: Any,
) -> None:
    eng = training_engine.engine
    sup = eng.trainer
    wait_for(lambda: sup.pid is not None, timeout=120)
    before = {c.version for c in eng.store.list_checkpoints()}
    old_pid = sup.pid
    converse(training_engine.url, 2, "k")  # 4 new samples: the trainer starts stepping
    os.killpg(old_pid, signal.SIGKILL)  # mid-run
    wait_for(lambda: sup.pid is not None and sup.pid != old_pid, timeout=60)
    assert sup.failures >= 1 and "exited" in (sup.last_error or "")
    new = wait_for(
        lambda: (
            [
                c
                for c in eng.store.list_checkpoints()
                if c.version not in before and {"k-0", "k-1"} & set(c.sessions)
            ]
            if len(
                {
                    s
                    for c in eng.store.list_checkpoints()
                    if c.version not in before
                    for s in c.sessions
                }
            )
            >= 2
            else None
        ),
        timeout=300,
    )
    # every consumed sample appears in exactly one checkpoint
    seen: list[int] = [s for c in eng.store.list_checkpoints() for s in c.samples]
    assert len(seen) == len(set(seen)), "a sample was trained twice"
    # the restarted trainer continued from a registered checkpoint of this run
    parents = {c.parent for c in new}
    assert parents - {None} <= {c.version for c in eng.store.list_checkpoints()}


def test_full_fine_tuning_checkpoint_is_served_by_the_torch_backend(
    training_engine: Any, loaded_model: tuple[Any, Any], tmp_path: Path
) -> None:
    """mode = full: every weight trains; the checkpoint is a whole model folder that the
    backend serves as its own version, and the server's log-probs match the trainer's canary."""
    import asyncio
    import copy

    from clawrl_app.engine.backends.base import Finished, GenerationRequest, SamplingParams
    from clawrl_app.engine.backends.pytorch.backend import TorchBackend
    from clawrl_app.engine.publishing.publisher import canary_gap

    wait_for(lambda: len(judged_items(training_engine.engine.store)) >= 2, timeout=120)
    db = copy_store(Path(training_engine.engine.store.path), tmp_path / "copy.sqlite3")
    cfg = TrainerConfig(
        store_path=str(db),
        checkpoints_dir=str(tmp_path / "ckpt"),
        model_path=str(training_engine.engine.model.path),
        batch_size=2,
        resume_from="none",
        mode="full",
        lr=1e-5,
    )
    trainer = Trainer(cfg)
    with Store(db) as store:
        items = judged_items(store)[:2]
    trainable = [p for p in trainer.model.parameters() if p.requires_grad]
    assert sum(p.numel() for p in trainable) > 100_000_000  # all ~135M weights, not an adapter
    metrics = trainer.train_step(items)
    version = trainer.save(items, metrics)
    row_path = next(c.path for c in Store(db).list_checkpoints() if c.version == version)
    assert Path(row_path).name.startswith("model_") and (Path(row_path) / "config.json").exists()
    manifest = read_manifest(Path(row_path))
    model, tok = loaded_model

    async def serve() -> tuple[Any, float]:
        be = TorchBackend(copy.deepcopy(model), tok, model_name="m", context_length=8192)
        await be.start()
        await be.load_adapter(version, Path(row_path))
        await be.activate(version)
        fin = None
        async for ev in be.generate(
            GenerationRequest("r", [1, 2, 3], SamplingParams(3, temperature=0.0))
        ):
            if isinstance(ev, Finished):
                fin = ev
        gap = 0.0
        for c in manifest.canary:
            served = await be.score(c["prompt_ids"], c["response_ids"], version)
            gap = max(gap, canary_gap(c["logprobs"], served))
        await be.activate("base")
        await be.unload_adapter(version)
        await be.stop()
        return fin, gap

    fin, gap = asyncio.run(serve())
    assert fin is not None and fin.policy_version == version
    assert gap < 1e-3


def test_topk_methods_step_on_the_teachers_recorded_top_k(
    training_engine: Any, loaded_model: tuple[Any, Any], tmp_path: Path
) -> None:
    """The judge's teacher top-k (scored by the real backend) reaches the top-k OPD loss,
    alone (topk-opd) and beside the correction's reward (combine-topk)."""
    import asyncio
    import copy

    from clawrl_app.engine.backends.pytorch.backend import TorchBackend
    from clawrl_app.engine.chat.formatter import ChatFormatter
    from clawrl_app.engine.judging.judge import teacher_topk

    converse(training_engine.url, 2, "q")  # two corrected answers: two hints
    wait_for(
        lambda: (
            sum(1 for it in judged_items(training_engine.engine.store) if it.teacher_logprobs) >= 2
        ),
        timeout=120,
    )
    db = copy_store(Path(training_engine.engine.store.path), tmp_path / "copy.sqlite3")
    model, tok = loaded_model
    with Store(db) as store:
        hinted = [
            (s, j)
            for sess in store.list_sessions(limit=100)
            for s in store.samples_for_session(sess.id)
            if (j := store.get_judgment(s.id)) is not None and (j.user_hint or j.hint)
        ]
        assert len(hinted) >= 2

        async def score_all() -> None:
            be = TorchBackend(copy.deepcopy(model), tok, model_name="m", context_length=8192)
            await be.start()
            for s, j in hinted:
                turn = store.get_turn(s.turn_id)
                top = await teacher_topk(
                    be, ChatFormatter(tok), turn, j.user_hint or j.hint, None, 4
                )
                assert (
                    top is not None
                    and len(top[0]) == len(turn.response_ids)
                    and len(top[0][0]) == 4
                )
                assert all(row == sorted(row, reverse=True) for row in top[1])
                store.set_teacher_topk(s.id, *top)
            await be.stop()

        asyncio.run(score_all())
        by_method: dict[str, list[TrainItem]] = {"topk-opd": [], "combine-topk": []}
        for s, _ in hinted:
            for method, items in by_method.items():
                got = build_item(
                    s, store.get_turn(s.turn_id), store.get_judgment(s.id), method, 0, 99
                )
                if isinstance(got, TrainItem):
                    items.append(got)
    items = by_method["topk-opd"]
    assert len(items) >= 2 and all(it.teacher_topk_ids for it in items)
    assert not any(it.has_reward for it in items)
    # combine-topk: the same top-k plus the correction's reward
    both = by_method["combine-topk"]
    assert len(both) >= 2 and all(it.teacher_topk_ids and it.has_reward for it in both)
    assert all(it.reward < 0 for it in both)
    for method, batch in (("topk-opd", items[:2]), ("combine-topk", both[:2])):
        cfg = TrainerConfig(
            store_path=str(db),
            checkpoints_dir=str(tmp_path / f"ckpt-{method}"),
            method=method,
            model_path=str(training_engine.engine.model.path),
            batch_size=2,
            resume_from="none",
        )
        trainer = Trainer(cfg)
        trainable = trainer.model.named_parameters()
        before = {n: p.detach().clone() for n, p in trainable if p.requires_grad}
        m1 = trainer.train_step(batch)
        m2 = trainer.train_step(batch)
        assert torch.isfinite(torch.tensor([m1["loss"], m2["loss"]])).all()
        if method == "topk-opd":
            assert m1["loss"] > 0  # a reverse KL is positive
        after = dict(trainer.model.named_parameters())
        assert any(not torch.equal(p, after[n].detach()) for n, p in before.items()), method


def test_everything_the_engine_wrote_is_private(training_engine: Any) -> None:
    """Store, checkpoints, trainer log, flag and state files: owner-only, whatever the umask."""
    eng = training_engine.engine
    wait_for(lambda: eng.store.list_checkpoints(), timeout=240)
    loose = []
    for root in (eng.paths.data_dir, eng.paths.log_dir, eng.paths.config_dir):
        for p in [root, *root.rglob("*")]:
            mode = p.stat().st_mode & 0o777
            if mode != (0o700 if p.is_dir() else 0o600):
                loose.append(f"{p} {oct(mode)}")
    assert (eng.paths.log_dir / "trainer.log").exists()
    assert loose == []
