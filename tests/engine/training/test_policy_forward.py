"""The trainer's forward pass (policy_forward.py) on a LoRA copy of the real embedded model.

The reference is the straightforward computation: right padding, logits at every position,
one log-softmax per row at the row's temperature. The batched left-padded forward must give
the same log-probs, entropies and top-k gathers, finite gradients, the same gradients with
gradient checkpointing, and read nothing back to the host on the way to `backward()`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
import torch
from peft import LoraConfig, get_peft_model

from clawrl_app.engine.training.advantages import rl_advantages
from clawrl_app.engine.training.losses import OBJECTIVES, LossConfig
from clawrl_app.engine.training.policy_forward import ForwardOut, response_logprobs
from clawrl_app.engine.training.train_data import TrainItem
from clawrl_app.engine.training.trainer import LORA_TARGETS, enable_checkpointing
from clawrl_app.models import load_model
from tests.host_sync_guard import HostSyncGuard

pytestmark = pytest.mark.slow
# (prompt length, response length, temperature): ragged, a 1-token response, a response
# longer than another item's whole sequence
SHAPES = [(5, 3, 1.0), (20, 9, 0.7), (12, 1, 1.3), (3, 11, 1.0)]
K = 3


def make_items(vocab: int) -> list[TrainItem]:
    g = torch.Generator().manual_seed(0)
    items = []
    for i, (p, r, temp) in enumerate(SHAPES):
        ids = torch.randint(0, vocab, (p + r,), generator=g).tolist()
        topk = torch.randint(0, vocab, (r, K), generator=g).tolist()
        items.append(
            TrainItem(
                sample_id=i,
                session_id=f"s{i}",
                prompt_ids=ids[:p],
                response_ids=ids[p:],
                old_logprobs=[-2.0 - 0.1 * t for t in range(r)],
                temperature=temp,
                reward=1.0 if i % 2 else -1.0,
                has_reward=True,
                teacher_logprobs=[-1.5] * r,
                policy_version="base",
                teacher_topk_ids=topk,
                teacher_topk_logprobs=[[-1.0, -2.0, -3.0]] * r,
            )
        )
    return items


@pytest.fixture(scope="module")
def lora_model(embedded_model: Any) -> Any:
    """A LoRA-wrapped copy of the embedded model with non-zero adapters, in train mode."""
    model, _ = load_model(embedded_model)
    cfg = LoraConfig(r=16, lora_alpha=32, target_modules=LORA_TARGETS, lora_dropout=0.0)
    model = get_peft_model(model, cfg)
    torch.manual_seed(0)
    for name, p in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.02)  # a trained-looking adapter, not the identity
    model.train()
    return model


def right_padded_reference(model: Any, items: list[TrainItem]) -> list[dict[str, torch.Tensor]]:
    """Per item: log-probs, entropy and top-k log-probs from a right-padded full-logit pass."""
    seqs = [it.prompt_ids + it.response_ids for it in items]
    width = max(len(s) for s in seqs)
    ids = torch.zeros(len(seqs), width, dtype=torch.long)
    attn = torch.zeros_like(ids)
    for b, s in enumerate(seqs):
        ids[b, : len(s)] = torch.tensor(s)
        attn[b, : len(s)] = 1
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=attn).logits
    out = []
    for b, it in enumerate(items):
        p, r = len(it.prompt_ids), len(it.response_ids)
        logp = torch.log_softmax(logits[b, p - 1 : p - 1 + r].float() / it.temperature, -1)
        unit = torch.log_softmax(logits[b, p - 1 : p - 1 + r].float(), -1)  # temperature 1
        out.append(
            {
                "logprobs": logp.gather(-1, torch.tensor(it.response_ids)[:, None])[:, 0],
                "entropy": -(logp.exp() * logp).sum(-1),
                # the teacher is scored at temperature 1: so are the student's sides
                "topk": unit.gather(-1, torch.tensor(it.teacher_topk_ids)),
                "unit": unit.gather(-1, torch.tensor(it.response_ids)[:, None])[:, 0],
            }
        )
    return out


def test_left_padding_matches_right_padding_and_projects_only_response_positions(
    lora_model: Any,
) -> None:
    items = make_items(lora_model.config.vocab_size)
    T = max(len(it.response_ids) for it in items)
    seen: list[int] = []
    head = lora_model.get_output_embeddings()
    hook = head.register_forward_hook(lambda m, args, out: seen.append(args[0].shape[1]))
    try:
        out = response_logprobs(lora_model, items, "cpu")
    finally:
        hook.remove()
    assert seen == [T], "the lm_head saw prompt positions"
    assert out.logprobs_BT.shape == out.mask_BT.shape == (len(items), T)
    assert out.topk_student_BTK is not None and out.topk_student_BTK.shape == (len(items), T, K)
    for b, (it, ref) in enumerate(
        zip(items, right_padded_reference(lora_model, items), strict=True)
    ):
        r = len(it.response_ids)
        assert out.mask_BT[b].tolist() == [0.0] * (T - r) + [1.0] * r
        got = out.logprobs_BT[b, T - r :].detach()
        assert torch.allclose(got, ref["logprobs"], atol=1e-4, rtol=0), (b, got, ref["logprobs"])
        assert torch.allclose(out.entropy_BT[b, T - r :], ref["entropy"], atol=1e-4, rtol=0)
        topk = out.topk_student_BTK[b, T - r :].detach()
        assert torch.allclose(topk, ref["topk"], atol=1e-4, rtol=0)
        assert out.student_BT is not None and not out.student_BT.requires_grad
        assert torch.allclose(out.student_BT[b, T - r :], ref["unit"], atol=1e-4, rtol=0)
        assert out.old_logprobs_BT[b, T - r :].tolist() == pytest.approx(it.old_logprobs)
        assert out.old_logprobs_BT[b, : T - r].tolist() == [0.0] * (T - r)
    assert out.entropy_BT.requires_grad is False and out.logprobs_BT.requires_grad


def step_grads(model: Any, items: list[TrainItem], method: str) -> dict[str, torch.Tensor]:
    """Gradients of one objective's loss (every tensor from `response_logprobs`)."""
    model.zero_grad(set_to_none=True)
    out = response_logprobs(model, items, "cpu")
    loss = OBJECTIVES[method](out.loss_batch(), LossConfig(), advantages(out)).loss
    loss.backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def advantages(out: ForwardOut) -> torch.Tensor:
    return rl_advantages(out.rewards_B, out.has_reward_B, "ema", 0.25)


