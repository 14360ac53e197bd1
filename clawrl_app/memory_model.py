"""How much memory a model needs to serve and to train (pure arithmetic, no I/O, no torch).

Deliberately simple estimates that `hardware.plan()` checks against each device and that
`clawrl-app doctor` prints term by term: bf16 weights, a KV cache for one full context,
16 bytes/param for full fine-tuning, a 2% LoRA state, and the activations of one micro-batch
of `TRAIN_TOKENS` tokens with or without gradient checkpointing (derived in `activation_bytes`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

GIB = 1024**3
QLORA_BYTES = 0.55  # NF4 base: 0.5 bytes/param + quantisation constants + bf16 norms
FULL_BYTES = 16  # bf16 weights 2 + grads 2 + fp32 master 4 + AdamW m and v 8
LORA_STATE = 0.02  # adapter + its grads + AdamW states, as a fraction of the bf16 weights
TRAIN_TOKENS = 4096  # padded tokens of one micro-batch (train.token_budget's default)
LAYER_ACTS = 24  # hidden-sized tensors one decoder layer keeps per token for backward
LOGIT_ROWS = 1  # float32 vocab-sized rows per micro-batch token at the loss's peak
MIB = 1024**2
PREFIX_CONTEXTS = 4  # full contexts of KV the torch backend's prefix cache holds by default
PREFIX_SHARE = 0.25  # ... but at most this share of the memory the plan leaves spare

TrainMode = Literal["lora", "qlora", "full"]


class PlanError(ValueError):
    """No workable layout; the message gives the numbers and what to change."""


# (params_b, layers, hidden, kv_heads, head_dim, vocab) of well-known dense models.
_ANCHORS = (
    (0.135, 30, 576, 3, 64, 49152),  # SmolLM2-135M
    (0.5, 24, 896, 2, 64, 151936),  # Qwen2.5-0.5B
    (1.7, 28, 2048, 8, 128, 151936),  # Qwen3-1.7B
    (4.0, 36, 2560, 8, 128, 151936),  # Qwen3-4B
    (8.0, 36, 4096, 8, 128, 151936),  # Qwen3-8B
    (14.0, 40, 5120, 8, 128, 151936),  # Qwen3-14B
    (32.0, 64, 5120, 8, 128, 151936),  # Qwen3-32B
    (70.0, 80, 8192, 8, 128, 128256),  # Llama-3-70B
)


@dataclass(frozen=True)
class ModelInfo:
    """The numbers of a policy model that decide memory: size, depth, KV shape, context."""

    name: str
    params_b: float
    num_layers: int
    hidden_size: int
    num_kv_heads: int
    head_dim: int
    context_length: int
    vocab_size: int = 32000

    @classmethod
    def from_hf_config(cls, name: str, config: Mapping[str, Any]) -> ModelInfo:
        """Count parameters from a HF `config.json` (embeddings + attention + gated MLP)."""
        cfg = config if "hidden_size" in config else config.get("text_config") or config
        try:
            hidden, layers = int(cfg["hidden_size"]), int(cfg["num_hidden_layers"])
            heads = int(cfg["num_attention_heads"])
        except (KeyError, TypeError, ValueError) as exc:
            raise PlanError(f"config of {name} lacks {exc}; cannot size the model.") from None
        kv_heads = int(cfg.get("num_key_value_heads") or heads)
        head_dim = int(cfg.get("head_dim") or hidden // heads)
        vocab = int(cfg.get("vocab_size") or 32000)
        experts = int(cfg.get("num_experts") or cfg.get("num_local_experts") or 1)
        inter = int(cfg.get("intermediate_size") or 4 * hidden)
        if experts > 1:  # MoE: every expert is resident in memory (router weights ignored)
            inter = int(cfg.get("moe_intermediate_size") or inter) * experts
        attention = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
        per_layer = attention + 3 * hidden * inter + 2 * hidden  # q,o + k,v; gate/up/down; norms
        tied = bool(cfg.get("tie_word_embeddings", config.get("tie_word_embeddings", False)))
        params = vocab * hidden * (1 if tied else 2) + layers * per_layer + hidden
        context = int(cfg.get("max_position_embeddings") or 4096)
        return cls(name, params / 1e9, layers, hidden, kv_heads, head_dim, context, vocab)

    @classmethod
    def estimate(cls, name: str, params_b: float, context_length: int = 32768) -> ModelInfo:
        """Plausible architecture for a size: the nearest well-known model, depth scaled."""
        if params_b <= 0:
            raise PlanError(f"{name}: model size must be positive, got {params_b}B.")
        anchor = min(_ANCHORS, key=lambda a: abs(math.log(a[0] / params_b)))
        size, layers, hidden, kv_heads, head_dim, vocab = anchor
        depth = max(1, round(layers * params_b / size))
        return cls(name, params_b, depth, hidden, kv_heads, head_dim, context_length, vocab)

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        """K and V of every layer for one token."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * dtype_bytes


