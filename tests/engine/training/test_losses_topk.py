"""Top-k on-policy distillation and combine-topk (REFERENCE §5-6), on tiny hand-made
log-probs: the reverse KL over the teacher's top-k plus a tail bin, and its sum with the
binary RL term."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch import Tensor

from clawrl_app.engine.training.losses import (
    OBJECTIVES,
    LossConfig,
    LossResult,
    combine_topk_loss,
    rl_loss,
    tail_logprob,
    topk_opd_loss,
    topk_reverse_kl,
)
from clawrl_app.engine.training.policy_forward import stop_bins
from clawrl_app.engine.training.train_data import TrainItem, teaches
from tests.engine.training.test_losses import CFG, LN2, backward, grad, make_batch, t


def test_tail_logprob_and_topk_reverse_kl_by_hand() -> None:
    student = t([[[math.log(0.5), math.log(0.25)]]])  # tail 0.25
    teacher = t([[[math.log(0.25), math.log(0.25)]]])  # tail 0.5
    assert tail_logprob(student).item() == pytest.approx(math.log(0.25))
    assert tail_logprob(teacher).item() == pytest.approx(math.log(0.5))
    # 0.5·ln(0.5/0.25) + 0.25·ln(0.25/0.25) + 0.25·ln(0.25/0.5) = 0.5ln2 - 0.25ln2 = 0.25 ln2
    assert topk_reverse_kl(student, teacher).item() == pytest.approx(0.25 * LN2)
    assert topk_reverse_kl(teacher, teacher).item() == pytest.approx(0.0, abs=1e-12)
    # all mass on top-k: the sum is clamped below 1, the tail is log(1e-6), not -inf
    full = tail_logprob(t([[[math.log(0.5), math.log(0.5)]]]))
    assert full.item() == pytest.approx(math.log(1e-6), rel=1e-4)


def test_topk_opd_loss_means_over_teacher_samples_and_grads_student() -> None:
    student = t([[[math.log(0.5), math.log(0.25)], [math.log(0.3), math.log(0.3)]]] * 2)
    teacher = t([[[math.log(0.25), math.log(0.25)], [math.log(0.3), math.log(0.3)]]] * 2)
    student.requires_grad_()
    batch = make_batch(
        [[-1.0, -1.0], [-1.0, -1.0]],
        has_teacher=[True, False],
        topk_teacher_logprobs_BTK=teacher,
        topk_student_logprobs_BTK=student,
    )
    res = topk_opd_loss(batch, CFG)
    # sample 0: tokens KL 0.25ln2 and 0 → 0.125 ln2; sample 1 has no teacher
    assert res.loss.item() == pytest.approx(0.125 * LN2)
    assert res.stats["samples"] == 1.0 and res.stats["clip_frac"] == 0.0
    assert res.stats["ratio_mean"] == pytest.approx(1.0)
    res.loss.backward()
    assert student.grad is not None
    assert student.grad[0, 0].abs().sum() > 0
    # the equal-distribution token sits at the KL minimum, sample 1 is excluded
    assert torch.allclose(student.grad[0, 1], t([0.0, 0.0]), atol=1e-12)
    assert torch.equal(student.grad[1], torch.zeros(2, 2, dtype=torch.float64))
    assert teacher.grad is None and batch.logprobs_BT.grad is None  # no ratio term


def test_topk_opd_garbage_padding_and_missing_inputs() -> None:
    nan_k = t([[[float("nan"), float("-inf")]]])
    student = t([[[math.log(0.5), math.log(0.25)]]]).expand(1, 2, 2).clone()
    student[0, 1] = nan_k[0, 0]
    student.requires_grad_()
    teacher = student.detach().clone()
    batch = make_batch(
        [[-1.0, -1.0]],
        mask=[[1.0, 0.0]],
        has_teacher=[True],
        topk_teacher_logprobs_BTK=teacher,
        topk_student_logprobs_BTK=student,
    )
    res = topk_opd_loss(batch, CFG)
    backward(res)
    assert student.grad is not None and torch.isfinite(student.grad).all()
    with pytest.raises(ValueError):
        topk_opd_loss(make_batch([[-1.0]], has_teacher=[True]), CFG)


def _topk_pair(n_b: int) -> tuple[Tensor, Tensor]:
    """Student / teacher top-2 log-probs per token: KL 0.25 ln2 on token 0, 0 on token 1."""
    student = t([[[math.log(0.5), math.log(0.25)], [math.log(0.3), math.log(0.3)]]] * n_b)
    teacher = t([[[math.log(0.25), math.log(0.25)], [math.log(0.3), math.log(0.3)]]] * n_b)
    return student.requires_grad_(), teacher


def test_combine_topk_is_the_weighted_sum_of_rl_and_topk_opd() -> None:
    # samples: reward only, teacher only, both; each term means over its own samples
    lp, old = [[-1.0 + math.log(1.1), -1.0]] * 3, [[-1.0, -1.0]] * 3
    kw: dict[str, Any] = {
        "old": old,
        "rewards": [1.0, 0.0, -1.0],
        "has_reward": [True, False, True],
        "has_teacher": [False, True, True],
    }
    adv = t([0.5, 9.0, -0.5])  # the stray 9 (no reward) must not count

    def run(method: Any, cfg: LossConfig) -> LossResult:
        student, teacher = _topk_pair(3)
        batch = make_batch(
            lp, topk_teacher_logprobs_BTK=teacher, topk_student_logprobs_BTK=student, **kw
        )
        return method(batch, cfg, adv)

    rl = run(lambda b, c, a: rl_loss(b, c, a), CFG).loss.item()
    kl = run(lambda b, c, a: topk_opd_loss(b, c), CFG).loss.item()
    assert kl == pytest.approx(0.125 * LN2)  # both teacher samples: (0.25 ln2 + 0) / 2
    both = run(OBJECTIVES["combine-topk"], CFG)
    assert both.loss.item() == pytest.approx(rl + kl)
    assert both.stats["pg_loss"] == pytest.approx(rl + kl)
    weighted = run(OBJECTIVES["combine-topk"], LossConfig(w_opd=3.0, w_rl=0.5))
    assert weighted.loss.item() == pytest.approx(0.5 * rl + 3.0 * kl)
    # only the reward: plain RL; only the teacher: plain top-k OPD
    student, teacher = _topk_pair(1)
    alone = make_batch(
        [[-1.0, -1.0]],
        has_teacher=[True],
        topk_teacher_logprobs_BTK=teacher,
        topk_student_logprobs_BTK=student,
    )
    assert combine_topk_loss(alone, CFG, t([0.0])).loss.item() == pytest.approx(0.125 * LN2)
    res = combine_topk_loss(alone, CFG, t([0.0]))
    res.loss.backward()
    assert student.grad is not None and student.grad[0, 0].abs().sum() > 0


# --- combine-stop: the teacher's top-k as one bin, "stop here" ------------------------------
EOS, EOT = 2, 7  # two end-of-turn ids, as a chat model has


def test_stop_bins_pull_only_where_the_teacher_would_stop_more() -> None:
    """Position 0: both end ids in the teacher's top-3 (0.3 + 0.2 = 0.5 > the student's 0.1):
    the target is 0.5. Position 1: the teacher's end token (0.05) is below the student's
    (0.1): no pull. Position 2: no end token in the teacher's top-3: no pull."""
    student = t([[math.log(0.1), math.log(0.1), math.log(0.1)]], grad=True)  # (1, 3)
    ids = torch.tensor([[[EOS, 5, EOT], [EOS, 5, 6], [4, 5, 6]]])  # (1, 3, 3)
    teacher = t([[[math.log(x) for x in row] for row in
                  ((0.3, 0.4, 0.2), (0.05, 0.6, 0.3), (0.5, 0.3, 0.1))]])  # fmt: skip
    s_BTK, t_BTK = stop_bins(student, ids, teacher, (EOS, EOT))
    assert s_BTK.shape == t_BTK.shape == (1, 3, 1)
    assert t_BTK[0, :, 0].exp().tolist() == pytest.approx([0.5, 0.1, 0.1])
    kl_BT = topk_reverse_kl(s_BTK, t_BTK)  # (1, 3): two bins, "stop" and "go on"
    assert kl_BT[0, 1].item() == kl_BT[0, 2].item() == 0.0
    # 0.1·ln(0.1/0.5) + 0.9·ln(0.9/0.5)
    assert kl_BT[0, 0].item() == pytest.approx(0.1 * math.log(0.2) + 0.9 * math.log(1.8))
    kl_BT.sum().backward()
    g = grad(student)[0]
    assert g[0].item() < 0  # descending the loss raises "stop" at position 0
    assert g[1].item() == pytest.approx(0.0, abs=1e-7) and g[2].item() == pytest.approx(
        0.0, abs=1e-7
    )


