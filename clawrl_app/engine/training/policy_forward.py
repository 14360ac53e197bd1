"""Per-token log-probs of recorded responses under the policy being trained (torch).

One forward pass per micro-batch, built for speed and memory on a GPU:

- The batch is left-padded (every sequence ends in the last column, `position_ids` count
  from each sequence's first real token), so all responses end together and the model
  projects only the T hidden states that predict them onto the vocabulary
  (`logits_to_keep` as an index tensor, T being the longest response): prompt positions
  never reach the lm_head. An index tensor rather than the int T+1: HF slices the hidden
  states with it, and an int gives a strided view that turns the lm_head's matmul into a
  batched one against a broadcast weight (8% of a CPU step in bench/train_step.py); the
  index makes a contiguous copy, so it stays one plain matmul.
- Log-probs are `z[token] - logsumexp(z)` on the temperature-scaled logits `z`, batched over
  the micro-batch; `z` (float32) is the only B×T×V tensor kept for backward.
- Every tensor is created on the model's device; nothing is read back to the host.
- A turn sampled under a grammar (a forced tool call) is scored under the same mask
  (`allowed_BTV` from `grammar_replay.py`): the disallowed tokens are set to -inf before the
  log-softmax, as the sampler did, so the log-probs are the constrained policy's and
  compare with the recorded behaviour log-probs.

Response tensors are (B, T): item b's r_b response tokens fill the *last* r_b columns, the
left columns are padding (mask 0).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from clawrl_app.engine.training.losses import LossBatch
from clawrl_app.engine.training.repeats import repeat_flags
from clawrl_app.engine.training.train_data import TrainItem

PAD_ID = 0  # any valid id: padded positions are masked out of attention and of the loss


@dataclass
class ForwardOut:
    """Response tensors of a micro-batch, left-padded to (B, T) (see the module docstring)."""

    logprobs_BT: torch.Tensor  # differentiable log pi_theta of the recorded tokens
    entropy_BT: torch.Tensor  # detached per-token entropy
    mask_BT: torch.Tensor  # 1.0 on response tokens
    old_logprobs_BT: torch.Tensor
    teacher_logprobs_BT: torch.Tensor
    rewards_B: torch.Tensor
    has_reward_B: torch.Tensor
    has_teacher_B: torch.Tensor
    topk_student_BTK: torch.Tensor | None = None  # student log-probs over the teacher's top-k ids
    topk_teacher_BTK: torch.Tensor | None = None
    student_BT: torch.Tensor | None = None  # log pi_theta at T = 1 (detached) when T != 1
    repeat_BT: torch.Tensor | None = None  # 1 on tokens repeating their answer's phrase

    def loss_batch(self) -> LossBatch:
        """These tensors as the objectives' input (losses.LossBatch)."""
        return LossBatch(
            logprobs_BT=self.logprobs_BT,
            old_logprobs_BT=self.old_logprobs_BT,
            mask_BT=self.mask_BT,
            rewards_B=self.rewards_B,
            has_reward_B=self.has_reward_B,
            teacher_logprobs_BT=self.teacher_logprobs_BT,
            has_teacher_B=self.has_teacher_B,
            entropy_BT=self.entropy_BT,
            topk_teacher_logprobs_BTK=self.topk_teacher_BTK,
            topk_student_logprobs_BTK=self.topk_student_BTK,
            student_logprobs_BT=self.student_BT,
            repeat_BT=self.repeat_BT,
        )


def _left_pad(row: Sequence[Any], width: int, fill: Any) -> list[Any]:
    """`row` right-aligned in `width` entries, `fill` on the left."""
    return [fill] * (width - len(row)) + list(row)