@pytest.mark.parametrize("method", sorted(OBJECTIVES))
def test_every_objective_reaches_backward_without_a_host_read(lora_model: Any, method: str) -> None:
    items = make_items(lora_model.config.vocab_size)
    with HostSyncGuard() as guard:
        grads = step_grads(lora_model, items, method)
    assert guard.reads == []
    assert grads and all(torch.isfinite(g).all() for g in grads.values())
    assert any(g.abs().sum() > 0 for g in grads.values())


def test_gradient_checkpointing_gives_the_same_gradients(embedded_model: Any) -> None:
    """Recomputing the layers in backward changes memory, not the numbers."""
    grads = []
    for checkpointing in (False, True):
        model, _ = load_model(embedded_model)
        items = make_items(model.config.vocab_size)[:2]
        if checkpointing:
            enable_checkpointing(model, adapter=True)
        cfg = LoraConfig(r=16, lora_alpha=32, target_modules=LORA_TARGETS, lora_dropout=0.0)
        torch.manual_seed(1)  # the same lora_A init (drawn in get_peft_model) and lora_B
        model = get_peft_model(model, cfg)
        for name, p in model.named_parameters():
            if "lora_B" in name:
                torch.nn.init.normal_(p, std=0.02)
        model.train()
        grads.append(step_grads(model, items, "combine"))
    plain, recomputed = grads
    assert plain.keys() == recomputed.keys() and plain
    for name, g in plain.items():
        assert torch.allclose(g, recomputed[name], atol=1e-5, rtol=1e-4), name


