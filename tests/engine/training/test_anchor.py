"""The anchor (`train.anchor_coef`): KL(base || policy) on the base model's own answers to
general prompts. The math directly; the anchor itself on the real embedded model with a
real PEFT adapter."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch

from clawrl_app.engine.training.anchor import (
    Anchor,
    anchor_backward,
    forward_kl,
    load_anchor_prompts,
)
from clawrl_app.general_eval import load_open_prompts


def test_forward_kl_is_zero_on_agreement_and_grows_where_mass_was_squeezed() -> None:
    base = torch.tensor([[[2.0, 1.0, 0.0], [0.0, 0.0, 0.0]]])  # (1, 2, 3)
    mask = torch.tensor([[1, 1]])
    assert float(forward_kl(base, base.clone(), mask)) == pytest.approx(0.0, abs=1e-7)
    squeezed = base.clone()
    squeezed[0, 1] = torch.tensor([8.0, 0.0, 0.0])  # the second position: one token takes it all
    kl = float(forward_kl(base, squeezed, mask))
    # by hand: position 1 alone differs; uniform p_base vs softmax([8, 0, 0])
    p = torch.softmax(squeezed[0, 1], -1)
    by_hand = float((torch.full((3,), 1 / 3) * (torch.log(torch.tensor(1 / 3)) - p.log())).sum())
    assert kl == pytest.approx(by_hand / 2, rel=1e-5)
    # masked positions do not count
    only_first = torch.tensor([[1, 0]])
    assert float(forward_kl(base, squeezed, only_first)) == pytest.approx(0.0, abs=1e-7)


def test_free_ids_leave_where_to_stop_out_of_the_kl() -> None:
    """A policy that only moved mass onto the end token (it learned to stop earlier) is held
    back by the plain KL and not by the stop-free one; moved mass between other tokens still
    counts, renormalised over them."""
    base = torch.tensor([[[2.0, 1.0, 0.0, -1.0]]])  # (1, 1, 4); token 3 ends the turn
    mask = torch.tensor([[1]])
    stops_early = base.clone()
    stops_early[0, 0, 3] = 5.0
    assert float(forward_kl(base, stops_early, mask)) > 0.5
    assert float(forward_kl(base, stops_early, mask, [3])) == pytest.approx(0.0, abs=1e-6)
    squeezed = base.clone()
    squeezed[0, 0, 0] = 9.0
    by_hand = float(forward_kl(base[..., :3], squeezed[..., :3], mask))
    assert by_hand > 0.5
    assert float(forward_kl(base, squeezed, mask, [3])) == pytest.approx(by_hand, rel=1e-5)
    # the gradient reaches the kept logits, never the freed ones
    mine = squeezed.clone().requires_grad_(True)
    forward_kl(base, mine, mask, [3]).backward()
    assert mine.grad is not None and float(mine.grad[0, 0, 3]) == 0.0
    assert float(mine.grad[0, 0, :3].abs().sum()) > 0.0


def test_the_anchor_prompts_are_none_of_the_guards() -> None:
    """The guard checks what the anchor holds on other prompts, never the same ones."""
    anchors = load_anchor_prompts()
    assert len(anchors) == len(set(anchors)) >= 24
    assert not set(anchors) & {p.prompt for p in load_open_prompts()}


@pytest.mark.slow
def test_the_anchor_is_zero_for_the_base_and_pulls_a_moved_adapter_back(
    loaded_model: tuple[Any, Any],
) -> None:
    """A fresh LoRA adapter (B = 0) is the base: KL 0. With its B matrices moved, the KL on
    the base's answers is > 0 and its backward gives the adapter gradients; a step of plain
    gradient descent on it lowers it."""
    from accelerate import Accelerator
    from peft import LoraConfig, get_peft_model

    model, tok = loaded_model
    torch.manual_seed(0)
    cfg = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])
    peft_model = get_peft_model(copy.deepcopy(model), cfg)
    acc = Accelerator(cpu=True)
    anchor = Anchor(per_step=2, max_tokens=8)
    assert anchor_backward(anchor, acc, peft_model, tok, 1.0) == pytest.approx(0.0, abs=1e-6)
    assert len(anchor.seqs) == len(load_anchor_prompts())
    assert all(0 < len(s.answer_ids) <= 8 for s in anchor.seqs)
    assert [s.prompt_ids for s in anchor.batch()] == [s.prompt_ids for s in anchor.seqs[2:4]]
    params = [p for n, p in peft_model.named_parameters() if "lora_B" in n]
    with torch.no_grad():
        for p in params:
            p.normal_(0.0, 0.05)
    peft_model.zero_grad()
    before = anchor_backward(anchor, acc, peft_model, tok, 1.0)
    assert before > 0.0 and all(p.grad is not None and p.grad.abs().sum() > 0 for p in params)
    with torch.no_grad():
        for p in params:
            p -= 2.0 * p.grad  # type: ignore[operator]
    anchor._next -= 2  # the same two sequences again
    after = anchor_backward(anchor, acc, peft_model, tok, 1.0)
    assert after < before


def test_the_trainer_config_chooses_the_anchor() -> None:
    from types import SimpleNamespace

    a = Anchor.of(SimpleNamespace(anchor_items=3, anchor_tokens=16, anchor_free_stop=True))
    assert (a.per_step, a.max_tokens, a.free_stop, a.free_ids) == (3, 16, True, [])
    assert not Anchor.of(
        SimpleNamespace(anchor_items=8, anchor_tokens=48, anchor_free_stop=False)
    ).free_stop