def response_logprobs(
    model: Any,
    items: Sequence[TrainItem],
    device: torch.device | str,
    repeat_ngram: int = 0,
    *,
    allowed: Callable[[Sequence[TrainItem], int, int, torch.device], torch.Tensor | None]
    | None = None,
    stop_ids: Sequence[int] = (),
) -> ForwardOut:
    """One forward pass over prompt+response; log-softmax at each item's sampling temperature
    (the behaviour convention of the serving backend), gathered at the response tokens.
    `repeat_ngram` > 0 also flags the tokens that repeat a phrase of that many tokens said
    earlier in their answer (`repeats.repeat_flags`). `allowed(items, T, V, device)` gives
    the (B, T, V) allowed tokens of constrained items (`GrammarReplay.allowed_BTV`) or None;
    the sampling distribution is masked by it. With `stop_ids` (the end-of-turn tokens) the
    teacher's top-k becomes one bin, "stop here" (`stop_bins`)."""
    dev = torch.device(device)
    f32 = torch.float32
    L = max(it.tokens for it in items)
    T = max(len(it.response_ids) for it in items)
    seqs = [it.prompt_ids + it.response_ids for it in items]
    ids_BL = torch.tensor(
        [_left_pad(s, L, PAD_ID) for s in seqs], dtype=torch.long, device=dev
    )  # (B, L)
    seq_len_B = torch.tensor([len(s) for s in seqs], dtype=torch.long, device=dev)  # (B,)
    resp_len_B = torch.tensor([len(it.response_ids) for it in items], device=dev)  # (B,)
    attn_BL = (torch.arange(L, device=dev) >= L - seq_len_B[:, None]).long()  # (B, L)
    pos_BL = (attn_BL.cumsum(-1) - 1).clamp(min=0)  # (B, L); 0.. from the first real token
    logits = model(
        input_ids=ids_BL,
        attention_mask=attn_BL,
        position_ids=pos_BL,
        use_cache=False,  # training: no KV cache to build
        logits_to_keep=torch.arange(L - T - 1, L - 1, device=dev),  # predict the last T
    ).logits  # (B, T, V)
    if logits.shape[1] != T:  # a model (or transformers < 4.50) that ignores logits_to_keep
        logits = logits[:, L - T - 1 : L - 1]
    temps = [it.temperature for it in items]
    temp_B11 = torch.tensor(temps, dtype=f32, device=dev)[:, None, None]
    # bf16/fp32 logits / fp32 temperature -> one float32 (B, T, V) tensor (type promotion)
    z_BTV = logits / temp_B11  # (B, T, V)
    target_BT = ids_BL[:, L - T :]  # (B, T); padding ids where a response is shorter
    # The teacher is scored at temperature 1 (every backend's `score`): the student side of
    # the OPD gap and of the top-k KL is taken at temperature 1 too (losses.opd_token_advantages).
    plain = all(t == 1.0 for t in temps)
    unit_BTV = z_BTV if plain else logits.float()  # (B, T, V) at temperature 1, unmasked
    del logits
    allowed_BTV = None if allowed is None else allowed(items, T, z_BTV.shape[-1], dev)
    if allowed_BTV is not None:  # the constrained sampler's distribution (grammar_replay.py)
        z_BTV = z_BTV.masked_fill(~allowed_BTV, float("-inf"))  # (B, T, V)
    lse_BT = torch.logsumexp(z_BTV, dim=-1)  # (B, T)
    logprobs_BT = z_BTV.gather(-1, target_BT[..., None]).squeeze(-1) - lse_BT  # (B, T)
    same = plain and allowed_BTV is None  # unit_BTV is z_BTV
    unit_lse_BT = lse_BT if same else torch.logsumexp(unit_BTV, dim=-1)  # (B, T)
    student_BT = None  # at temperature 1 the behaviour log-probs are the student's side
    if not plain:
        with torch.no_grad():
            unit_BT = unit_BTV.gather(-1, target_BT[..., None]).squeeze(-1)  # (B, T)
            student_BT = unit_BT - unit_lse_BT  # (B, T)
    with torch.no_grad():
        # H = sum_v -p_v ln p_v, in place in one transient (B, T, V) buffer; as exact as
        # -sum(exp(logp) * logp) (lse - sum(p z) loses ~1e-4 to cancellation)
        probs_BTV = torch.softmax(z_BTV, dim=-1)  # (B, T, V)
        entropy_BT = torch.special.entr(probs_BTV, out=probs_BTV).sum(-1)  # (B, T)
        del probs_BTV
    mask_BT = (torch.arange(T, device=dev) >= T - resp_len_B[:, None]).to(f32)  # (B, T)
    if any(it.span is not None for it in items):  # response positions [a, b) alone train
        starts = [T - len(it.response_ids) for it in items]
        spans = [it.span or (0, len(it.response_ids)) for it in items]
        lo_B = torch.tensor([s + a for s, (a, _) in zip(starts, spans, strict=True)], device=dev)
        hi_B = torch.tensor([s + b for s, (_, b) in zip(starts, spans, strict=True)], device=dev)
        col_T = torch.arange(T, device=dev)  # (T,)
        in_span_BT = (col_T >= lo_B[:, None]) & (col_T < hi_B[:, None])  # (B, T)
        mask_BT = mask_BT * in_span_BT.to(f32)  # (B, T)
    old = [_left_pad(it.old_logprobs, T, 0.0) for it in items]
    old_BT = torch.tensor(old, dtype=f32, device=dev)  # (B, T)
    if any(it.demonstration for it in items):  # no behaviour log-probs: the policy's own now
        demo_B = torch.tensor([it.demonstration for it in items], device=dev)  # (B,)
        old_BT = torch.where(demo_B[:, None], logprobs_BT.detach(), old_BT)  # (B, T)
    teacher = [_left_pad(it.teacher_logprobs or [], T, 0.0) for it in items]
    teacher_BT = torch.tensor(teacher, dtype=f32, device=dev)  # (B, T)
    K = max((len(it.teacher_topk_ids[0]) for it in items if it.teacher_topk_ids), default=0)
    student_k = teacher_k = None
    if K:
        ids = [_left_pad(it.teacher_topk_ids or [], T, [PAD_ID] * K) for it in items]
        ids_BTK = torch.tensor(ids, dtype=torch.long, device=dev)  # (B, T, K)
        student_k = unit_BTV.gather(-1, ids_BTK) - unit_lse_BT[..., None]  # (B, T, K)
        lps = [_left_pad(it.teacher_topk_logprobs or [], T, [0.0] * K) for it in items]
        teacher_k = torch.tensor(lps, dtype=f32, device=dev)  # (B, T, K)
        if stop_ids:
            stop_BT = _logprob_of_any(unit_BTV, unit_lse_BT, stop_ids)  # (B, T)
            student_k, teacher_k = stop_bins(stop_BT, ids_BTK, teacher_k, stop_ids)
    return ForwardOut(
        logprobs_BT=logprobs_BT,
        entropy_BT=entropy_BT,
        mask_BT=mask_BT,
        old_logprobs_BT=old_BT,
        teacher_logprobs_BT=teacher_BT,
        rewards_B=torch.tensor([it.reward for it in items], dtype=f32, device=dev),
        has_reward_B=torch.tensor([it.has_reward for it in items], dtype=torch.bool, device=dev),
        has_teacher_B=torch.tensor(
            [it.teacher_logprobs is not None or it.teacher_topk_ids is not None for it in items],
            dtype=torch.bool,
            device=dev,
        ),
        topk_student_BTK=student_k,
        topk_teacher_BTK=teacher_k,
        student_BT=student_BT,
        repeat_BT=_repeats(items, T, repeat_ngram, dev),
    )


