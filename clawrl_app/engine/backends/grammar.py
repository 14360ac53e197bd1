"""Constrained decoding for the torch backend: one llguidance matcher per constrained row.

Before a row samples, `mask_logits` sets every token its grammar does not allow to -inf;
after it samples, `RowGrammar.consume` advances the matcher. Once the grammar is complete
(the JSON object closed) llguidance allows only the EOS token, so the answer ends there.

The behaviour log-probs the backend records for a constrained row are those of the
distribution it actually sampled from: the *masked* one (disallowed tokens have
probability 0, the allowed ones are renormalised). That is what the trainer's importance
ratio must divide by; a forced call's tokens are often near-certain under the mask.

Device discipline: llguidance writes its bitmask into host memory (one bit per token id);
the packed bytes are moved to the logits' device and unpacked there with torch ops, so the
mask, and every tensor made here, lives on `logits.device`. The model's logits may be wider
than the tokenizer's vocabulary (padded embedding rows): those ids are always disallowed.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import llguidance
import torch

from clawrl_app.engine.backends.base import BackendError
from clawrl_app.engine.chat.tool_constraint import grammar_of

log = logging.getLogger("clawrl.grammar")


class RowGrammar:
    """The matcher of one constrained answer (used on the worker thread only)."""

    def __init__(self, matcher: Any, vocab_size: int, eos_id: int) -> None:
        self._matcher = matcher
        self.vocab_size = vocab_size
        self.eos_id = eos_id

    def packed_mask(self) -> bytes:
        """Allowed next tokens, one bit per token id (little-endian 32-bit words).

        A matcher in an error state (it never should be: every sampled token was allowed)
        allows only EOS, so the answer ends instead of running on unconstrained."""
        if self._matcher.is_error():
            error = self._matcher.get_error()
            log.warning("grammar matcher in error state (%s): ending the answer", error)
            words = bytearray((self.vocab_size + 31) // 32 * 4)
            words[self.eos_id // 8] |= 1 << (self.eos_id % 8)
            return bytes(words)
        return bytes(self._matcher.compute_bitmask())

    def consume(self, token_id: int) -> None:
        """Advance past a sampled token (EOS after completion included)."""
        if not self._matcher.is_stopped():
            self._matcher.consume_token(token_id)


class GrammarCompiler:
    """Builds matchers for one backend; the llguidance tokenizer is built once, on first use
    (about 1-3 s for a 50k vocabulary on 2 CPU cores), then shared by every matcher."""

    def __init__(self, hf_tokenizer: Any) -> None:
        self._hf = hf_tokenizer
        self._ll: Any = None
        self._lock = threading.Lock()

    def _tokenizer(self) -> Any:
        with self._lock:
            if self._ll is None:
                import llguidance.hf

                self._ll = llguidance.hf.from_tokenizer(self._hf)
            return self._ll

    def matcher(self, schema_json: str) -> RowGrammar:
        """A fresh matcher for one answer constrained to `schema_json` (JSON schema text)."""
        tok = self._tokenizer()
        matcher = llguidance.LLMatcher(tok, grammar_of(schema_json), log_level=0)
        if matcher.is_error():
            raise BackendError(f"the answer's JSON schema does not compile: {matcher.get_error()}")
        return RowGrammar(matcher, int(tok.vocab_size), int(self._hf.eos_token_id))


def mask_logits(logits_BV: torch.Tensor, grammars: list[RowGrammar | None]) -> torch.Tensor:
    """`logits_BV` with the tokens each row's grammar forbids at -inf (rows without a
    grammar unchanged); a new tensor on the logits' device, the input is left untouched."""
    if all(g is None for g in grammars):
        return logits_BV
    dev = logits_BV.device
    width = logits_BV.shape[-1]
    allowed_BV = torch.ones(logits_BV.shape, dtype=torch.bool, device=dev)  # (B, V)
    for b, grammar in enumerate(grammars):
        if grammar is not None:
            allowed_BV[b] = allowed_tokens(grammar.packed_mask(), width, dev)
    return logits_BV.masked_fill(~allowed_BV, float("-inf"))


def allowed_tokens(packed: bytes, width: int, device: torch.device) -> torch.Tensor:
    """Unpack an llguidance bitmask into a (width,) bool tensor on `device`.

    Bit i of byte k is token 8k + i (little-endian words, least significant bit first).
    Ids past the bitmask (logits wider than the tokenizer) are disallowed."""
    host_N = torch.frombuffer(bytearray(packed), dtype=torch.uint8)  # (N,) host copy of bits
    bytes_N = host_N.to(device)  # (N,)
    shifts_8 = torch.arange(8, dtype=torch.uint8, device=device)  # (8,)
    bits_M = ((bytes_N.unsqueeze(-1) >> shifts_8) & 1).reshape(-1).bool()  # (8N,)
    allowed_V = torch.zeros(width, dtype=torch.bool, device=device)  # (V,)
    n = min(width, bits_M.shape[0])
    allowed_V[:n] = bits_M[:n]
    return allowed_V
