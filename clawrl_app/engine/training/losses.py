"""Training objectives: binary RL, OPD, their combination and top-k OPD (REFERENCE §4–§6).

Pure functions of padded tensors (torchtune / ART style): each returns a `LossResult`, a
scalar loss plus detached float statistics. The trainer picks its objective once from
`OBJECTIVES`; nothing here branches on the method. Shape suffixes: B samples, T response
tokens (padded), K teacher top-k ids.

Every objective takes the mean over a sample's valid tokens, then over the samples that take
part (with the objective's signal and >= 1 token): samples without a signal never dilute the
loss (REFERENCE §9), and a batch where none takes part gives exactly 0 with a graph, so
`backward()` yields zero gradients, not NaN. Behaviour, teacher and reference log-probs and
advantages are detached; padding may hold anything (even NaN), it is replaced before `exp`.

Nothing here reads a tensor back to the host (no `float(t)`, `int(t)`, boolean indexing):
on a GPU each read waits for the queued kernels, so counts stay tensors and statistics are
`LazyStats`, read once by the trainer after the optimizer step.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Literal

import torch
from torch import Tensor

from clawrl_app.engine.training.lazy_stats import LazyStats
from clawrl_app.engine.training.repeats import discourage

Method = Literal["rl", "opd", "combine", "topk-opd", "combine-topk", "combine-stop"]

_PG_STATS = ("pg_loss", "clip_frac", "ratio_mean", "adv_mean", "adv_std", "tis_weight")
STAT_KEYS = (*_PG_STATS, "kl", "entropy", "tokens", "samples")
"""Keys of every `LossResult.stats`; a statistic with nothing to measure is 0.0."""

# Largest total probability the top-k bins may claim, so the tail bin keeps log(1e-6)
# instead of log(0) = -inf when a distribution puts (numerically) all its mass on top-k.
_LOG_MAX_TOPK_MASS = math.log1p(-1e-6)


@dataclass(frozen=True, eq=False)
class LossBatch:
    """One padded training batch; all `_BT` tensors share the shape (B, T)."""

    logprobs_BT: Tensor
    """log π_θ of the sampled response tokens under the current weights (requires grad)."""
    old_logprobs_BT: Tensor
    """Behaviour log-probs π_old recorded at sampling time."""
    mask_BT: Tensor
    """1.0 on response tokens, 0.0 on padding."""
    rewards_B: Tensor
    """Judge reward r ∈ {-1, 0, 1} (float allowed)."""
    has_reward_B: Tensor
    """Bool: the sample carries an RL signal (r ≠ 0 and the method uses RL)."""
    teacher_logprobs_BT: Tensor
    """log π_teacher of the same tokens under the hint-augmented prompt; zeros where absent."""
    has_teacher_B: Tensor
    """Bool: the sample has an accepted hint and teacher log-probs."""
    ref_logprobs_BT: Tensor | None = None
    """Reference (base) model log-probs for the k3 KL; None = no KL."""
    student_logprobs_BT: Tensor | None = None
    """log π_θ of the same tokens at temperature 1, detached: what the teacher's log-probs
    (scored at temperature 1) are compared with. None: the behaviour log-probs are (right
    only for answers sampled at temperature 1)."""
    entropy_BT: Tensor | None = None
    """Per-token entropy of π_θ (may require grad); None = no entropy bonus."""
    topk_teacher_logprobs_BTK: Tensor | None = None
    """Teacher log-probs over its own top-K token ids (top-k OPD only)."""
    topk_student_logprobs_BTK: Tensor | None = None
    """Student log-probs over the same K token ids (top-k OPD only; requires grad)."""
    repeat_BT: Tensor | None = None
    """1 where a token repeats a phrase said earlier in its answer (`repeats.repeat_flags`)."""

    def __post_init__(self) -> None:
        """Reject misaligned tensors early: a silent broadcast would train on wrong tokens."""
        bt = tuple(self.logprobs_BT.shape)
        topk = self.topk_teacher_logprobs_BTK
        if len(bt) != 2:
            raise ValueError(f"logprobs_BT must be (B, T), got {bt}")
        if (topk is None) != (self.topk_student_logprobs_BTK is None):
            raise ValueError("top-k teacher and student log-probs come together or not at all")
        btk = bt if topk is None else (*bt, topk.shape[-1])
        for f in fields(self):
            value = getattr(self, f.name)
            expected = bt[:1] if f.name.endswith("_B") else btk if f.name.endswith("_BTK") else bt
            if value is not None and tuple(value.shape) != expected:
                raise ValueError(f"{f.name} has shape {tuple(value.shape)}, expected {expected}")


@dataclass(frozen=True)
class LossConfig:
    """Loss hyper-parameters; defaults follow REFERENCE §4–§6."""

    eps_low: float = 0.2
    """RL (and combine) PPO clip below: ratios under 1 - eps_low stop pushing down."""
    eps_high: float = 0.28
    """RL (and combine) PPO clip above: ratios over 1 + eps_high stop pushing up."""
    opd_eps: float = 0.2
    """Symmetric PPO clip of the OPD objective (0.2/0.2, REFERENCE §5)."""
    opd_clip: float = 5.0
    """OPD token advantages are clamped to [-opd_clip, opd_clip] (upstream had no bound)."""
    w_opd: float = 1.0
    """Weight of the teacher term in the combined advantage."""
    w_rl: float = 1.0
    """Weight of the reward term in the combined advantage."""
    kl_coef: float = 0.0
    """Coefficient of the k3 KL to the reference model (needs `ref_logprobs_BT`)."""
    opd_center: bool = False
    """Subtract the batch's mean teacher gap from every token's (a baseline for the teacher
    term): the gap's mean is -KL(π ‖ π_teacher) < 0, and left in, it pushes every sampled
    token down at once, which flattens the policy (`opd_token_advantages`)."""
    entropy_coef: float = 0.0
    """Coefficient of the entropy bonus (needs `entropy_BT`)."""
    tis_cap: float = 0.0
    """> 0: the serving engine computes log-probs differently from the trainer (llama.cpp
    kernels): correct with truncated importance sampling, weights min(π_θ/π_behaviour, cap)
    on a ratio taken from the trainer's own log-probs (`policy_gradient`). 0 = off."""
    repeat_penalty: float = 0.0
    """Advantage of a repeating token (`batch.repeat_BT`): min(A, 0) - this (repeats.py)."""

    def __post_init__(self) -> None:
        """Reject settings that would make the clip range or the penalties meaningless."""
        nonneg = ("eps_low", "eps_high", "opd_eps", "kl_coef", "entropy_coef", "tis_cap",
                  "repeat_penalty")  # fmt: skip
        for name in (*nonneg, "w_rl", "w_opd"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if 0 < self.tis_cap < 1:
            raise ValueError(f"tis_cap must be 0 (off) or >= 1, got {self.tis_cap}")
        if self.eps_low >= 1 or self.opd_eps >= 1:
            raise ValueError("eps_low and opd_eps must be < 1 (the ratio clip stays positive)")
        if self.opd_clip <= 0:
            raise ValueError(f"opd_clip must be > 0, got {self.opd_clip}")


@dataclass(frozen=True, eq=False)
class LossResult:
    """A differentiable scalar loss and detached statistics (keys: `STAT_KEYS`)."""

    loss: Tensor
    """Scalar to call `backward()` on."""
    stats: Mapping[str, float]
    """pg_loss, clip_frac, ratio_mean, kl, entropy, adv_mean, adv_std, ... as plain floats
    when read (the built-in objectives return `LazyStats`; a custom loss may give a dict)."""


Objective = Callable[[LossBatch, LossConfig, Tensor], LossResult]
"""Uniform objective signature: `objective(batch, cfg, adv_B)`; `adv_B` from `advantages.advantages_from`."""


# --- small tensor helpers -------------------------------------------------------------------
def _upcast(x: Tensor) -> Tensor:
    """At least float32 (bf16/fp16/int inputs are promoted; float64 stays float64)."""
    return x.to(torch.promote_types(x.dtype, torch.float32))  # same shape as x


def _valid(mask_BT: Tensor) -> Tensor:
    """Bool mask of response tokens."""
    return mask_BT > 0  # (B, T)


def _token_mean(values_BT: Tensor, valid_BT: Tensor) -> Tensor:
    """Mean over valid tokens (flat); 0 when there are none."""
    total = torch.where(valid_BT, values_BT, 0.0).sum()  # ()
    return total / valid_BT.sum().clamp(min=1)  # ()


def _token_std(values_BT: Tensor, valid_BT: Tensor) -> Tensor:
    """Population std over valid tokens (0 for fewer than two), detached."""
    x_BT = values_BT.detach()  # (B, T)
    n = valid_BT.sum()  # ()
    mean = _token_mean(x_BT, valid_BT)  # ()
    var = _token_mean((x_BT - mean) ** 2, valid_BT)  # ()
    return torch.where(n > 1, var.sqrt(), 0.0)  # ()


def _sample_mean(values_BT: Tensor, valid_BT: Tensor) -> tuple[Tensor, Tensor]:
    """Mean per sample over its valid tokens, then over samples with >= 1 valid token;
    also returns that sample count (a 0-d tensor)."""
    tokens_B = valid_BT.sum(-1)  # (B,)
    sums_B = torch.where(valid_BT, values_BT, 0.0).sum(-1)  # (B,)
    per_sample_B = sums_B / tokens_B.clamp(min=1)  # (B,); 0 for an all-masked sample
    samples = (tokens_B > 0).sum()  # ()
    return per_sample_B.sum() / samples.clamp(min=1), samples  # ()


def opd_token_advantages(
    teacher_logprobs_BT: Tensor,
    old_logprobs_BT: Tensor,
    mask_BT: Tensor,
    has_teacher_B: Tensor,
    clip: float,
    student_logprobs_BT: Tensor | None = None,
    center: bool = False,
) -> Tensor:
    """clamp(log π_teacher − log π_student, −clip, clip); 0 on padding and teacher-less
    samples. With `center`, minus the clamped gap's mean over the batch's teacher tokens.
    The student is `student_logprobs_BT` (the policy at the teacher's temperature, 1) when
    given, else the behaviour log-probs `old_logprobs_BT`.

    Both sides must be taken at one temperature: an answer sampled at T = 0.2 has behaviour
    log-probs near 0 (its tokens were near-certain at T = 0.2), while the teacher, scored at
    T = 1, gives the same tokens -0.5 to -2 whatever the hint says; that gap reads as "the
    teacher dislikes every token" and pushes every sampled token down.

    Even at one temperature the gap's expectation under the policy is -KL(π ‖ π_teacher):
    negative whatever was sampled. A constant subtracted from it leaves the expected
    gradient unchanged (E_π[∇ log π] = 0) but removes, from the few sampled answers of a
    small batch, the part that pushes every sampled token down at once; `center` subtracts
    the batch mean (bench/collapse.py measures what that part does to the entropy)."""
    with torch.no_grad():
        valid_BT = _valid(mask_BT) & has_teacher_B.bool()[:, None]  # (B, T)
        teacher_BT = _upcast(teacher_logprobs_BT.detach())  # (B, T)
        student_BT = old_logprobs_BT if student_logprobs_BT is None else student_logprobs_BT
        gap_BT = teacher_BT - _upcast(student_BT.detach())  # (B, T)
        adv_BT = torch.where(valid_BT, gap_BT.clamp(-clip, clip), 0.0)  # (B, T)
        if center:
            adv_BT = torch.where(valid_BT, adv_BT - _token_mean(adv_BT, valid_BT), 0.0)
        return adv_BT  # (B, T)


# --- core losses ----------------------------------------------------------------------------
def ppo_clip_loss(
    logprobs_BT: Tensor,
    old_logprobs_BT: Tensor,
    adv_BT: Tensor,
    mask_BT: Tensor,
    eps_low: float,
    eps_high: float,
) -> LossResult:
    """PPO-clip: per token max(−ρ·A, −clip(ρ, 1−eps_low, 1+eps_high)·A), ρ = e^(logπθ − logπold).

    Mean over each sample's valid tokens, then over samples with at least one valid token.
    `clip_frac` is the share of valid tokens where the clipped term is strictly larger (so
    that token's gradient is zero).
    """
    valid_BT = _valid(mask_BT)  # (B, T)
    old_BT = _upcast(old_logprobs_BT.detach())  # (B, T)
    a_BT = torch.where(valid_BT, _upcast(adv_BT.detach()), 0.0)  # (B, T)
    log_ratio_BT = torch.where(valid_BT, _upcast(logprobs_BT) - old_BT, 0.0)  # (B, T)
    ratio_BT = torch.exp(log_ratio_BT)  # (B, T)
    unclipped_BT = -ratio_BT * a_BT  # (B, T)
    clipped_BT = -torch.clamp(ratio_BT, 1.0 - eps_low, 1.0 + eps_high) * a_BT  # (B, T)
    is_clipped_BT = (clipped_BT > unclipped_BT) & valid_BT  # (B, T)
    token_loss_BT = torch.where(is_clipped_BT, clipped_BT, unclipped_BT)  # (B, T)
    loss, samples = _sample_mean(token_loss_BT, valid_BT)  # ()
    stats: dict[str, Tensor | float] = {
        "pg_loss": loss,
        "clip_frac": _token_mean(is_clipped_BT.to(ratio_BT.dtype), valid_BT),
        "ratio_mean": _token_mean(ratio_BT.detach(), valid_BT),
        "kl": 0.0,
        "entropy": 0.0,
        "adv_mean": _token_mean(a_BT, valid_BT),
        "adv_std": _token_std(a_BT, valid_BT),
        "tis_weight": 0.0,
        "tokens": valid_BT.sum(),
        "samples": samples,
    }
    return LossResult(loss=loss, stats=LazyStats(stats))


def kl_k3(logprobs_BT: Tensor, ref_logprobs_BT: Tensor, mask_BT: Tensor) -> Tensor:
    """k3 estimator of KL(π_θ ‖ π_ref) per token: e^(ref−θ) − (ref−θ) − 1; 0 on padding."""
    valid_BT = _valid(mask_BT)  # (B, T)
    diff_BT = _upcast(ref_logprobs_BT.detach()) - _upcast(logprobs_BT)  # (B, T)
    diff_BT = torch.where(valid_BT, diff_BT, 0.0)  # (B, T)
    return torch.exp(diff_BT) - diff_BT - 1.0  # (B, T)


def tis_weights(logprobs_BT: Tensor, behaviour_BT: Tensor, mask_BT: Tensor, cap: float) -> Tensor:
    """Truncated importance weights min(e^(logπ_θ − logπ_behaviour), cap), detached; 0 on
    padding. π_behaviour is what the serving engine reported when it sampled the token."""
    with torch.no_grad():
        valid_BT = _valid(mask_BT)  # (B, T)
        gap_BT = _upcast(logprobs_BT.detach()) - _upcast(behaviour_BT.detach())  # (B, T)
        w_BT = torch.exp(torch.where(valid_BT, gap_BT, 0.0).clamp(max=math.log(cap)))  # (B, T)
        return torch.where(valid_BT, w_BT, 0.0)  # (B, T)


def policy_gradient(
    batch: LossBatch,
    adv_BT: Tensor,
    valid_BT: Tensor,
    eps_low: float,
    eps_high: float,
    cap: float,
    repeat_penalty: float = 0.0,
) -> LossResult:
    """PPO-clip against the behaviour log-probs, or, with `cap` > 0, truncated importance
    sampling for a serving engine whose log-probs differ from the trainer's (decoupled PPO
    with the trainer's current log-probs as the proximal policy): per token
    −w·ρ·A with ρ = e^(logπ_θ − sg(logπ_θ)) (1, its gradient ∇logπ_θ) and
    w = min(π_θ/π_behaviour, cap), so a token the server over-sampled counts less and the
    kernel gap never reads as a policy change. `tis_weight` reports the mean weight. A token
    that repeats its answer's phrase is never pushed up (`repeats.discourage`)."""
    adv_BT = discourage(adv_BT, batch.repeat_BT, valid_BT, repeat_penalty)  # (B, T)
    if cap <= 0:
        return ppo_clip_loss(
            batch.logprobs_BT, batch.old_logprobs_BT, adv_BT, valid_BT, eps_low, eps_high
        )
    w_BT = tis_weights(batch.logprobs_BT, batch.old_logprobs_BT, valid_BT, cap)  # (B, T)
    result = ppo_clip_loss(
        batch.logprobs_BT, batch.logprobs_BT.detach(), adv_BT * w_BT, valid_BT, eps_low, eps_high
    )
    given = result.stats
    raw: dict[str, Tensor | float] = given.raw() if isinstance(given, LazyStats) else {**given}
    raw["tis_weight"] = _token_mean(w_BT, valid_BT)
    return LossResult(loss=result.loss, stats=LazyStats(raw))


def _with_regularizers(
    result: LossResult, batch: LossBatch, cfg: LossConfig, valid_BT: Tensor
) -> LossResult:
    """Add kl_coef·mean(k3) − entropy_coef·mean(entropy) over the objective's valid tokens.

    `kl` / `entropy` statistics are reported whenever their tensors are given.
    """
    loss = result.loss
    given = result.stats
    stats = _raw(given)
    if batch.ref_logprobs_BT is not None:
        k3_BT = kl_k3(batch.logprobs_BT, batch.ref_logprobs_BT, valid_BT)  # (B, T)
        kl = _token_mean(k3_BT, valid_BT)  # ()
        stats["kl"] = kl
        if cfg.kl_coef > 0:
            loss = loss + cfg.kl_coef * kl  # ()
    if batch.entropy_BT is not None:
        entropy = _token_mean(_upcast(batch.entropy_BT), valid_BT)  # ()
        stats["entropy"] = entropy
        if cfg.entropy_coef > 0:
            loss = loss - cfg.entropy_coef * entropy  # ()
    return LossResult(loss=loss, stats=LazyStats(stats))


# --- objectives -----------------------------------------------------------------------------
def _rl_signal_B(batch: LossBatch) -> Tensor:
    """Samples with an RL signal: flagged and r ≠ 0 (a zero reward never trains)."""
    return batch.has_reward_B.bool() & (batch.rewards_B != 0)  # (B,)


def rl_loss(batch: LossBatch, cfg: LossConfig, adv_B: Tensor) -> LossResult:
    """Binary RL (REFERENCE §4): PPO-clip with A_t = adv_B on every response token.

    Only samples with an RL signal take part, eps `cfg.eps_low` / `cfg.eps_high`.
    """
    result, valid_BT = _rl_core(batch, cfg, adv_B)
    return _with_regularizers(result, batch, cfg, valid_BT)


def _rl_core(batch: LossBatch, cfg: LossConfig, adv_B: Tensor) -> tuple[LossResult, Tensor]:
    signal_B = _rl_signal_B(batch)  # (B,)
    valid_BT = _valid(batch.mask_BT) & signal_B[:, None]  # (B, T)
    adv_BT = torch.where(valid_BT, adv_B.detach()[:, None], 0.0)  # (B, T)
    result = policy_gradient(
        batch, adv_BT, valid_BT, cfg.eps_low, cfg.eps_high, cfg.tis_cap, cfg.repeat_penalty
    )
    return result, valid_BT


def _teacher_advantages(batch: LossBatch, cfg: LossConfig, valid_BT: Tensor) -> Tensor:
    """The teacher term's token advantages of `batch` under `cfg` (`opd_token_advantages`)."""
    return opd_token_advantages(
        batch.teacher_logprobs_BT,
        batch.old_logprobs_BT,
        valid_BT,
        batch.has_teacher_B.bool(),
        cfg.opd_clip,
        batch.student_logprobs_BT,
        cfg.opd_center,
    )  # (B, T)


def opd_loss(batch: LossBatch, cfg: LossConfig) -> LossResult:
    """On-policy distillation (REFERENCE §5): PPO-clip with the clipped teacher gap as A_t.

    Only samples with a teacher take part; symmetric eps `cfg.opd_eps`.
    """
    teacher_B = batch.has_teacher_B.bool()  # (B,)
    valid_BT = _valid(batch.mask_BT) & teacher_B[:, None]  # (B, T)
    adv_BT = _teacher_advantages(batch, cfg, valid_BT)  # (B, T)
    result = policy_gradient(
        batch, adv_BT, valid_BT, cfg.opd_eps, cfg.opd_eps, cfg.tis_cap, cfg.repeat_penalty
    )
    return _with_regularizers(result, batch, cfg, valid_BT)


def combine_loss(batch: LossBatch, cfg: LossConfig, adv_B: Tensor) -> LossResult:
    """Combined (REFERENCE §6): A_t = w_opd·clip(logπ_teacher − logπ_old) + w_rl·adv_B.

    Teacher term only on samples with a teacher, reward term only on samples with an RL
    signal (each exactly 0 elsewhere); samples with neither are excluded. One PPO-clip with
    `cfg.eps_low` / `cfg.eps_high`.
    """
    teacher_B = batch.has_teacher_B.bool()  # (B,)
    signal_B = _rl_signal_B(batch)  # (B,)
    valid_BT = _valid(batch.mask_BT) & (teacher_B | signal_B)[:, None]  # (B, T)
    opd_adv_BT = _teacher_advantages(batch, cfg, valid_BT)  # (B, T)
    rl_valid_BT = valid_BT & signal_B[:, None]  # (B, T)
    rl_adv_BT = torch.where(rl_valid_BT, adv_B.detach()[:, None], 0.0)  # (B, T)
    adv_BT = cfg.w_opd * opd_adv_BT + cfg.w_rl * rl_adv_BT  # (B, T)
    result = policy_gradient(
        batch, adv_BT, valid_BT, cfg.eps_low, cfg.eps_high, cfg.tis_cap, cfg.repeat_penalty
    )
    return _with_regularizers(result, batch, cfg, valid_BT)


def tail_logprob(topk_logprobs_BTK: Tensor) -> Tensor:
    """log(1 − Σ_k p_k) of the mass outside the top-K bins, computed stably.

    log(−expm1(logsumexp)) avoids 1 − Σp cancellation; the top-k mass is clamped to at most
    1 − 1e-6 so the tail stays finite when the top-k bins hold (numerically) everything.
    """
    log_mass_BT = torch.logsumexp(topk_logprobs_BTK, dim=-1)  # (B, T)
    log_mass_BT = log_mass_BT.clamp(max=_LOG_MAX_TOPK_MASS)  # (B, T)
    return torch.log(-torch.expm1(log_mass_BT))  # (B, T)


def topk_reverse_kl(student_logprobs_BTK: Tensor, teacher_logprobs_BTK: Tensor) -> Tensor:
    """Per-token KL(student ‖ teacher) over the K teacher top-k bins plus one tail bin."""
    s_BTK = _upcast(student_logprobs_BTK)  # (B, T, K)
    t_BTK = _upcast(teacher_logprobs_BTK.detach())  # (B, T, K)
    s_BTJ = torch.cat([s_BTK, tail_logprob(s_BTK)[..., None]], dim=-1)  # (B, T, K+1)
    t_BTJ = torch.cat([t_BTK, tail_logprob(t_BTK)[..., None]], dim=-1)  # (B, T, K+1)
    return (torch.exp(s_BTJ) * (s_BTJ - t_BTJ)).sum(-1)  # (B, T)


def topk_opd_loss(batch: LossBatch, cfg: LossConfig) -> LossResult:
    """Top-k OPD (REFERENCE §5): reverse KL to the teacher per token, no ratio, no clip.

    Mean per sample over its valid tokens, then over samples with a teacher. `clip_frac`
    and the advantage statistics are 0 (there is no advantage); `ratio_mean` still reports
    how far π_θ has moved from π_old.
    """
    result, valid_BT = _topk_core(batch)
    return _with_regularizers(result, batch, cfg, valid_BT)


def _topk_core(batch: LossBatch) -> tuple[LossResult, Tensor]:
    teacher_BTK = batch.topk_teacher_logprobs_BTK  # (B, T, K)
    student_BTK = batch.topk_student_logprobs_BTK  # (B, T, K)
    if teacher_BTK is None or student_BTK is None:
        raise ValueError("topk-opd needs topk_teacher_logprobs_BTK and topk_student_logprobs_BTK")
    valid_BT = _valid(batch.mask_BT) & batch.has_teacher_B.bool()[:, None]  # (B, T)
    # Padding becomes a uniform distribution over the K+1 bins so it cannot yield NaN.
    uniform = -math.log(teacher_BTK.shape[-1] + 1)
    student_BTK = torch.where(valid_BT[..., None], student_BTK, uniform)  # (B, T, K)
    teacher_BTK = torch.where(valid_BT[..., None], teacher_BTK, uniform)  # (B, T, K)
    kl_BT = topk_reverse_kl(student_BTK, teacher_BTK)  # (B, T)
    log_ratio_BT = (batch.logprobs_BT - batch.old_logprobs_BT).detach()  # (B, T)
    ratio_BT = torch.exp(torch.where(valid_BT, log_ratio_BT, 0.0))  # (B, T), diagnostic only
    loss, samples = _sample_mean(kl_BT, valid_BT)  # ()
    stats: dict[str, Tensor | float] = dict.fromkeys(STAT_KEYS, 0.0)
    stats |= {
        "pg_loss": loss,
        "ratio_mean": _token_mean(ratio_BT, valid_BT),
        "tokens": valid_BT.sum(),
        "samples": samples,
    }
    return LossResult(loss=loss, stats=LazyStats(stats)), valid_BT


def combine_topk_loss(batch: LossBatch, cfg: LossConfig, adv_B: Tensor) -> LossResult:
    """Combine with the top-k teacher: w_rl·(binary RL loss) + w_opd·(top-k reverse KL).

    The sampled-token teacher gap of `combine` only re-weights tokens the policy already
    samples; the top-k KL also moves mass onto the teacher's preferred tokens that were not
    sampled (a format the model never produces, such as a bulleted list). Each term is the
    mean of its own method over the samples that carry its signal (0 when none does: no
    host read decides it). `pg_loss` is the weighted sum, `tokens` / `samples` count either
    signal, the other statistics are the RL term's.
    """
    rl, valid_BT = _rl_core(batch, cfg, adv_B)
    loss = cfg.w_rl * rl.loss
    stats = _raw(rl.stats)
    if batch.topk_teacher_logprobs_BTK is not None:
        topk, topk_valid_BT = _topk_core(batch)
        loss = loss + cfg.w_opd * topk.loss
        valid_BT = valid_BT | topk_valid_BT  # (B, T)
    stats |= {
        "pg_loss": loss,
        "tokens": valid_BT.sum(),
        "samples": valid_BT.any(dim=-1).sum(),
    }
    return _with_regularizers(LossResult(loss, LazyStats(stats)), batch, cfg, valid_BT)


def _raw(stats: Mapping[str, float]) -> dict[str, Tensor | float]:
    return stats.raw() if isinstance(stats, LazyStats) else {**stats}


# --- dispatch table -------------------------------------------------------------------------
OBJECTIVES: dict[str, Objective] = {
    "rl": rl_loss,
    # The OPD objectives take their signal from the teacher: adv_B is unused.
    "opd": lambda batch, cfg, adv_B: opd_loss(batch, cfg),
    "combine": combine_loss,
    "topk-opd": lambda batch, cfg, adv_B: topk_opd_loss(batch, cfg),
    "combine-topk": combine_topk_loss,
    # the same loss over one bin, "stop here" (policy_forward.stop_bins builds it)
    "combine-stop": combine_topk_loss,
}
"""Objective per method name (`TrainSettings.method`), all called as `fn(batch, cfg, adv_B)`."""

_TEACHER_METHODS = frozenset({"opd", "combine", "topk-opd", "combine-topk", "combine-stop"})
_REWARD_METHODS = frozenset({"rl", "combine", "combine-topk", "combine-stop"})


def _known(method: str) -> str:
    """`method` itself, or `ValueError` when no objective has that name."""
    if method not in OBJECTIVES:
        raise ValueError(f"unknown method {method!r}; known: {sorted(OBJECTIVES)}")
    return method


def needs_teacher(method: str) -> bool:
    """Whether `method` uses teacher (hint) log-probs, so hint votes must run."""
    return _known(method) in _TEACHER_METHODS


def needs_reward(method: str) -> bool:
    """Whether `method` uses the judge reward, so RL advantages must be computed."""
    return _known(method) in _REWARD_METHODS
