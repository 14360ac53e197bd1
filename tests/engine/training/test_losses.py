"""Loss functions (clawrl_app.engine.training.losses): tiny tensors, expected numbers derived by hand.

Conventions in the comments: ρ = exp(logπθ − logπold), "on-policy" means ρ = 1, and a
sample's loss is the mean of its token losses; the batch loss is the mean over the samples
that take part. Tensors are float64 so hand-derived numbers match to 1e-9.
"""

from __future__ import annotations

import math
from typing import Any, get_args

import pytest
import torch
from torch import Tensor

from clawrl_app.config import TrainSettings
from clawrl_app.engine.training.advantages import rl_advantages
from clawrl_app.engine.training.losses import (
    OBJECTIVES,
    STAT_KEYS,
    LossBatch,
    LossConfig,
    LossResult,
    Method,
    combine_loss,
    kl_k3,
    needs_reward,
    needs_teacher,
    opd_loss,
    opd_token_advantages,
    ppo_clip_loss,
    rl_loss,
    tis_weights,
)

LN2 = math.log(2.0)
CFG = LossConfig()


def t(values: Any, grad: bool = False) -> Tensor:
    """A float64 tensor, optionally a leaf that requires grad."""
    return torch.tensor(values, dtype=torch.float64, requires_grad=grad)


def b(values: Any) -> Tensor:
    """A bool tensor."""
    return torch.tensor(values, dtype=torch.bool)


def make_batch(
    logprobs: Any,
    old: Any = None,
    mask: Any = None,
    rewards: Any = None,
    has_reward: Any = None,
    teacher: Any = None,
    has_teacher: Any = None,
    **optional: Tensor,
) -> LossBatch:
    """A batch whose float inputs all require grad (to prove only logprobs_BT gets one)."""
    lp = t(logprobs, grad=True)
    n_b, n_t = lp.shape
    return LossBatch(
        logprobs_BT=lp,
        old_logprobs_BT=t(logprobs if old is None else old, grad=True),
        mask_BT=t([[1.0] * n_t] * n_b if mask is None else mask),
        rewards_B=t([0.0] * n_b if rewards is None else rewards, grad=True),
        has_reward_B=b([False] * n_b if has_reward is None else has_reward),
        teacher_logprobs_BT=t([[0.0] * n_t] * n_b if teacher is None else teacher, grad=True),
        has_teacher_B=b([False] * n_b if has_teacher is None else has_teacher),
        **optional,
    )


def grad(x: Tensor) -> Tensor:
    """`x.grad`, asserting it exists."""
    assert x.grad is not None
    return x.grad


def backward(result: LossResult) -> None:
    """Backpropagate and check the loss is a finite differentiable scalar."""
    assert result.loss.shape == ()
    assert torch.isfinite(result.loss)
    assert result.loss.requires_grad
    result.loss.backward()


def assert_only_logprobs_grad(batch: LossBatch) -> None:
    """Behaviour, teacher, reference log-probs and rewards are constants of the loss."""
    assert batch.logprobs_BT.grad is not None
    assert torch.isfinite(batch.logprobs_BT.grad).all()
    for const in (batch.old_logprobs_BT, batch.teacher_logprobs_BT, batch.rewards_B):
        assert const.grad is None
    if batch.ref_logprobs_BT is not None:
        assert batch.ref_logprobs_BT.grad is None