def _logprob_of_any(
    unit_BTV: torch.Tensor, lse_BT: torch.Tensor, ids: Sequence[int]
) -> torch.Tensor:
    """log pi(any of `ids`) at each position, (B, T), differentiable."""
    idx = torch.tensor(sorted(set(ids)), dtype=torch.long, device=unit_BTV.device)
    return torch.logsumexp(unit_BTV.index_select(-1, idx), dim=-1) - lse_BT  # (B, T)


def stop_bins(
    student_stop_BT: torch.Tensor,
    topk_ids_BTK: torch.Tensor,
    topk_teacher_BTK: torch.Tensor,
    stop_ids: Sequence[int],
) -> tuple[torch.Tensor, torch.Tensor]:
    """The teacher term of `combine-stop`: one bin, "stop here", as (B, T, 1) student and
    target log-probs for the top-k KL (`losses.topk_reverse_kl`, whose tail bin is then "go
    on").

    The target is the teacher's log-prob of ending where the teacher has an end token in its
    top-k and gives it more than the student does; elsewhere it is the student's own (a KL
    of 0 with a gradient of 0: no pull). So the hint raises the end of the answer where the
    teacher would have stopped and moves no other token's share: on long answers the
    sampled-token gap pushed down every token after the point where the teacher wanted to
    stop, and 96-token answers turned into loops (docs/benchmarks/learning.md)."""
    stop = torch.tensor(sorted(set(stop_ids)), device=topk_ids_BTK.device)
    is_stop_BTK = torch.isin(topk_ids_BTK, stop)  # (B, T, K)
    masked_BTK = topk_teacher_BTK.masked_fill(~is_stop_BTK, float("-inf"))  # (B, T, K)
    teacher_BT = torch.logsumexp(masked_BTK, dim=-1)  # (B, T); -inf where no end token
    own_BT = student_stop_BT.detach()  # (B, T)
    target_BT = torch.where(teacher_BT > own_BT, teacher_BT, own_BT)  # (B, T)
    return student_stop_BT[..., None], target_BT[..., None]  # (B, T, 1) each


def _repeats(
    items: Sequence[TrainItem], width: int, n: int, dev: torch.device
) -> torch.Tensor | None:
    """(B, T) 1.0 where a response token repeats an earlier phrase of n tokens; None if n <= 0."""
    if n <= 0:
        return None
    rows = [_left_pad(repeat_flags(it.response_ids, n), width, False) for it in items]
    return torch.tensor(rows, dtype=torch.float32, device=dev)  # (B, T)
