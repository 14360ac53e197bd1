"""Repetition as a negative signal: the flags on token ids, the advantage rule, and the
objectives' gradient on a repeating token (pure functions, direct tests)."""

from __future__ import annotations

import torch

from clawrl_app.engine.training.losses import OBJECTIVES, LossBatch, LossConfig
from clawrl_app.engine.training.repeats import discourage, repeat_flags


def test_flags_mark_the_second_copy_of_a_phrase_from_its_nth_token_on() -> None:
    ids = [1, 2, 3, 4, 9, 1, 2, 3, 4, 5]
    #      the phrase 1 2 3 4 again: only its 4th token completes a repeated 4-gram
    assert repeat_flags(ids, 4) == [False] * 8 + [True, False]
    loop = [7, 8, 9] * 4  # a loop of period 3: every token from index 3 + n - 1 on repeats
    assert repeat_flags(loop, 3) == [False] * 5 + [True] * 7
    assert repeat_flags(loop, 4) == [False] * 6 + [True] * 6
    assert repeat_flags([5, 5, 5], 2) == [False, False, True]
    assert repeat_flags([1, 2, 3], 4) == [False, False, False]  # shorter than n
    assert repeat_flags(loop, 0) == [False] * 12  # off


def test_a_repeating_token_is_never_pushed_up_and_is_pushed_down_by_the_penalty() -> None:
    adv = torch.tensor([[1.5, 1.5, -1.0, 0.0], [2.0, -0.5, 0.3, 1.0]])
    rep = torch.tensor([[0.0, 1.0, 1.0, 1.0], [1.0, 1.0, 0.0, 1.0]])
    valid = torch.tensor([[True, True, True, True], [True, True, True, False]])
    got = discourage(adv, rep, valid, 0.5)
    want = torch.tensor([[1.5, -0.5, -1.5, -0.5], [-0.5, -1.0, 0.3, 1.0]])  # padding: as is
    assert torch.equal(got, want)
    assert torch.equal(discourage(adv, None, valid, 0.5), adv)  # no flags: unchanged
    no_push = torch.tensor([[1.5, 0.0, -1.0, 0.0], [0.0, -0.5, 0.3, 1.0]])
    assert torch.equal(discourage(adv, rep, valid, 0.0), no_push)  # penalty 0: only no push up


def _batch(rewards: list[float], repeat: list[list[float]] | None) -> LossBatch:
    B, T = len(rewards), len(repeat[0]) if repeat else 3
    lp = torch.full((B, T), -1.0, requires_grad=True)
    return LossBatch(
        logprobs_BT=lp,
        old_logprobs_BT=torch.full((B, T), -1.0),
        mask_BT=torch.ones(B, T),
        rewards_B=torch.tensor(rewards),
        has_reward_B=torch.ones(B, dtype=torch.bool),
        teacher_logprobs_BT=torch.full((B, T), -0.5),  # the teacher likes every token more
        has_teacher_B=torch.ones(B, dtype=torch.bool),
        repeat_BT=None if repeat is None else torch.tensor(repeat),
    )


def test_every_objective_pushes_a_repeating_token_of_a_liked_answer_down() -> None:
    """A liked answer (advantage > 0 on every token, teacher agreeing): with the flags, its
    repeating token's log-prob gets a gradient that lowers it, the others one that raises
    it; without them, all are raised (what reinforced loops)."""
    cfg = LossConfig(repeat_penalty=0.5)
    adv_B = torch.tensor([1.0])
    for method in ("rl", "opd", "combine"):
        batch = _batch([1.0], [[0.0, 1.0, 0.0]])
        OBJECTIVES[method](batch, cfg, adv_B).loss.backward()
        grad = batch.logprobs_BT.grad
        assert grad is not None
        assert grad[0, 0] < 0 and grad[0, 2] < 0, method  # raised (descent: -grad > 0)
        assert grad[0, 1] > 0, method  # lowered
        plain = _batch([1.0], None)
        OBJECTIVES[method](plain, cfg, adv_B).loss.backward()
        assert plain.logprobs_BT.grad is not None and bool((plain.logprobs_BT.grad < 0).all())
