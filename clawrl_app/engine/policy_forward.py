"""Per-token log-probs of recorded responses under the policy being trained (torch)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from clawrl_app.engine.train_data import TrainItem


@dataclass
class ForwardOut:
    """Right-padded response tensors for a micro-batch."""

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


def response_logprobs(
    model: Any, items: Sequence[TrainItem], device: torch.device | str
) -> ForwardOut:
    """One forward pass over prompt+response; log-softmax at each item's sampling temperature
    (the behaviour convention of the serving backend), gathered at the response tokens."""
    seqs = [it.prompt_ids + it.response_ids for it in items]
    L = max(len(s) for s in seqs)
    T = max(len(it.response_ids) for it in items)
    B = len(items)
    ids_BL = torch.zeros(B, L, dtype=torch.long)
    attn_BL = torch.zeros(B, L, dtype=torch.long)
    for b, s in enumerate(seqs):
        ids_BL[b, : len(s)] = torch.tensor(s)
        attn_BL[b, : len(s)] = 1
    logits_BLV = model(input_ids=ids_BL.to(device), attention_mask=attn_BL.to(device)).logits
    entropy_BT = torch.zeros(B, T)
    rows = []
    K = max((len(it.teacher_topk_ids[0]) for it in items if it.teacher_topk_ids), default=0)
    student_k: list[torch.Tensor] = []
    for b, it in enumerate(items):
        p, r = len(it.prompt_ids), len(it.response_ids)
        logits_TV = logits_BLV[b, p - 1 : p - 1 + r].float() / it.temperature  # (r, V)
        logp_TV = torch.log_softmax(logits_TV, dim=-1)  # (r, V)
        target_T1 = torch.tensor(it.response_ids, device=logp_TV.device).unsqueeze(-1)  # (r, 1)
        rows.append(torch.nn.functional.pad(logp_TV.gather(-1, target_T1).squeeze(-1), (0, T - r)))
        if K:
            ids_TK = torch.zeros(T, K, dtype=torch.long, device=logp_TV.device)
            if it.teacher_topk_ids:
                ids_TK[:r] = torch.tensor(it.teacher_topk_ids, device=logp_TV.device)
            gathered_rK = logp_TV.gather(-1, ids_TK[:r])  # (r, K)
            student_k.append(torch.nn.functional.pad(gathered_rK, (0, 0, 0, T - r)))  # (T, K)
        with torch.no_grad():
            entropy_BT[b, :r] = -(logp_TV.exp() * logp_TV).sum(-1).cpu()  # (r,)
    logprobs_BT = torch.stack(rows)  # (B, T)
    mask_BT = torch.zeros(B, T)
    old_BT = torch.zeros(B, T)
    teacher_BT = torch.zeros(B, T)
    for b, it in enumerate(items):
        r = len(it.response_ids)
        mask_BT[b, :r] = 1.0
        old_BT[b, :r] = torch.tensor(it.old_logprobs)
        if it.teacher_logprobs is not None:
            teacher_BT[b, :r] = torch.tensor(it.teacher_logprobs)
    dev = logprobs_BT.device
    teacher_k = None
    if K:
        teacher_k = torch.zeros(B, T, K)
        for b, it in enumerate(items):
            if it.teacher_topk_logprobs:
                teacher_k[b, : len(it.response_ids)] = torch.tensor(it.teacher_topk_logprobs)
    return ForwardOut(
        logprobs_BT=logprobs_BT,
        entropy_BT=entropy_BT.to(dev),
        mask_BT=mask_BT.to(dev),
        old_logprobs_BT=old_BT.to(dev),
        teacher_logprobs_BT=teacher_BT.to(dev),
        rewards_B=torch.tensor([it.reward for it in items], device=dev),
        has_reward_B=torch.tensor([it.has_reward for it in items], device=dev),
        has_teacher_B=torch.tensor(
            [it.teacher_logprobs is not None or it.teacher_topk_ids is not None for it in items],
            device=dev,
        ),
        topk_student_BTK=torch.stack(student_k) if K else None,
        topk_teacher_BTK=teacher_k.to(dev) if teacher_k is not None else None,
    )