@pytest.mark.parametrize(
    ("method", "stop_ids", "expected"),
    [
        ("rl", (), (False, False, False)),  # a hint's log-probs teach the reward term nothing
        ("combine", (), (True, False, True)),  # the sampled-token gap
        ("combine-topk", (), (False, True, True)),  # the teacher's top-k, any
        ("combine-stop", (EOS, EOT), (False, False, True)),  # a top-k with an end token
    ],
)
def test_teaches_counts_only_the_signal_the_method_trains_on(
    method: str, stop_ids: tuple[int, ...], expected: tuple[bool, bool, bool]
) -> None:
    def item(lps: list[float] | None, ids: list[list[int]] | None) -> TrainItem:
        top = None if ids is None else [[-1.0] * len(r) for r in ids]
        return TrainItem(0, "s", [1], [5, 6], [-1.0, -1.0], 1.0, -1.0, True, lps, "x", ids, top)

    logprobs_only = item([-1.0, -1.0], None)
    topk_without_end = item(None, [[5, 6], [6, 5]])
    topk_with_end = item([-1.0, -1.0], [[5, 6], [EOT, 5]])
    got = tuple(
        teaches(it, method, stop_ids) for it in (logprobs_only, topk_without_end, topk_with_end)
    )
    assert got == expected
