"""Full fine-tuning sharded over 2 CPU ranks (FSDP2 on gloo) takes the step one process takes,
saves a checkpoint the publisher can serve, resumes from it, and holds half the state per rank.

The ranks are real processes (`torchrun --standalone`, a free port each time) running
`fsdp_worker.py` on a tiny random Llama; the single process is the same worker without
torchrun (sharding "none")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from clawrl_app.engine.training.sharding import (
    choose_sharding,
    decoder_layers,
    full_state_dict,
    load_optimizer_state,
    optimizer_state_for_save,
)
from tests.engine.training.fsdp_worker import tiny_llama

WORKER = Path(__file__).with_name("fsdp_worker.py")
REPO = Path(__file__).resolve().parents[3]
STEP_ATOL = 1e-5
"""fp32, 2 ranks vs 1 process after AdamW steps: reduction order only. Adam's first update
is lr x g / (|g| + eps), so a gradient entry near eps turns a 1e-9 difference into ~3e-6."""
GLOO = pytest.mark.skipif(
    not (torch.distributed.is_available() and torch.distributed.is_gloo_available()),
    reason="this torch build has no gloo backend",
)


# -- pure parts --------------------------------------------------------------------------------
def test_full_fine_tuning_on_several_ranks_is_sharded_and_adapters_are_replicated() -> None:
    assert choose_sharding("full", 2) == "fsdp"
    assert choose_sharding("lora", 2) == choose_sharding("qlora", 4) == "ddp"
    assert choose_sharding("full", 1) == choose_sharding("lora", 1) == "none"


def test_one_process_saves_by_name_and_loads_names_or_positions() -> None:
    """World size 1 (no process group): the optimizer state is saved keyed by parameter
    name, and both that and an older positional `optimizer.state_dict()` load back."""
    model = tiny_llama(seed=0)
    assert [type(m).__name__ for m in decoder_layers(model)] == ["LlamaDecoderLayer"] * 2
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(input_ids=torch.arange(8).view(1, 8), labels=torch.arange(8).view(1, 8)).loss.backward()
    opt.step()
    weights = full_state_dict(model)
    saved = optimizer_state_for_save(model, opt)
    assert weights is not None and weights.keys() == model.state_dict().keys()
    assert saved is not None and "lm_head.weight" in saved["state"]
    for state in (saved, opt.state_dict()):
        fresh = torch.optim.AdamW(model.parameters(), lr=1e-3)
        load_optimizer_state(model, fresh, state)
        for p in model.parameters():
            for key in ("exp_avg", "exp_avg_sq", "step"):
                torch.testing.assert_close(fresh.state[p][key], opt.state[p][key], rtol=0, atol=0)


# -- real ranks --------------------------------------------------------------------------------
def _run(*args: str, world: int) -> None:
    launch = ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world}"]
    cmd = [sys.executable, *(launch if world > 1 else []), str(WORKER), *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO),
           "TORCH_SHOW_CPP_STACKTRACES": "1"}  # fmt: skip
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{' '.join(args)} on {world}: {done.stderr[-4000:]}"


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """two/: 2 FSDP ranks, step 1, checkpoint, step 2. one/: the same in one process.
    resumed/: 2 fresh FSDP ranks from two/'s checkpoint, step 2. resumed_one/: one process
    from the same checkpoint, step 2."""
    root = tmp_path_factory.mktemp("sharding")
    for name in ("two", "one", "resumed", "resumed_one"):
        (root / name).mkdir()
    _run("train", "fsdp", str(root / "two"), world=2)
    _run("train", "none", str(root / "one"), world=1)
    _run("resume", "fsdp", str(root / "resumed"), str(root / "two"), world=2)
    _run("resume", "none", str(root / "resumed_one"), str(root / "two"), world=1)
    return root


def _load(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path)  # type: ignore[no-any-return]


@pytest.mark.slow
@GLOO
def test_two_fsdp_ranks_take_the_step_of_one_process_on_the_global_batch(runs: Path) -> None:
    """Rank 1 starts from other weights than rank 0 (only rank 0 reads a checkpoint), each
    rank trains on its half: the gathered weights equal one process's on the whole batch."""
    one, two = _load(runs / "one" / "step1.pt"), _load(runs / "two" / "step1.pt")
    diff = _max_diff(two, one)
    print(f"step 1: 2 FSDP ranks vs 1 process, max abs diff {diff:.2e}")
    assert diff <= STEP_ATOL
    assert _max_diff(one, _load(runs / "one" / "step2.pt")) > 100 * STEP_ATOL  # steps move
    assert (
        _max_diff(_load(runs / "two" / "step2.pt"), _load(runs / "one" / "step2.pt")) <= STEP_ATOL
    )


@pytest.mark.slow
@GLOO
def test_the_gathered_checkpoint_is_a_model_folder_that_loads_back_exactly(runs: Path) -> None:
    from transformers import AutoModelForCausalLM

    saved = _load(runs / "two" / "step1.pt")
    loaded = AutoModelForCausalLM.from_pretrained(str(runs / "two" / "model")).state_dict()
    assert loaded.keys() == saved.keys()
    assert all(torch.equal(loaded[k], saved[k]) for k in saved)
    optimizer = torch.load(runs / "two" / "optimizer.pt", weights_only=False)
    assert set(optimizer["state"]) == set(saved)  # full (gathered) state, keyed by name
    assert optimizer["state"]["lm_head.weight"]["exp_avg"].shape == saved["lm_head.weight"].shape


@pytest.mark.slow
@GLOO
def test_a_resumed_run_continues_as_if_never_interrupted(runs: Path) -> None:
    """Step 2 after resuming (weights from the model folder, AdamW state scattered from
    optimizer.pt) equals step 2 of the uninterrupted run, on 2 ranks and on 1."""
    uninterrupted = _load(runs / "two" / "step2.pt")
    resumed = _max_diff(_load(runs / "resumed" / "step2.pt"), uninterrupted)
    resumed_one = _max_diff(_load(runs / "resumed_one" / "step2.pt"), uninterrupted)
    print(f"step 2 resumed vs uninterrupted: 2 ranks {resumed:.2e}, 1 process {resumed_one:.2e}")
    assert resumed <= 1e-6  # the same ranks, the same reductions
    assert resumed_one <= STEP_ATOL


@pytest.mark.slow
@GLOO
def test_each_rank_holds_half_of_the_params_grads_and_optimizer_state(runs: Path) -> None:
    full = json.loads((runs / "one" / "bytes_0.json").read_text())
    ranks = [json.loads((runs / "two" / f"bytes_{r}.json").read_text()) for r in (0, 1)]
    total = sum(full.values())
    print(f"bytes per rank {[sum(r.values()) for r in ranks]} of a full copy's {total}: {full}")
    for mine in ranks:
        assert 2 * mine["params"] == full["params"] and 2 * mine["grads"] == full["grads"]
        # AdamW's `step` counters (a scalar per parameter) are not sharded: a few bytes over
        assert total / 2 <= sum(mine.values()) <= total / 2 + 1024
