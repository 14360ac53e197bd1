"""The plan's fallbacks when nothing fits as asked: a smaller trainer micro-batch (mode by
mode, before a less precise mode), and the refusal that says what to change."""

from __future__ import annotations

from pathlib import Path

import pytest

from clawrl_app.hardware import PlanError, plan
from tests.test_hardware import fake_inventory, model, settings


def test_checkpointing_off_refuses_what_only_fits_with_it() -> None:
    # 8B on 1x24: serving 21.4 leaves 2.6; without checkpointing LoRA needs 46.5 and QLoRA
    # 35.7 (29.3 of it activations), and still 24.5 / 13.7 at 1024-token micro-batches;
    # the refusal says what to change, then the numbers at the asked budget, one per line.
    env = {"CLAWRL_TRAIN__GRADIENT_CHECKPOINTING": "off"}
    with pytest.raises(PlanError, match="train.gradient_checkpointing = auto") as err:
        plan(fake_inventory(1, 24), model("8B"), settings(**env))
    assert "does NOT fit.\n   14.9 base weights (bf16, frozen)\n" in str(err.value)
    assert "\n   29.3 activations of one 4096-token micro-batch (not checkpointed)" in str(
        err.value
    )


def test_lowered_micro_batch_is_the_last_resort_and_reaches_the_trainer(tmp_path: Path) -> None:
    """32B on 8 x 24 GB fits no layout with 4096-token micro-batches and fits QLoRA with
    2048: the plan says so, and the trainer's config gets the lowered budget; a plan that
    fits as asked keeps train.token_budget (None)."""
    from clawrl_app.engine.training.supervisor import trainer_config
    from clawrl_app.hardware import lowered_budgets
    from clawrl_app.paths import app_paths

    assert lowered_budgets(4096) == [4096, 2048, 1024] and lowered_budgets(1000) == [1000]
    # a smaller micro-batch before a less precise mode: 8B on 1x48 without checkpointing
    # is LoRA at 1024 tokens (14.9 + 0.3 + 7.3 + 2 = 24.5 of 26.6), not QLoRA at 2048
    off = {"CLAWRL_TRAIN__GRADIENT_CHECKPOINTING": "off"}
    p48 = plan(fake_inventory(1, 48), model("8B"), settings(**off))
    assert (p48.train_mode, p48.token_budget) == ("lora", 1024)
    p = plan(fake_inventory(8, 24), model("32B"), settings())
    assert (p.train_mode, p.token_budget, p.gradient_checkpointing) == ("qlora", 2048, True)
    assert any("micro-batch lowered to 2048 tokens" in r for r in p.reasons)
    cfg = trainer_config(settings(), p, app_paths(tmp_path), tmp_path, None)
    assert cfg.token_budget == 2048
    fits = plan(fake_inventory(8, 80), model("8B"), settings())
    assert fits.token_budget is None
    assert (
        trainer_config(settings(), fits, app_paths(tmp_path), tmp_path, None).token_budget == 4096
    )