def activation_bytes(model: ModelInfo, dtype: int, checkpointing: bool) -> int:
    """Bytes per micro-batch token that the forward keeps for backward, at the peak.

    One Llama-style decoder layer (SDPA attention, no L x L matrix kept; LoRA on every
    linear, whose rank-r intermediates are negligible) keeps, per token, in hidden-sized
    tensors h: two RMSNorms (float32 copy of the input ~2 + output 1, each) ~6; q 1, k and v
    ~0.5 (grouped KV), RoPE'd q and k ~1.3, attention output 1 and its contiguous copy for
    o_proj 1; the MLP with intermediate ~3h: gate, up, SiLU(gate) and their product 4 x 3 =
    12; the residual stream 1: about LAYER_ACTS = 24 (x dtype bytes).

    - Without checkpointing every layer keeps all of it: layers x 24 x h x dtype.
    - With checkpointing each layer keeps only its input (layers x h x dtype) and, during
      backward, one layer at a time is recomputed and holds its 24: (layers + 24) x h x dtype,
      for about one extra forward of compute.

    Both add the loss's logits: the trainer projects only response positions onto the
    vocabulary, in float32, and at the backward peak holds ~3 vocab-sized rows per response
    token (the scaled logits, their gradient, one transient); responses are typically the
    smaller part of a micro-batch (agent prompts are long), so LOGIT_ROWS = 1 row per
    micro-batch token covers responses up to a third of it.
    """
    layers = model.num_layers + LAYER_ACTS if checkpointing else model.num_layers * LAYER_ACTS
    return model.hidden_size * layers * dtype + model.vocab_size * 4 * LOGIT_ROWS


@dataclass(frozen=True)
class MemoryLine:
    """One memory check of the plan: what a role needs on a device versus what it has."""

    role: str
    device: str
    need_gib: float
    have_gib: float

    @property
    def fits(self) -> bool:
        """True when the need fits."""
        return self.need_gib <= self.have_gib


def spare_gib(memory: Sequence[MemoryLine]) -> float:
    """What the plan's memory lines leave unused on the serving device."""
    serving = next(m for m in memory if m.role == "serving")
    return serving.have_gib - sum(m.need_gib for m in memory if m.device == serving.device)


@dataclass(frozen=True)
class Need:
    """Memory a role needs, in GiB, and the terms it adds up (for `doctor`)."""

    gib: float
    parts: str


def serve_need(model: ModelInfo, tp: int, dtype: int, overhead: float) -> Need:
    """Weights and the KV cache of one full context, split over `tp` cards, plus overhead."""
    weights = model.params_b * 1e9 * dtype / GIB / tp
    kv = model.kv_bytes_per_token(dtype) * model.context_length / GIB / tp
    text = f"weights {weights:.1f} + KV of one {model.context_length}-token context {kv:.1f}"
    return Need(weights + kv + overhead, text + (f" + overhead {overhead:.1f}" if overhead else ""))


