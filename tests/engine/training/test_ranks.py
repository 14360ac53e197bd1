"""The trainer with two ranks on the CPU (gloo): rank 0 alone owns the store, the disk and
the events; the global batch is split, not repeated; a dying rank takes the trainer down.

The ranks are real processes started by `rank_launch` (the supervisor's launch path for
several trainer GPUs), on a tiny random Llama (`rank_fixtures.py`)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil
import pytest
import torch

from clawrl_app.engine.store import Store
from clawrl_app.engine.training.config import TrainerConfig
from clawrl_app.engine.training.rank_launch import RankGroup, exit_code, rank_env
from clawrl_app.engine.training.ranks import Ranks, end_rank, loss_scale, rank_share
from clawrl_app.engine.training.supervisor import TrainerSupervisor, launch_command
from tests.engine.training.rank_fixtures import judged_store, tiny_llama

WORKER = Path(__file__).with_name("rank_worker.py")


# -- pure parts ------------------------------------------------------------------------------
def test_rank_share_splits_the_batch_once_and_evenly() -> None:
    items = list(range(7))
    parts = [rank_share(items, r, 3) for r in range(3)]
    assert sorted(x for p in parts for x in p) == items
    assert [len(p) for p in parts] == [3, 2, 2]
    assert rank_share(items, 0, 1) == items


def test_loss_scale_makes_the_averaged_gradient_the_global_mean() -> None:
    # 2 ranks x micro-batches of 1 and 2 out of a global batch of 6: after DDP's average
    # (sum / 2) the weights are 1/6 and 2/6, as one process's share weights would be.
    assert loss_scale(1, 6, 2) / 2 == pytest.approx(1 / 6)
    assert loss_scale(2, 6, 2) / 2 == pytest.approx(2 / 6)
    assert loss_scale(4, 4, 1) == 1.0
    with pytest.raises(ValueError):
        loss_scale(1, 0, 2)


def test_ranks_from_env_and_the_launch_environment() -> None:
    assert Ranks.from_env({}) == Ranks(0, 1, 0)
    env = rank_env({"X": "1"}, 1, 2, 29511)
    assert Ranks.from_env(env) == Ranks(1, 2, 1) and not Ranks.from_env(env).main
    assert (env["MASTER_ADDR"], env["MASTER_PORT"], env["X"]) == ("127.0.0.1", "29511", "1")
    with pytest.raises(SystemExit, match="bad rank"):
        Ranks.from_env({"RANK": "2", "WORLD_SIZE": "2"})
    assert exit_code(-9) == 137 and exit_code(3) == 3


def test_one_process_ends_with_its_code_and_goes_on() -> None:
    """Without a process group `end_rank` only returns the code (the caller exits normally);
    with one, it exits at once: the 2-rank tests below end through it (exit code 0 checked)."""
    assert not torch.distributed.is_initialized()
    assert end_rank(0) == 0 and end_rank(3) == 3


def test_several_trainer_gpus_launch_ranks_in_one_process_group(tmp_path: Path) -> None:
    cmd = launch_command(tmp_path / "c.json", (2, 3))
    assert cmd[1:5] == ["-m", "clawrl_app.engine.training.rank_launch", "--nproc", "2"]
    assert cmd[-2:] == ["--config", str(tmp_path / "c.json")]
    assert "--multi_gpu" not in cmd  # accelerate's launcher would put ranks in new sessions
    assert launch_command(tmp_path / "c.json", (), ranks=2)[4] == "2"


def test_the_plans_sharding_is_checked_against_the_mode_and_ranks() -> None:
    from clawrl_app.engine.training.sharding import resolve_sharding

    assert [resolve_sharding("auto", m, w) for m, w in [("lora", 1), ("lora", 2), ("full", 2)]] == [
        "none", "ddp", "fsdp",
    ]  # fmt: skip
    assert resolve_sharding("fsdp", "full", 1) == "fsdp"  # one GPU runs FSDP's save/resume
    for asked, mode, world in [("fsdp", "lora", 2), ("none", "full", 2), ("zero3", "full", 2)]:
        with pytest.raises(SystemExit):
            resolve_sharding(asked, mode, world)


# -- real ranks ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny(embedded_model: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_llama(tmp_path_factory.mktemp("tiny") / "model", embedded_model.path)


def _config(tmp: Path, model: Path, **kw: Any) -> TrainerConfig:
    return TrainerConfig(
        store_path=str(tmp / "store.sqlite3"),
        checkpoints_dir=str(tmp / "checkpoints"),
        model_path=str(model),
        resume_from="none",
        poll_s=0.2,
        **kw,
    )


def _one_step(tmp: Path, model: Path, world: int, **kw: Any) -> dict[str, Any]:
    tmp.mkdir()
    judged_store(tmp / "store.sqlite3", 4)
    # a budget of about one item per micro-batch: each rank accumulates over two, the
    # single process over four (gradients synchronised on the last one only)
    cfg = _config(tmp, model, batch_size=4, token_budget=24, lock_file=str(tmp / "lock"), **kw)
    (tmp / "c.json").write_text(json.dumps(cfg.__dict__))
    cmd = [sys.executable, str(WORKER), str(tmp / "c.json"), str(tmp / "out.pt")]
    assert RankGroup(cmd, world).wait() == 0
    return torch.load(tmp / "out.pt")  # type: ignore[no-any-return]


@pytest.mark.slow
def test_two_ranks_take_the_same_step_as_one_process_on_the_global_batch(
    tiny: Path, tmp_path: Path
) -> None:
    """Loss, LoRA gradients and updated weights of 2 ranks (each on half of the batch)
    equal one process's on the whole batch: float32, to 1e-6 (summation order only)."""
    one, two = _one_step(tmp_path / "one", tiny, 1), _one_step(tmp_path / "two", tiny, 2)
    assert (one["processes"], two["processes"]) == (1, 2)
    assert "MULTI_CPU" in two["distributed"]
    assert one["samples"] == two["samples"]  # rank 0 chose one batch for both
    # split, not repeated: each rank ran forward/backward on its own half, once
    assert one["forwarded"] == [one["samples"]]
    assert sorted(two["forwarded"][0] + two["forwarded"][1]) == sorted(two["samples"])
    assert [len(f) for f in two["forwarded"]] == [2, 2]
    for key in ("loss", "pg_loss", "optim/grad_norm", "adv/mean", "tokens", "samples/rl"):
        assert two["metrics"][key] == pytest.approx(one["metrics"][key], rel=1e-5, abs=1e-7), key
    assert set(one["grads"]) == set(two["grads"]) and all("lora_" in n for n in one["grads"])
    assert any(g.abs().max() > 0 for g in one["grads"].values())
    for name, g in one["grads"].items():
        torch.testing.assert_close(two["grads"][name], g, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(two["weights"][name], one["weights"][name], rtol=0, atol=1e-6)


@pytest.mark.slow
def test_two_ranks_hold_the_anchor_like_one_process(tiny: Path, tmp_path: Path) -> None:
    """With the anchor on (`anchor_coef`, large here so that its gradient dominates the clipped norm), two
    updates on the batch (the second from a moved adapter, where the anchor's KL and
    gradient are no longer 0): every rank builds the same anchor and adds its gradient
    once, so 2 ranks' KL, gradients and weights equal one process's (a rank adding it
    twice, or the ranks' average halving it, would move the gradient by its own size; the
    summation order moves a few elements, which Adam's second update amplifies)."""
    anchor = {"anchor_coef": 1e4, "anchor_items": 2, "anchor_tokens": 4,
              "updates_per_batch": 2, "lr": 0.01, "signal_norm": 0.0}  # fmt: skip
    one = _one_step(tmp_path / "one", tiny, 1, **anchor)
    two = _one_step(tmp_path / "two", tiny, 2, **anchor)
    kl = one["metrics"]["loss/anchor_kl"]
    assert kl > 1e-5 and two["metrics"]["loss/anchor_kl"] == pytest.approx(kl, rel=1e-3)
    for key in ("grads", "weights"):
        a = torch.cat([t.flatten() for _, t in sorted(one[key].items())])
        b = torch.cat([t.flatten() for _, t in sorted(two[key].items())])
        assert float((b - a).norm()) <= 1e-3 * float(a.norm()), key


def _finished(sup: TrainerSupervisor) -> bool:
    """The trainer ran to max_steps and exited 0 (the state starts idle too)."""
    return sup.state == "idle" and sup.last_checkpoint is not None


async def _run_supervised(sup: TrainerSupervisor, done: Any, timeout: float) -> None:
    await sup.start()
    deadline = time.monotonic() + timeout
    try:
        while not done() and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
    finally:
        await sup.stop(grace_s=10)


def _checkpoint_events(log: Path) -> list[dict[str, Any]]:
    lines = [ln for ln in log.read_text().splitlines() if ln.startswith('{"event": "checkpoint"')]
    return [json.loads(ln) for ln in lines]


@pytest.mark.slow
def test_supervised_two_rank_trainer_registers_each_step_once(tiny: Path, tmp_path: Path) -> None:
    """The supervisor's real launch path with 2 ranks and the trainer lock (2 ranks on one
    lock used to wait for each other forever): 2 steps, one checkpoint each, registered
    once, every sample trained once, one event per step."""
    ids = judged_store(tmp_path / "store.sqlite3", 4)
    run = tmp_path / "run"
    run.mkdir()
    sup = TrainerSupervisor(_config(tmp_path, tiny, batch_size=2, max_steps=2), run, ranks=2)
    asyncio.run(_run_supervised(sup, lambda: _finished(sup), timeout=240))
    assert sup.state == "stopped" and sup.failures == 0, (run / "trainer.log").read_text()[-3000:]
    with Store(tmp_path / "store.sqlite3") as store:
        ckpts = store.list_checkpoints()
        assert sorted(c.step for c in ckpts) == [1, 2]
        assert sorted(s for c in ckpts for s in c.samples) == sorted(ids)
        assert {store.get_sample(i).state for i in ids} == {"trained"}  # type: ignore[union-attr]
    folders = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert len(folders) == 2, folders  # no second folder for the same step from rank 1
    events = _checkpoint_events(run / "trainer.log")
    assert [e["step"] for e in events] == [1, 2]


def _ranks_of(launcher_pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(launcher_pid).children()
    except psutil.NoSuchProcess:
        return []


@pytest.mark.slow
def test_a_rank_killed_mid_run_takes_the_trainer_down_and_nothing_is_trained_twice(
    tiny: Path, tmp_path: Path
) -> None:
    """kill -9 of rank 1 after the first checkpoint: the other rank and the launcher go
    too (no orphan rank), the supervisor restarts the trainer with backoff, and in the end
    every sample is trained exactly once with no half-registered checkpoint."""
    ids = judged_store(tmp_path / "store.sqlite3", 8)
    run = tmp_path / "run"
    run.mkdir()
    sup = TrainerSupervisor(_config(tmp_path, tiny, batch_size=2), run, ranks=2)
    seen: dict[str, Any] = {}

    def trained_all() -> bool:
        with Store(tmp_path / "store.sqlite3") as store:
            done = {store.get_sample(i).state for i in ids} == {"trained"}  # type: ignore[union-attr]
        return done and "restarted" in seen

    async def scenario() -> None:
        await sup.start()
        try:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                if "killed" not in seen and sup.last_checkpoint is not None and sup.pid:
                    ranks = _ranks_of(sup.pid)
                    if len(ranks) == 2:
                        seen["killed"], seen["ranks"] = sup.pid, ranks
                        victim = next(p for p in ranks if p.environ().get("RANK") == "1")
                        os.kill(victim.pid, signal.SIGKILL)
                if "killed" in seen and sup.pid not in (None, seen["killed"]):
                    seen["restarted"] = sup.pid
                    seen["orphans"] = [p.pid for p in seen["ranks"] if p.is_running()]
                if trained_all():
                    break
                await asyncio.sleep(0.1)
        finally:
            await sup.stop(grace_s=10)

    asyncio.run(scenario())
    log = (run / "trainer.log").read_text()
    assert "restarted" in seen, log[-3000:]
    assert sup.failures >= 1 or "exited with code" in (sup.last_error or "")
    assert seen["orphans"] == [], "a rank outlived its launcher"
    with Store(tmp_path / "store.sqlite3") as store:
        ckpts = store.list_checkpoints()
        trained = [s for c in ckpts for s in c.samples]
        assert sorted(trained) == sorted(ids), "a sample was trained twice or not at all"
        assert all(Path(c.path).exists() for c in ckpts)
    registered = {Path(c.path).name for c in ckpts}
    assert {p.name for p in (tmp_path / "checkpoints").iterdir()} <= registered | {".tmp"}
    assert all(not p.is_running() for p in seen["ranks"])


@pytest.mark.slow
def test_full_fine_tuning_on_two_ranks_is_sharded_saved_whole_and_resumed(
    tiny: Path, tmp_path: Path
) -> None:
    """mode = full on 2 ranks: FSDP; the checkpoint is one whole model folder (rank 0's
    gathered weights, loadable as is) with a name-keyed optimizer state; a second run
    resumes from it and registers the next step on top."""
    from transformers import AutoModelForCausalLM

    ids = judged_store(tmp_path / "store.sqlite3", 4)
    for steps in (1, 2):
        run = tmp_path / f"run{steps}"
        run.mkdir()
        cfg = _config(tmp_path, tiny, batch_size=2, max_steps=steps, mode="full")
        sup = TrainerSupervisor(replace(cfg, resume_from="latest"), run, ranks=2)
        asyncio.run(_run_supervised(sup, lambda s=sup: _finished(s), timeout=240))
        assert sup.failures == 0, (run / "trainer.log").read_text()[-3000:]
        assert "sharding fsdp" in (run / "trainer.log").read_text()
    with Store(tmp_path / "store.sqlite3") as store:
        v1, v2 = sorted(store.list_checkpoints(), key=lambda c: c.step)
        assert (v1.step, v2.step, v2.parent) == (1, 2, v1.version)
        assert sorted(v1.samples + v2.samples) == sorted(ids)
    model = AutoModelForCausalLM.from_pretrained(v2.path, local_files_only=True)
    base = AutoModelForCausalLM.from_pretrained(str(tiny), local_files_only=True)
    moved = [n for n, p in model.state_dict().items() if not torch.equal(p, base.state_dict()[n])]
    assert moved, "the saved full model equals the base: no step reached it"
    opt = torch.load(Path(v2.path) / "optimizer.pt", weights_only=False)
    assert opt["state"] and all(isinstance(k, str) for k in opt["state"])  # names, not positions
