"""The grammar of a forced tool call, replayed on its recorded tokens (torch).

A turn asked with `tool_choice` "required" (or a named function) was sampled under a
grammar: at each step the tokens the call's JSON schema does not allow had probability 0
and the others were renormalised (`backends/grammar.py`), and the behaviour log-probs the
endpoint recorded are that masked distribution's. The policy being trained is the same
constrained sampler, so its log-probs must be taken under the same mask: this module
walks a fresh llguidance matcher along the recorded response ids and returns, for every
response position, the tokens that were allowed there.

With the mask applied before the log-softmax, a token the grammar forced (the `{"name": "`
scaffolding, closing braces, EOS after the call) has log-prob 0 under every weight, so it
contributes no gradient; only real choices (which tool, which argument text) are pushed
up or down by the advantage. Without it the trainer would compare an unmasked log-prob
with a masked behaviour log-prob: a ratio below 1 from the first update, which the PPO
clip reads as "already pushed down" and silences for negative advantages.

A turn whose ids the matcher rejects (it never should: every sampled id was allowed) is
replayed up to that point and left unmasked from there, with a warning.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch

from clawrl_app.engine.backends.grammar import GrammarCompiler, allowed_tokens
from clawrl_app.engine.training.train_data import TrainItem

log = logging.getLogger("clawrl.grammar_replay")


class GrammarReplay:
    """Allowed-token masks of forced-call items for one tokenizer (llguidance's tokenizer is
    built on first use, once)."""

    def __init__(self, hf_tokenizer: Any) -> None:
        self._compiler = GrammarCompiler(hf_tokenizer)

    def allowed_TV(self, item: TrainItem, width: int, device: torch.device) -> torch.Tensor:
        """(r, width) bool: the tokens allowed at each of `item`'s r response positions
        (all True when the item was not constrained)."""
        r = len(item.response_ids)
        out_TV = torch.ones((r, width), dtype=torch.bool, device=device)  # (r, V)
        if item.json_schema is None:
            return out_TV
        row = self._compiler.matcher(item.json_schema)
        for t, token in enumerate(item.response_ids):
            out_TV[t] = allowed_tokens(row.packed_mask(), width, device)
            if not out_TV[t, token]:  # the recorded token was not allowed: stop replaying
                log.warning(
                    "sample %s: token %d at position %d is outside its grammar; "
                    "the rest of the answer is trained unmasked",
                    item.sample_id, token, t,
                )  # fmt: skip
                out_TV[t:] = True
                break
            row.consume(token)
        return out_TV

    def allowed_BTV(
        self, items: Sequence[TrainItem], T: int, width: int, device: torch.device
    ) -> torch.Tensor | None:
        """(B, T, width) bool for a left-padded micro-batch (`policy_forward`'s layout:
        item b's response fills the last r_b columns; padding columns all True), or None
        when no item of the batch was constrained."""
        if all(it.json_schema is None for it in items):
            return None
        out_BTV = torch.ones((len(items), T, width), dtype=torch.bool, device=device)
        for b, item in enumerate(items):
            if item.json_schema is not None:
                r = len(item.response_ids)
                out_BTV[b, T - r :] = self.allowed_TV(item, width, device)
        return out_BTV
