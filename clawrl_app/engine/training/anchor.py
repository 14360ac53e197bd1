"""The anchor: the base model's next-token distributions on its own answers to general
prompts the user never asks, held while the policy learns from the user (`train.anchor_coef`).

Learning a request for less (brevity/dozen, 2026-11-29) pushed down most sampled tokens of
the user's answers, and the policy drifted into loops on kinds of request the user never
made: "1. Use apps that help ... 2. Use apps that help ...", "No, no no no no ..." on 7 of
48 list and advice prompts at the user's 64 tokens where the base looped on none. A KL
anchor on the user's own samples (`train.kl_coef`) held the policy still there too and it
learned nothing. The anchor here holds it elsewhere: each step also adds
`anchor_coef x KL(base || policy)` (full vocabulary, mean over positions) on a few of the
shipped anchor prompts (`assets/anchor_prompts.jsonl`: lists, advice, steps, explanations;
none of them a prompt of the guard or of the bench) with the base model's greedy answers,
generated once per trainer with the adapter off. The forward KL covers the base's whole
distribution at each position, so probability squeezed onto the most likely tokens (a
loop, in greedy decoding) is what it pulls back, while the user's prompts move freely (the
"pretraining mix" of InstructGPT's PPO-ptx, with the base's own answers for the corpus).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from clawrl_app.paths import asset_path

ANCHOR_FILE = "anchor_prompts.jsonl"
PAD_ID = 0
_NO_MASS = -1e9
"""A logit whose probability is 0 in float32 and whose log-prob difference stays finite."""


def load_anchor_prompts() -> list[str]:
    """The shipped anchor prompts."""
    lines = asset_path(ANCHOR_FILE).read_text().splitlines()
    return [str(json.loads(line)["prompt"]) for line in lines if line.strip()]


def forward_kl(base_logits_BTV: torch.Tensor, logits_BTV: torch.Tensor, mask_BT: torch.Tensor,
               free_ids: Sequence[int] = ()) -> torch.Tensor:  # fmt: skip
    """Mean over the masked positions of KL(p_base || p) over the whole vocabulary: 0 when
    the two distributions agree, large where the policy has taken mass off tokens the base
    deemed likely. Computed in float32. `free_ids` (the end-of-turn tokens) are left out of
    both distributions, which are renormalised over the rest: where to stop is the user's
    to teach, what is said before it stays the base's."""
    base, mine = base_logits_BTV.float(), logits_BTV.float()
    if free_ids:
        ids = torch.tensor(sorted(set(free_ids)), device=mine.device)
        base = base.index_fill(-1, ids, _NO_MASS)
        mine = mine.index_fill(-1, ids, _NO_MASS)
    logp_base = torch.log_softmax(base, dim=-1)
    logp = torch.log_softmax(mine, dim=-1)
    kl_BT = (logp_base.exp() * (logp_base - logp)).sum(dim=-1)  # (B, T)
    m = mask_BT.float()
    return (kl_BT * m).sum() / m.sum().clamp(min=1.0)


@dataclass(frozen=True)
class AnchorSeq:
    """One anchor prompt with the base model's answer (token ids)."""

    prompt_ids: list[int]
    answer_ids: list[int]


def _padded(seqs: Sequence[AnchorSeq], device: torch.device) -> tuple[torch.Tensor, ...]:
    """Right-padded ids, attention mask and the mask of the positions that predict an answer
    token (the last prompt position to the one before the last answer token)."""
    full = [s.prompt_ids + s.answer_ids for s in seqs]
    L = max(len(f) for f in full)
    ids_BL = torch.full((len(full), L), PAD_ID, dtype=torch.long)
    attn_BL = torch.zeros((len(full), L), dtype=torch.long)
    pred_BL = torch.zeros((len(full), L), dtype=torch.long)
    for b, (s, f) in enumerate(zip(seqs, full, strict=True)):
        ids_BL[b, : len(f)] = torch.tensor(f)
        attn_BL[b, : len(f)] = 1
        p = len(s.prompt_ids)
        pred_BL[b, p - 1 : len(f) - 1] = 1
    return ids_BL.to(device), attn_BL.to(device), pred_BL.to(device)