# --- ppo_clip_loss --------------------------------------------------------------------------
def test_ppo_on_policy_is_minus_mean_advantage_per_sample_then_batch() -> None:
    lp = t([[-1.0, -2.0, -0.5], [-1.0, -1.0, 0.0]], grad=True)
    adv = t([[1.0, 2.0, 3.0], [-1.0, -1.0, 0.0]])
    mask = t([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    res = ppo_clip_loss(lp, lp.detach(), adv, mask, 0.2, 0.28)
    # sample 0: -(1+2+3)/3 = -2; sample 1: -(-1-1)/2 = +1; batch: (-2 + 1)/2 = -0.5
    assert res.loss.item() == pytest.approx(-0.5)
    # tokens 1,2,3,-1,-1: mean 0.8; squared deviations .04+1.44+4.84+3.24+3.24 = 12.8, /5 = 2.56
    assert res.stats["adv_mean"] == pytest.approx(0.8)
    assert res.stats["adv_std"] == pytest.approx(1.6)
    assert res.stats["ratio_mean"] == pytest.approx(1.0)
    assert res.stats["clip_frac"] == 0.0
    assert (res.stats["tokens"], res.stats["samples"]) == (5.0, 2.0)
    assert set(res.stats) == set(STAT_KEYS)
    assert all(type(v) is float for v in res.stats.values())
    backward(res)
    # d/dlogp of -ρA at ρ=1 is -A, scaled by 1/(tokens in sample · samples):
    # sample 0: -A/(3·2) = -1/6, -2/6, -3/6; sample 1: +1/(2·2) = 0.25 twice; padding 0.
    expected = t([[-1 / 6, -2 / 6, -3 / 6], [0.25, 0.25, 0.0]])
    assert torch.allclose(grad(lp), expected)


def test_ppo_ratio_above_one_plus_eps_high_with_positive_advantage_is_clipped() -> None:
    old = t([[-1.0, -1.0]])
    lp = (old + t([[math.log(1.5), math.log(1.1)]])).detach().requires_grad_()
    res = ppo_clip_loss(lp, old, t([[1.0, 1.0]]), t([[1.0, 1.0]]), 0.2, 0.28)
    # token 0: max(-1.5, -1.28) = -1.28 (clipped); token 1: -1.1 (inside). (-1.28-1.1)/2 = -1.19
    assert res.loss.item() == pytest.approx(-1.19)
    assert res.stats["clip_frac"] == pytest.approx(0.5)
    assert res.stats["ratio_mean"] == pytest.approx(1.3)  # (1.5 + 1.1)/2
    backward(res)
    # clipped token: zero gradient; token 1: d(-ρ·1)/dlogp = -ρ = -1.1, /2 tokens = -0.55
    assert lp.grad is not None
    assert lp.grad[0, 0].item() == 0.0
    assert lp.grad[0, 1].item() == pytest.approx(-0.55)


def test_ppo_ratio_below_one_minus_eps_low_with_negative_advantage_is_clipped() -> None:
    old = t([[-1.0, -1.0]])
    lp = (old + t([[math.log(0.5), math.log(0.9)]])).detach().requires_grad_()
    res = ppo_clip_loss(lp, old, t([[-1.0, -1.0]]), t([[1.0, 1.0]]), 0.2, 0.28)
    # token 0: max(0.5, 0.8) = 0.8 (clipped); token 1: max(0.9, 0.9) = 0.9. (0.8+0.9)/2 = 0.85
    assert res.loss.item() == pytest.approx(0.85)
    assert res.stats["clip_frac"] == pytest.approx(0.5)
    backward(res)
    # token 1: d(-ρ·(-1))/dlogp = ρ = 0.9, /2 = 0.45
    assert lp.grad is not None
    assert lp.grad[0, 0].item() == 0.0
    assert lp.grad[0, 1].item() == pytest.approx(0.45)


def test_ppo_pessimistic_side_is_never_clipped() -> None:
    old = t([[-1.0, -1.0]])
    lp = (old + t([[math.log(1.5), math.log(0.5)]])).detach().requires_grad_()
    # ρ=1.5, A=-1: max(1.5, 1.28) = 1.5; ρ=0.5, A=+1: max(-0.5, -0.8) = -0.5. mean 0.5
    res = ppo_clip_loss(lp, old, t([[-1.0, 1.0]]), t([[1.0, 1.0]]), 0.2, 0.28)
    assert res.loss.item() == pytest.approx(0.5)
    assert res.stats["clip_frac"] == 0.0
    backward(res)
    # gradients -Aρ/2: 1.5/2 = 0.75 and -0.5/2 = -0.25
    assert torch.allclose(grad(lp), t([[0.75, -0.25]]))


def test_ppo_all_masked_sample_contributes_nothing_even_with_garbage_padding() -> None:
    lp = t([[-1.0, -1.0], [float("-inf"), float("nan")]], grad=True)
    old = t([[-1.0, -1.0], [float("nan"), 50.0]])
    adv = t([[2.0, 2.0], [float("nan"), 9.0]])
    res = ppo_clip_loss(lp, old, adv, t([[1.0, 1.0], [0.0, 0.0]]), 0.2, 0.28)
    # only sample 0: -(2+2)/2 = -2 (not diluted to -1 by the empty sample)
    assert res.loss.item() == pytest.approx(-2.0)
    assert (res.stats["samples"], res.stats["tokens"]) == (1.0, 2.0)
    backward(res)
    assert lp.grad is not None
    assert torch.equal(lp.grad[1], t([0.0, 0.0]))
    assert torch.allclose(lp.grad[0], t([-1.0, -1.0]))  # -A/(2 tokens · 1 sample)


def test_ppo_with_no_valid_token_is_zero_and_still_differentiable() -> None:
    lp = t([[-1.0, -2.0]], grad=True)
    res = ppo_clip_loss(lp, lp.detach(), t([[1.0, 1.0]]), t([[0.0, 0.0]]), 0.2, 0.28)
    assert res.loss.item() == 0.0
    assert all(v == 0.0 for k, v in res.stats.items())
    backward(res)
    assert torch.equal(grad(lp), t([[0.0, 0.0]]))


def test_ppo_low_precision_inputs_are_upcast() -> None:
    lp = torch.tensor([[-1.0, -2.0]], dtype=torch.bfloat16, requires_grad=True)
    adv = torch.tensor([[1.0, 3.0]], dtype=torch.bfloat16)
    res = ppo_clip_loss(lp, lp.detach(), adv, torch.ones(1, 2), 0.2, 0.28)
    assert res.loss.dtype == torch.float32
    assert res.loss.item() == pytest.approx(-2.0)  # -(1+3)/2
    backward(res)
    assert lp.grad is not None and lp.grad.dtype == torch.bfloat16


def test_opd_token_advantages_clip_and_zero_where_absent() -> None:
    teacher = t([[-0.5, -10.0, 0.0, -1.0], [-0.1, -0.1, -0.1, -0.1]])
    old = t([[-1.0, -1.0, -8.0, float("-inf")], [-3.0, -3.0, -3.0, -3.0]])
    mask = t([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    adv = opd_token_advantages(teacher, old, mask, b([True, False]), clip=5.0)
    # gaps: 0.5, -9 → -5, 8 → 5, padding → 0; sample 1 has no teacher → all 0
    assert torch.equal(adv, t([[0.5, -5.0, 5.0, 0.0], [0.0, 0.0, 0.0, 0.0]]))
    assert torch.equal(
        opd_token_advantages(teacher, old, mask, b([True, True]), 1.0)[1], t([1.0] * 4)
    )


def test_opd_center_subtracts_the_batch_mean_gap_on_teacher_tokens_only() -> None:
    teacher = t([[-0.5, -10.0, 0.0, -1.0], [-0.1, -0.1, -0.1, -0.1]])
    old = t([[-1.0, -1.0, -8.0, float("-inf")], [-3.0, -3.0, -3.0, -3.0]])
    mask = t([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    adv = opd_token_advantages(teacher, old, mask, b([True, False]), 5.0, center=True)
    # clamped gaps 0.5, -5, 5 (mean 1/6) on sample 0's three tokens; padding and the
    # teacher-less sample stay exactly 0
    expected = t([[0.5 - 1 / 6, -5.0 - 1 / 6, 5.0 - 1 / 6, 0.0], [0.0] * 4])
    assert torch.allclose(adv, expected)
    assert torch.where(mask > 0, adv, 0.0)[0].sum().item() == pytest.approx(0.0, abs=1e-6)
    # a uniformly negative gap (the teacher "dislikes every token") no longer pushes at all
    flat = opd_token_advantages(
        t([[-2.0, -2.0]]), t([[-1.0, -1.0]]), t([[1.0, 1.0]]), b([True]), 5.0, center=True
    )
    assert torch.equal(flat, t([[0.0, 0.0]]))


# --- objectives -----------------------------------------------------------------------------
def test_rl_loss_means_over_signal_samples_only() -> None:
    batch = make_batch(
        [[-1.0, -1.0], [-2.0, -2.0], [-1.0, 0.0]],
        mask=[[1.0, 1.0], [1.0, 1.0], [1.0, 0.0]],
        rewards=[1.0, 0.0, -1.0],
        has_reward=[True, False, True],
    )
    adv = rl_advantages(batch.rewards_B, batch.has_reward_B, "ema", 0.5)  # [0.5, 0, -1.5]
    res = rl_loss(batch, CFG, adv)
    # sample 0: -0.5; sample 2: +1.5; sample 1 excluded → (−0.5 + 1.5)/2 = 0.5 (not 1/3)
    assert res.loss.item() == pytest.approx(0.5)
    assert (res.stats["samples"], res.stats["tokens"]) == (2.0, 3.0)
    backward(res)
    assert_only_logprobs_grad(batch)
    # sample 0 tokens: -0.5/(2·2) = -0.125; sample 1: 0; sample 2: +1.5/(1·2) = 0.75
    expected = t([[-0.125, -0.125], [0.0, 0.0], [0.75, 0.0]])
    assert torch.allclose(grad(batch.logprobs_BT), expected)


def test_rl_loss_with_no_signal_is_zero_and_differentiable() -> None:
    batch = make_batch([[-1.0, -2.0]], rewards=[0.0], has_reward=[False])
    res = rl_loss(batch, CFG, t([3.0]))  # a stray advantage must not leak in
    assert res.loss.item() == 0.0
    backward(res)
    assert torch.equal(grad(batch.logprobs_BT), t([[0.0, 0.0]]))


def test_rl_uses_eps_high_and_opd_uses_symmetric_eps() -> None:
    # ρ = 1.25 with A = +1: inside RL's [0.8, 1.28], outside OPD's [0.8, 1.2]
    old = [[-1.0]]
    lp = [[-1.0 + math.log(1.25)]]
    rl = rl_loss(make_batch(lp, old=old, rewards=[1.0], has_reward=[True]), CFG, t([1.0]))
    assert rl.loss.item() == pytest.approx(-1.25)
    assert rl.stats["clip_frac"] == 0.0
    batch = make_batch(lp, old=old, teacher=[[0.0]], has_teacher=[True])  # A = 0 - (-1) = 1
    opd = opd_loss(batch, CFG)
    assert opd.loss.item() == pytest.approx(-1.2)
    assert opd.stats["clip_frac"] == 1.0
    backward(opd)
    assert batch.logprobs_BT.grad is not None and batch.logprobs_BT.grad.item() == 0.0


def test_opd_loss_clipped_teacher_gap_over_teacher_samples() -> None:
    batch = make_batch(
        [[-1.0, -1.0], [-1.0, -1.0], [-1.0, -1.0]],
        mask=[[1.0, 1.0], [1.0, 1.0], [1.0, 0.0]],
        teacher=[[-0.5, -2.0], [-0.2, -0.2], [-9.0, 0.0]],
        has_teacher=[True, False, True],
    )
    res = opd_loss(batch, CFG)
    # sample 0: A = [0.5, -1] → -(-0.5)/2 = 0.25; sample 2: A = clip(-8) = -5 → 5
    # sample 1 (no teacher) excluded: (0.25 + 5)/2 = 2.625
    assert res.loss.item() == pytest.approx(2.625)
    assert res.stats["samples"] == 2.0
    assert res.stats["adv_mean"] == pytest.approx(-5.5 / 3)  # tokens 0.5, -1, -5
    backward(res)
    assert_only_logprobs_grad(batch)


def _four_kinds() -> LossBatch:
    """Samples: both signals, teacher only, reward only, neither (on-policy, old = -1)."""
    return make_batch(
        [[-1.0, -1.0], [-1.0, -1.0], [-1.0, -1.0], [-1.0, -1.0]],
        mask=[[1.0, 1.0], [1.0, 0.0], [1.0, 1.0], [1.0, 1.0]],
        rewards=[1.0, 0.0, -1.0, 0.0],
        has_reward=[True, False, True, False],
        # sample 2's zeros would give a gap of +1 if the teacher term were not masked
        teacher=[[0.0, -2.0], [1.0, 0.0], [0.0, 0.0], [0.0, 0.0]],
        has_teacher=[True, True, False, False],
    )


def test_combine_adds_both_terms_and_drops_samples_without_signal() -> None:
    batch = _four_kinds()
    adv = t([0.5, 7.0, -1.5, 7.0])  # stray 7s on no-signal samples must be ignored
    res = combine_loss(batch, CFG, adv)
    # both: A = [1, -1] + 0.5 = [1.5, -0.5] → -0.5; teacher only: A = [2] → -2
    # reward only: A = [-1.5, -1.5] → 1.5; neither: excluded. (-0.5 - 2 + 1.5)/3 = -1/3
    assert res.loss.item() == pytest.approx(-1 / 3)
    assert (res.stats["samples"], res.stats["tokens"]) == (3.0, 5.0)
    backward(res)
    assert_only_logprobs_grad(batch)
    weighted = combine_loss(_four_kinds(), LossConfig(w_opd=2.0, w_rl=0.5), adv)
    # both: 2·[1, -1] + 0.25 = [2.25, -1.75] → -0.25; teacher: 2·2 → -4; reward: -0.75 → 0.75
    assert weighted.loss.item() == pytest.approx((-0.25 - 4.0 + 0.75) / 3)


def test_combine_single_signal_cases_match_rl_and_opd() -> None:
    # reward only, off-policy ratios 1.5 / 0.5 (clipping active): identical to rl_loss
    lp, old = [[-1.0 + math.log(1.5), -1.0 + math.log(0.5)]], [[-1.0, -1.0]]
    kw: dict[str, Any] = {"old": old, "rewards": [1.0], "has_reward": [True]}
    adv = t([0.7])
    combined = combine_loss(make_batch(lp, teacher=[[3.0, 3.0]], **kw), CFG, adv)
    plain = rl_loss(make_batch(lp, **kw), CFG, adv)
    assert combined.loss.item() == pytest.approx(plain.loss.item())
    assert combined.stats == plain.stats
    # teacher only, ratios inside [0.8, 1.2] (where both clip ranges agree): equals opd_loss
    lp = [[-1.0 + math.log(1.1), -1.0 + math.log(0.9)]]
    kw = {"old": old, "teacher": [[-0.5, -3.0]], "has_teacher": [True], "rewards": [1.0]}
    combined = combine_loss(make_batch(lp, **kw), CFG, t([5.0]))  # r flagged off: no RL term
    plain = opd_loss(make_batch(lp, **kw), CFG)
    # A = [0.5, -2]: (-1.1·0.5 + 0.9·2)/2 = 0.625
    assert combined.loss.item() == pytest.approx(0.625)
    assert plain.loss.item() == pytest.approx(0.625)


# --- KL and entropy -------------------------------------------------------------------------
def test_kl_k3_values() -> None:
    theta = t([[-1.0, -1.0, -1.0, -1.0]])
    ref = t([[-1.0, -1.0 + LN2, -1.0 - LN2, float("-inf")]])
    k3 = kl_k3(theta, ref, t([[1.0, 1.0, 1.0, 0.0]]))
    # d = ref-θ: 0 → 0; ln2 → 2 - ln2 - 1 = 1 - ln2; -ln2 → 0.5 + ln2 - 1; padding → 0
    assert torch.allclose(k3, t([[0.0, 1 - LN2, LN2 - 0.5, 0.0]]))
    assert k3[0, 0].item() == 0.0
    assert (k3[0, 1:3] > 0).all()


def test_kl_and_entropy_coefficients_shift_the_loss_by_the_expected_amount() -> None:
    extra = {"ref_logprobs_BT": t([[-1.0 + LN2, -1.0]], grad=True)}
    entropy = t([[0.4, 0.8]], grad=True)
    kw: dict[str, Any] = {"rewards": [1.0], "has_reward": [True], "entropy_BT": entropy}
    base = rl_loss(make_batch([[-1.0, -1.0]], **kw, **extra), CFG, t([1.0]))
    # stats are reported with zero coefficients: kl = mean(1 - ln2, 0), entropy = 0.6
    assert base.stats["kl"] == pytest.approx((1 - LN2) / 2)
    assert base.stats["entropy"] == pytest.approx(0.6)
    assert base.loss.item() == pytest.approx(-1.0)
    batch = make_batch([[-1.0, -1.0]], **kw, **extra)
    cfg = LossConfig(kl_coef=0.1, entropy_coef=0.01)
    res = rl_loss(batch, cfg, t([1.0]))
    # -1 + 0.1·(1 - ln2)/2 - 0.01·0.6
    assert res.loss.item() == pytest.approx(-1.0 + 0.05 * (1 - LN2) - 0.006)
    assert res.stats["pg_loss"] == pytest.approx(-1.0)
    backward(res)
    assert_only_logprobs_grad(batch)
    assert torch.allclose(grad(entropy), t([[-0.005, -0.005]]))
    # k3 gradient wrt θ at d: -(e^d - 1); token 0: -(2-1)·0.1/2 = -0.05, plus PG -1/2
    assert batch.logprobs_BT.grad is not None
    assert batch.logprobs_BT.grad[0, 0].item() == pytest.approx(-0.5 - 0.05)


@pytest.mark.parametrize(
    "method", ["rl", "opd", "combine", "topk-opd", "combine-topk", "combine-stop"]
)
def test_every_objective_adds_the_kl_term(method: str) -> None:
    topk = t([[[math.log(0.5), math.log(0.25)]]], grad=True)
    kw: dict[str, Any] = {
        "rewards": [1.0],
        "has_reward": [True],
        "teacher": [[0.0]],
        "has_teacher": [True],
        "ref_logprobs_BT": t([[-1.0 + LN2]]),
        "topk_teacher_logprobs_BTK": topk.detach(),
        "topk_student_logprobs_BTK": topk,
    }
    plain = OBJECTIVES[method](make_batch([[-1.0]], **kw), CFG, t([1.0]))
    with_kl = OBJECTIVES[method](make_batch([[-1.0]], **kw), LossConfig(kl_coef=0.5), t([1.0]))
    # k3 at d = ln2 is 1 - ln2 on the single token
    assert with_kl.loss.item() - plain.loss.item() == pytest.approx(0.5 * (1 - LN2))
    assert with_kl.stats["kl"] == pytest.approx(1 - LN2)
    assert set(with_kl.stats) == set(STAT_KEYS)


@pytest.mark.parametrize(
    "method", ["rl", "opd", "combine", "topk-opd", "combine-topk", "combine-stop"]
)
def test_every_objective_without_any_signal_is_zero_and_differentiable(method: str) -> None:
    topk = t([[[math.log(0.5), math.log(0.25)]] * 2], grad=True)
    batch = make_batch(
        [[-1.0, -2.0]],
        rewards=[0.0],
        teacher=[[5.0, 5.0]],
        ref_logprobs_BT=t([[0.0, 0.0]]),
        topk_teacher_logprobs_BTK=topk.detach() - 1.0,
        topk_student_logprobs_BTK=topk,
    )
    res = OBJECTIVES[method](batch, LossConfig(kl_coef=1.0), t([3.0]))
    assert res.loss.item() == 0.0
    assert (res.stats["samples"], res.stats["tokens"]) == (0.0, 0.0)
    res.loss.backward()
    assert torch.equal(grad(batch.logprobs_BT), t([[0.0, 0.0]]))


# --- table and settings ---------------------------------------------------------------------
def test_objectives_table_covers_every_configured_method() -> None:
    methods = set(get_args(Method))
    assert set(OBJECTIVES) == methods
    assert set(get_args(TrainSettings.model_fields["method"].annotation)) == methods
    assert {m for m in methods if needs_teacher(m)} == {
        "opd",
        "combine",
        "topk-opd",
        "combine-topk",
        "combine-stop",
    }
    assert {m for m in methods if needs_reward(m)} == {
        "rl",
        "combine",
        "combine-topk",
        "combine-stop",
    }
    with pytest.raises(ValueError):
        needs_teacher("grpo")
    batch = make_batch([[-1.0]], teacher=[[0.0]], has_teacher=[True])
    assert OBJECTIVES["opd"](batch, CFG, t([9.0])).loss.item() == opd_loss(batch, CFG).loss.item()


def test_inputs_are_validated() -> None:
    with pytest.raises(ValueError, match="mask_BT"):
        make_batch([[-1.0, -1.0]], mask=[[1.0, 1.0, 1.0]])
    with pytest.raises(ValueError, match="rewards_B"):
        make_batch([[-1.0]], rewards=[1.0, 1.0])
    with pytest.raises(ValueError, match="together"):
        make_batch([[-1.0]], topk_teacher_logprobs_BTK=t([[[0.0]]]))
    with pytest.raises(ValueError):
        LossConfig(eps_low=1.0)
    with pytest.raises(ValueError):
        LossConfig(opd_clip=0.0)


# --- truncated importance sampling (a serving engine with other kernels) -------------------
def test_tis_weights_are_truncated_ratios_and_zero_on_padding() -> None:
    lp = t([[-1.0, -1.0, -1.0]])
    served = t([[-1.0 - LN2, -1.0 + LN2, -1.0 - 3.0]])  # the server under/over-sampled
    w = tis_weights(lp, served, t([[1.0, 1.0, 0.0]]), cap=2.0)
    # e^(ln2) = 2, e^(-ln2) = 0.5, padding 0 (its e^3 would be truncated to 2 anyway)
    assert torch.allclose(w, t([[2.0, 0.5, 0.0]]))
    assert torch.allclose(tis_weights(lp, lp - 5.0, t([[1.0, 1.0, 1.0]]), 2.0), t([[2.0] * 3]))


def test_tis_with_matching_log_probs_is_plain_ppo() -> None:
    """Where the server computed exactly the trainer's log-probs, the correction changes
    neither the loss nor the gradient (the ratio is 1, every weight 1)."""
    results = []
    for cap in (0.0, 2.0):
        batch = make_batch([[-1.0, -2.0]], rewards=[1.0], has_reward=[True])
        res = rl_loss(batch, LossConfig(tis_cap=cap), t([1.0]))
        backward(res)
        results.append((res.loss.item(), grad(batch.logprobs_BT).clone(), res.stats["tis_weight"]))
    (plain, g_plain, w_plain), (tis, g_tis, w_tis) = results
    assert tis == pytest.approx(plain) and torch.allclose(g_tis, g_plain)
    assert (w_plain, w_tis) == (0.0, pytest.approx(1.0))


def test_tis_keeps_learning_where_a_kernel_gap_would_clip_ppo() -> None:
    """A served log-prob 0.3 below the trainer's reads to PPO as a policy that moved by
    e^0.3 = 1.35 > 1 + eps_high: the token is clipped and learns nothing. TIS weighs it by
    min(e^0.3, cap) instead and its gradient stays."""
    gap = 0.3
    grads = {}
    for cap in (0.0, 2.0):
        batch = make_batch(
            [[-1.0, -1.0]], old=[[-1.0 - gap, -1.0]], rewards=[1.0], has_reward=[True]
        )
        res = rl_loss(batch, LossConfig(tis_cap=cap), t([1.0]))
        backward(res)
        grads[cap] = grad(batch.logprobs_BT)
    assert grads[0.0][0, 0].item() == 0.0  # clipped by PPO
    # TIS: -w·A/2 tokens with w = e^0.3; the matching token keeps -1/2
    assert grads[2.0][0, 0].item() == pytest.approx(-math.exp(gap) / 2)
    assert grads[2.0][0, 1].item() == pytest.approx(-0.5)


def test_tis_cap_must_be_off_or_at_least_one() -> None:
    with pytest.raises(ValueError, match="tis_cap"):
        LossConfig(tis_cap=0.5)


@pytest.mark.parametrize("name", ["w_rl", "w_opd"])
def test_combine_weights_must_not_be_negative(name: str) -> None:
    with pytest.raises(ValueError, match=name):
        LossConfig(**{name: -0.5})