def train_need(
    model: ModelInfo,
    mode: TrainMode,
    n: int,
    dtype: int,
    overhead: float,
    checkpointing: bool,
    tokens: int = TRAIN_TOKENS,
) -> Need:
    """Weights/state of `mode` on each of `n` devices plus one micro-batch's activations."""
    params = model.params_b * 1e9
    acts = tokens * activation_bytes(model, dtype, checkpointing) / GIB
    if mode == "full":
        state = params * FULL_BYTES / GIB / n  # ZeRO-3/FSDP shards it over the trainer GPUs
        text = f"weights+grads+AdamW {state:.1f} ({FULL_BYTES} B/param over {n} device(s))"
    else:
        base = params * (QLORA_BYTES if mode == "qlora" else dtype) / GIB
        lora = params * 2 * LORA_STATE / GIB
        state = base + lora
        text = f"{'4-bit' if mode == 'qlora' else 'base'} weights {base:.1f} + LoRA {lora:.1f}"
    how = "checkpointed" if checkpointing else "not checkpointed"
    text += f" + activations {acts:.1f} ({how})"
    text += f" + overhead {overhead:.1f}" if overhead else ""
    return Need(state + acts + overhead, text)


def prefix_cache_budget(model: ModelInfo, spare_gib: float, dtype: int) -> tuple[int, str]:
    """The default bound (MiB) of the torch backend's prefix KV cache, and why: the KV of
    PREFIX_CONTEXTS full contexts (the prompts of a few agent sessions; the embedded model
    in float32: 45 KiB per token, 360 MiB per 8192-token context), at most PREFIX_SHARE of
    the memory left on the serving device once everything else is counted."""
    context = model.kv_bytes_per_token(dtype) * model.context_length
    mib = int(min(PREFIX_CONTEXTS * context, PREFIX_SHARE * max(0.0, spare_gib) * GIB) // MIB)
    return mib, (
        f"Prefix KV cache (server.prefix_cache_mb): {mib} MiB, the KV of at most "
        f"{PREFIX_CONTEXTS} full {model.context_length}-token contexts ({context / MIB:.0f} MiB "
        f"each) and at most {PREFIX_SHARE:.0%} of the {max(0.0, spare_gib):.1f} GiB left spare."
    )


# Merged LoRA serving keeps one full copy of the weights per live version: the one served,
# the one being checked before publishing, and the previous one while its answers finish.
MERGED_COPIES = 3


def merged_lora_serving(
    backend: str,
    mode: TrainMode,
    lines: Sequence[MemoryLine],
    weights_gib: float,
    bytes_per_param: int = 4,
) -> tuple[bool, MemoryLine | None, str]:
    """Whether the torch backend serves LoRA versions as merged copies of the weights
    (nothing per token, MERGED_COPIES x the weights in memory) or through forward hooks
    (lora_hooks.py; a little per token). Only float32 weights merge, when the copies fit:
    in 16-bit weights a fresh adapter's update rounds away (H100: merged canary gap 0.0585,
    hooks 0.0000). SGLang and full fine-tuning are not concerned. -> (merge, line, reason)"""
    if backend != "torch" or mode == "full" or not lines:
        return False, None, ""
    if bytes_per_param != 4:
        return (
            False,
            None,
            (
                "LoRA versions are served through forward hooks on the shared 16-bit weights "
                "(exact; merging into 16-bit weights would round a fresh adapter away)."
            ),
        )
    serving = next(line for line in lines if line.role == "serving")
    used = sum(line.need_gib for line in lines if line.device == serving.device)
    spare = max(0.0, serving.have_gib - used)
    need = MERGED_COPIES * weights_gib
    line = MemoryLine("versions", serving.device, round(need, 2), round(spare, 2))
    if line.fits:
        why = (
            f"LoRA versions are served as merged weights (base speed): {MERGED_COPIES} copies "
            f"need {need:.1f} GiB of the {spare:.1f} left on {serving.device}."
        )
        return True, line, why
    why = (
        f"LoRA versions are served through forward hooks (slower per token): merged "
        f"copies would need {need:.1f} GiB, only {spare:.1f} is left on {serving.device}."
    )
    return False, line, why