class Anchor:
    """The anchor sequences of one trainer and the loss on a few of them per step."""

    def __init__(self, per_step: int, max_tokens: int, free_stop: bool = False) -> None:
        self.per_step = per_step
        self.max_tokens = max_tokens
        self.free_stop = free_stop
        self.free_ids: list[int] = []
        self.seqs: list[AnchorSeq] = []
        self._next = 0

    @classmethod
    def of(cls, cfg: Any) -> Anchor:
        """The anchor a `TrainerConfig` asks for."""
        return cls(cfg.anchor_items, cfg.anchor_tokens, cfg.anchor_free_stop)

    def build(self, peft_model: Any, tokenizer: Any, device: torch.device) -> None:
        """The base model's greedy answers (adapter off) to the anchor prompts; the same on
        every rank (greedy, same weights)."""
        from clawrl_app.engine.chat.formatter import ChatFormatter, eos_token_ids

        fmt = ChatFormatter(tokenizer)
        prompts = [fmt.render([{"role": "user", "content": t}]) for t in load_anchor_prompts()]
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else PAD_ID
        width = max(len(p) for p in prompts)
        # one left-padded batch: every prompt ends at the same column
        ids_BL = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=device)
        attn_BL = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts],
                               device=device)  # fmt: skip
        was_training = peft_model.training
        peft_model.eval()
        try:
            with torch.no_grad(), peft_model.disable_adapter():
                out = peft_model.generate(
                    input_ids=ids_BL, attention_mask=attn_BL, max_new_tokens=self.max_tokens,
                    do_sample=False, pad_token_id=pad,
                )  # fmt: skip
        finally:
            peft_model.train(was_training)
        stops = set(eos_token_ids(tokenizer))
        self.free_ids = sorted(stops) if self.free_stop else []
        for p, row in zip(prompts, out[:, width:].tolist(), strict=True):
            # up to and with the first end-of-turn token (generate pads after it)
            end = next((k + 1 for k, t in enumerate(row) if t in stops), len(row))
            self.seqs.append(AnchorSeq(p, [int(t) for t in row[:end]]))

    def batch(self) -> list[AnchorSeq]:
        """The next `per_step` sequences, in turn."""
        n = len(self.seqs)
        picked = [self.seqs[(self._next + k) % n] for k in range(min(self.per_step, n))]
        self._next = (self._next + len(picked)) % max(n, 1)
        return picked

    def loss(self, model: Any, peft_model: Any, device: torch.device) -> torch.Tensor:
        """KL(base || policy) on this step's anchor sequences (`forward_kl`)."""
        ids_BL, attn_BL, pred_BL = _padded(self.batch(), device)
        with torch.no_grad(), peft_model.disable_adapter():
            base_BLV = model(input_ids=ids_BL, attention_mask=attn_BL).logits
        logits_BLV = model(input_ids=ids_BL, attention_mask=attn_BL).logits
        return forward_kl(base_BLV, logits_BLV, pred_BL, self.free_ids)


def anchor_backward(anchor: Anchor, accelerator: Any, model: Any, tokenizer: Any,
                    coef: float) -> float:  # fmt: skip
    """Backward of `coef x anchor.loss` on this rank, gradients kept local (the step's
    last micro-batch synchronises them with its own); the anchor is built on first use.
    Every rank computes the same loss, so the ranks' average is that loss's gradient.
    Returns the KL."""
    peft_model = accelerator.unwrap_model(model)
    device = accelerator.device
    if not anchor.seqs:
        anchor.build(peft_model, tokenizer, device)
    with accelerator.no_sync(model):
        kl = anchor.loss(model, peft_model, device)
        accelerator.backward(coef * kl)
    return float(kl.detach())


def base_response_logprobs(accelerator: Any, model: Any, items: Sequence[Any],
                           allowed: Any) -> torch.Tensor:  # fmt: skip
    """Log-probs of the items' responses under the base model (the adapter turned off),
    (B, T) like `response_logprobs`: the reference of the KL on the user's own samples."""
    from clawrl_app.engine.training.policy_forward import response_logprobs

    peft_model = accelerator.unwrap_model(model)
    with torch.no_grad(), peft_model.disable_adapter():
        return response_logprobs(model, items, accelerator.device, allowed=allowed).logprobs_BT
