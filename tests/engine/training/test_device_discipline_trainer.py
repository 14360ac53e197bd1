"""Device discipline of the training path: a real trainer step and canary under `device_guard`.

Builds a `Trainer` in-process on the real embedded model (a real SQLite store in tmp_path),
then runs construction, `train_step` (forward, objective, backward, clip, AdamW) and
`canary()` while `DeviceGuard` flags every tensor our code creates without the model's
device. On a CPU machine the default device *is* the model's device, so only the guard can
see the bug a GPU run hits (a CPU tensor meeting a `cuda:0` one).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

from clawrl_app.engine.chat.formatter import ChatFormatter
from clawrl_app.engine.training.config import TOPK_METHODS, TrainerConfig
from clawrl_app.engine.training.train_data import TrainItem
from clawrl_app.engine.training.trainer import Trainer
from tests.device_guard import device_guard

pytestmark = pytest.mark.slow
TURNS = [
    ("Name a colour.", "Blue is a calm colour.", 1.0),
    ("Say hello to the team in one short line, please.", "Hello team!", -1.0),
    ("What is two plus two?", "Two plus two is four, as you would expect.", 1.0),
]
TOP_K = 3


def make_items(tokenizer: Any, method: str) -> list[TrainItem]:
    """Three turns of different prompt and response lengths (so the batch is padded), with
    the signal `method` trains on; behaviour/teacher log-probs are plausible constants."""
    fmt = ChatFormatter(tokenizer)
    items = []
    for i, (question, answer, reward) in enumerate(TURNS):
        prompt = fmt.render([{"role": "user", "content": question}])
        resp = list(tokenizer(answer, add_special_tokens=False)["input_ids"])
        n = len(resp)
        teacher = [-0.5 - 0.1 * t for t in range(n)] if method != "rl" else None
        topk_ids = [[(7 * t + j) % 1000 for j in range(TOP_K)] for t in range(n)]
        topk_lps = [[-1.0 - j for j in range(TOP_K)] for _ in range(n)]
        items.append(
            TrainItem(
                sample_id=i,
                session_id=f"s{i}",
                prompt_ids=prompt,
                response_ids=resp,
                old_logprobs=[-1.2] * n,
                temperature=0.7 if i == 1 else 1.0,
                reward=reward,
                has_reward=method in ("rl", "combine", "combine-topk"),
                teacher_logprobs=teacher if method in ("opd", "combine") else None,
                policy_version="base",
                teacher_topk_ids=topk_ids if method in TOPK_METHODS else None,
                teacher_topk_logprobs=topk_lps if method in TOPK_METHODS else None,
            )
        )
    return items


@pytest.mark.parametrize(
    ("method", "checkpointing"),
    [
        ("rl", False),
        ("opd", False),
        ("combine", False),
        ("topk-opd", False),
        ("combine-topk", False),
        ("combine", True),
    ],
)
def test_trainer_step_and_canary_create_every_tensor_on_the_model_device(
    embedded_model: Any, tmp_path: Path, method: str, checkpointing: bool
) -> None:
    cfg = TrainerConfig(
        store_path=str(tmp_path / "store.sqlite3"),
        checkpoints_dir=str(tmp_path / "ckpt"),
        model_path=str(embedded_model.path),
        method=method,
        batch_size=len(TURNS),
        resume_from="none",
        gradient_checkpointing=checkpointing,
    )
    model_device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    with device_guard(model_device) as guard:
        trainer = Trainer(cfg)
        layers = [m for m in trainer.model.modules() if hasattr(m, "gradient_checkpointing")]
        assert layers and any(m.gradient_checkpointing for m in layers) == checkpointing
        items = make_items(trainer.tokenizer, method)
        before = {
            n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad
        }
        metrics = trainer.train_step(items)
        canary = trainer.canary()
    assert guard.violations == []
    assert math.isfinite(metrics["loss"]) and math.isfinite(metrics["optim/grad_norm"])
    assert metrics["tokens"] == sum(len(it.response_ids) for it in items)
    changed = [
        n for n, p in trainer.model.named_parameters() if n in before and not p.equal(before[n])
    ]
    assert changed, "the optimizer step changed no trainable weight"
    assert len(canary) == 2 and all(
        len(c["logprobs"]) == len(c["response_ids"]) and all(lp < 0 for lp in c["logprobs"])
        for c in canary
    )


def test_updates_per_batch_take_that_many_optimizer_updates_and_one_checkpoint_step(
    embedded_model: Any, tmp_path: Path
) -> None:
    """`train.updates_per_batch = 3`: three AdamW updates on the same batch, one trainer
    step (one checkpoint), and the metrics say so."""
    cfg = TrainerConfig(
        store_path=str(tmp_path / "store.sqlite3"),
        checkpoints_dir=str(tmp_path / "ckpt"),
        model_path=str(embedded_model.path),
        method="combine",
        batch_size=len(TURNS),
        resume_from="none",
        updates_per_batch=3,
    )
    trainer = Trainer(cfg)
    metrics = trainer.train_step(make_items(trainer.tokenizer, "combine"))
    adam_steps = {int(s["step"]) for s in trainer.optimizer.state_dict()["state"].values()}
    assert adam_steps == {3} and trainer.step == 1 and metrics["optim/updates"] == 3.0
    assert math.isfinite(metrics["loss"])