def test_a_teacher_that_agrees_with_the_policy_gives_no_push_at_any_temperature(
    lora_model: Any,
) -> None:
    """An answer sampled at T = 0.2 (the embedded model's server default) and a teacher that
    is the policy itself, scored at T = 1 as every backend scores: the OPD advantages are 0.
    Taken against the behaviour log-probs (recorded at T = 0.2) they were not: a likely token
    (log-prob near 0 at T = 0.2) read as disliked by the teacher, an unlikely one as liked,
    whatever the hint said."""
    from clawrl_app.engine.training.losses import opd_token_advantages

    items = [it for it in make_items(lora_model.config.vocab_size) if len(it.response_ids) > 2]
    cold = []
    for it in items:
        at_1 = response_logprobs(lora_model, [replace(it, temperature=1.0)], "cpu")
        at_02 = response_logprobs(lora_model, [replace(it, temperature=0.2)], "cpu")
        cold.append(
            replace(
                it,
                temperature=0.2,
                old_logprobs=at_02.logprobs_BT[0].tolist(),
                teacher_logprobs=at_1.logprobs_BT[0].tolist(),
            )
        )
    out = response_logprobs(lora_model, cold, "cpu")
    batch = out.loss_batch()
    args = (batch.teacher_logprobs_BT, batch.old_logprobs_BT, batch.mask_BT, batch.has_teacher_B)
    fixed = opd_token_advantages(*args, 5.0, batch.student_logprobs_BT)
    behaviour = opd_token_advantages(*args, 5.0)
    valid = out.mask_BT.bool()
    assert fixed[valid].abs().max() < 1e-3
    assert behaviour[valid].abs().mean() > 0.3  # the mismatch this guards against


def test_combine_stop_pulls_the_end_token_where_the_teacher_would_stop(lora_model: Any) -> None:
    """`combine-stop`'s forward pass (`stop_ids`) on the real model: the teacher's top-k
    becomes one bin, log p(end). A teacher that never has an end token in its top-k gives
    no teacher term; one that would end at position 1 gives a loss whose gradient raises
    log p(end) there and nowhere else. The sampled tokens' log-probs are unchanged."""
    eos, prompt, resp = 2, [3, 4, 5], [6, 8, 9]
    no_stop = ([[10, 11]] * 3, [[0.0, -1.0]] * 3)
    stop_at_1 = ([[10, 11], [eos, 10], [10, 11]], [[-0.5, -1.0], [-0.1, -3.0], [-0.5, -1.0]])

    def item(top: tuple[Any, Any]) -> TrainItem:
        return TrainItem(0, "s", prompt, resp, [-1.0] * 3, 1.0, 0.0, False, None, "x", *top)

    plain = response_logprobs(lora_model, [item(stop_at_1)], "cpu")
    cfg = LossConfig(w_rl=0.0)
    out = response_logprobs(lora_model, [item(no_stop)], "cpu", stop_ids=(eos,))
    assert out.topk_student_BTK is not None and out.topk_student_BTK.shape == (1, 3, 1)
    res = OBJECTIVES["combine-stop"](out.loss_batch(), cfg, torch.zeros(1))
    assert res.loss.item() == pytest.approx(0.0, abs=1e-6)
    out = response_logprobs(lora_model, [item(stop_at_1)], "cpu", stop_ids=(eos,))
    assert torch.allclose(out.logprobs_BT, plain.logprobs_BT)
    assert out.topk_student_BTK is not None and out.topk_teacher_BTK is not None
    assert out.topk_teacher_BTK[0, 1, 0].item() == pytest.approx(-0.1)
    assert out.topk_student_BTK[0, 1, 0].item() < -0.1  # this model rarely ends there
    res = OBJECTIVES["combine-stop"](out.loss_batch(), cfg, torch.zeros(1))
    assert res.loss.item() > 0
    (g,) = torch.autograd.grad(res.loss, out.topk_student_BTK)
    assert g[0, 1, 0].item() < 0  # a step against the gradient raises log p(end) there
    assert abs(g[0, 0, 0].item()) < 1e-6 and abs(g[0, 2, 0].item()) < 1e-6  # no pull there
