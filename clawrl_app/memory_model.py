"""How much memory a model needs to serve and to train (pure arithmetic, no I/O, no torch).

Deliberately simple estimates that `hardware.plan()` checks against each device and that
`clawrl-app doctor` prints term by term: 16-bit weights and a KV cache for one full context to
serve; to train, what each rank of the launch really holds (`train_need`): the trainer loads
the model in bfloat16 on CUDA and float32 on the CPU and trains with torch.optim.AdamW, whose
m and v take the parameter's dtype (no float32 master copy), so full fine-tuning holds
4 x dtype bytes per parameter (`model_state_bytes`); one trainer device holds all of it, DDP a
full copy per GPU plus its gradient buckets, FSDP a 1/n shard plus the units it gathers
(`train_sharding` says which launch); plus the activations of one micro-batch of
`TRAIN_TOKENS` tokens with or without gradient checkpointing (derived in `activation_bytes`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

GIB = 1024**3
QLORA_BYTES = 0.55  # NF4 base: 0.5 bytes/param + quantisation constants + bf16 norms
PARAM_COPIES = 4  # full fine-tuning: weights, grads, AdamW m and v, all in the model's dtype
LORA_STATE = 0.02  # adapter + its grads + AdamW states, as a fraction of the bf16 weights
ADAPTER_BYTES = 4  # peft keeps the LoRA weights in float32, also on a 16-bit base
TRAIN_TOKENS = 4096  # padded tokens of one micro-batch (train.token_budget's default)
LAYER_ACTS = 24  # hidden-sized tensors one decoder layer keeps per token for backward
LOGIT_ROWS = 1  # float32 vocab-sized rows per micro-batch token at the loss's peak
MIB = 1024**2
PREFIX_CONTEXTS = 4  # full contexts of KV the torch backend's prefix cache holds by default
PREFIX_SHARE = 0.25  # ... but at most this share of the memory the plan leaves spare

TrainMode = Literal["lora", "qlora", "full"]
TrainSharding = Literal["none", "ddp", "fsdp"]


class PlanError(ValueError):
    """No workable layout; the message gives the numbers and what to change."""


# (params_b, layers, hidden, kv_heads, head_dim, vocab, tied embeddings) of well-known
# dense models.
_ANCHORS = (
    (0.135, 30, 576, 3, 64, 49152, True),  # SmolLM2-135M
    (0.5, 24, 896, 2, 64, 151936, True),  # Qwen2.5-0.5B
    (1.7, 28, 2048, 8, 128, 151936, True),  # Qwen3-1.7B
    (4.0, 36, 2560, 8, 128, 151936, True),  # Qwen3-4B
    (8.0, 36, 4096, 8, 128, 151936, False),  # Qwen3-8B
    (14.0, 40, 5120, 8, 128, 151936, False),  # Qwen3-14B
    (32.0, 64, 5120, 8, 128, 151936, False),  # Qwen3-32B
    (70.0, 80, 8192, 8, 128, 128256, False),  # Llama-3-70B
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
    tied_embeddings: bool = False
    """The LM head shares the input embeddings' matrix (one vocab x hidden, not two)."""

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
        return cls(name, params / 1e9, layers, hidden, kv_heads, head_dim, context, vocab, tied)

    @classmethod
    def estimate(cls, name: str, params_b: float, context_length: int = 32768) -> ModelInfo:
        """Plausible architecture for a size: the nearest well-known model, depth scaled."""
        if params_b <= 0:
            raise PlanError(f"{name}: model size must be positive, got {params_b}B.")
        anchor = min(_ANCHORS, key=lambda a: abs(math.log(a[0] / params_b)))
        size, layers, hidden, kv_heads, head_dim, vocab, tied = anchor
        depth = max(1, round(layers * params_b / size))
        return cls(name, params_b, depth, hidden, kv_heads, head_dim, context_length, vocab, tied)

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        """K and V of every layer for one token."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * dtype_bytes

    @property
    def embedding_params(self) -> int:
        """Input embeddings and LM head (one matrix when tied)."""
        return self.vocab_size * self.hidden_size * (1 if self.tied_embeddings else 2)

    @property
    def layer_params(self) -> float:
        """One decoder layer's parameters: what the embeddings leave, over the layers."""
        return max(0.0, self.params_b * 1e9 - self.embedding_params) / self.num_layers


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
    """The terms: one line for serving; one term per line for the trainer."""
    launch: str = ""
    """How the role is launched, for the trainer: "FSDP over 4 GPUs, bf16" and the like."""


def serve_need(model: ModelInfo, tp: int, dtype: int, overhead: float) -> Need:
    """Weights and the KV cache of one full context, split over `tp` cards, plus overhead."""
    weights = model.params_b * 1e9 * dtype / GIB / tp
    kv = model.kv_bytes_per_token(dtype) * model.context_length / GIB / tp
    text = f"weights {weights:.1f} + KV of one {model.context_length}-token context {kv:.1f}"
    return Need(weights + kv + overhead, text + (f" + overhead {overhead:.1f}" if overhead else ""))


def train_sharding(mode: TrainMode, n_train_devices: int) -> TrainSharding:
    """How the trainer is launched on `n_train_devices`: one device ("none"); over several
    GPUs LoRA and QLoRA replicate the frozen base and average the adapter's gradients
    ("ddp": it fits wherever one copy fits), full fine-tuning shards weights, grads and AdamW
    ("fsdp": a full copy per GPU would need 5 x the weights)."""
    if n_train_devices < 1:
        raise ValueError(f"a trainer needs a device, got {n_train_devices}")
    if n_train_devices == 1:
        return "none"
    return "fsdp" if mode == "full" else "ddp"


def model_state_bytes(
    params_total: float,
    params_trainable: float,
    dtype_bytes: float,
    sharding: TrainSharding,
    n: int,
    trainable_dtype_bytes: float | None = None,
) -> float:
    """Bytes one rank holds for the model, its gradients and AdamW; no activations, no
    per-process overhead, and under FSDP not the units it gathers (`fsdp_gathered_bytes`).

    The frozen parameters (`params_total - params_trainable`) take `dtype_bytes` each; a
    trainable one PARAM_COPIES = 4 x `trainable_dtype_bytes` (default `dtype_bytes`): its
    weight, its gradient and AdamW's m and v, which torch.optim.AdamW keeps in the
    parameter's dtype (no float32 master copy). Per launch:

    - "none" (n = 1): all of it on the one device;
    - "ddp": every rank holds all of it, plus DDP's gradient buckets, a second copy of the
      trainable gradients (`params_trainable x trainable_dtype_bytes`);
    - "fsdp": weights, grads and AdamW sharded evenly over the n ranks.

    Full fine-tuning of 8e9 parameters in bf16: 64e9 B (59.6 GiB) on one device, 80e9 B
    (74.5 GiB) per DDP rank, 16e9 B (14.9 GiB) per rank of FSDP over 4.
    """
    if n < 1 or (sharding == "none" and n != 1):
        raise ValueError(f"{sharding} launch over {n} ranks")
    trained_bytes = dtype_bytes if trainable_dtype_bytes is None else trainable_dtype_bytes
    frozen = (params_total - params_trainable) * dtype_bytes
    trained = params_trainable * trained_bytes * PARAM_COPIES
    if sharding == "fsdp":
        return (frozen + trained) / n
    buckets = params_trainable * trained_bytes if sharding == "ddp" else 0.0
    return frozen + trained + buckets


def fsdp_gathered_bytes(model: ModelInfo, dtype_bytes: float) -> float:
    """Bytes FSDP holds unsharded at once beside its shards, weights and grads in the model's
    dtype: the root unit (embeddings, LM head, final norm: gathered from the forward to the
    end of the backward) plus the decoder layer being computed.

    Assumes one FSDP unit per decoder layer (transformer-based auto wrap); with accelerate's
    NO_WRAP the whole model is one unit, gathered whole, and this estimate is far too low.
    """
    return (model.embedding_params + model.layer_params) * dtype_bytes * 2


def lora_params(params: float) -> float:
    """Parameters of the LoRA adapter: LORA_STATE of the bf16 weights' bytes hold the
    adapter, its grads and AdamW's m and v, each ADAPTER_BYTES per parameter."""
    return params * 2 * LORA_STATE / (PARAM_COPIES * ADAPTER_BYTES)


def dtype_name(dtype_bytes: int) -> str:
    """What the trainer loads its weights in: bf16 on CUDA, fp32 on the CPU."""
    return {2: "bf16", 4: "fp32"}.get(dtype_bytes, f"{8 * dtype_bytes}-bit")


def launch_name(sharding: TrainSharding, n: int) -> str:
    """The trainer's launch in words, as `doctor` shows it."""
    if sharding == "fsdp":
        return f"FSDP over {n} GPUs"
    if sharding == "ddp":
        return f"DDP over {n} GPUs: a full copy per GPU"
    return "one device"


def train_need(
    model: ModelInfo,
    mode: TrainMode,
    n: int,
    dtype: int,
    overhead: float,
    checkpointing: bool,
    tokens: int = TRAIN_TOKENS,
    sharding: TrainSharding | None = None,
) -> Need:
    """What each rank of a trainer launched on `n` devices holds (`sharding`, by default
    `train_sharding(mode, n)`), weights in `dtype` bytes: model, grads and AdamW
    (`model_state_bytes`), DDP's buckets or FSDP's gathered units, the activations of one
    micro-batch of `tokens` tokens (never sharded), and the per-process overhead."""
    sharding = sharding or train_sharding(mode, n)
    params, kind = model.params_b * 1e9, dtype_name(dtype)
    if mode == "full":
        trainable, frozen_bytes, trained_bytes = params, float(dtype), float(dtype)
    else:  # a frozen base (bf16/fp32, or NF4) and a float32 adapter
        trainable, trained_bytes = lora_params(params), float(ADAPTER_BYTES)
        frozen_bytes = QLORA_BYTES if mode == "qlora" else float(dtype)
    total = params if mode == "full" else params + trainable
    state = model_state_bytes(total, trainable, frozen_bytes, sharding, n, trained_bytes) / GIB
    buckets = trainable * trained_bytes / GIB if sharding == "ddp" else 0.0
    share = f", sharded over {n}" if sharding == "fsdp" else ""
    terms: list[tuple[str, float]] = []
    if mode == "full":
        copies = f"{PARAM_COPIES * dtype} B/param in {kind}{share}"
        terms.append((f"weights+grads+AdamW ({copies})", state - buckets))
    else:
        base = params * frozen_bytes / GIB / (n if sharding == "fsdp" else 1)
        frozen = f"({kind}, frozen{share})" if mode == "lora" else f"(NF4{share})"
        terms.append((f"{'4-bit ' if mode == 'qlora' else ''}base weights {frozen}", base))
        terms.append(("LoRA adapter+grads+AdamW (fp32)", state - buckets - base))
    if buckets:
        whose = "the gradients" if mode == "full" else "the adapter's gradients"
        terms.append((f"DDP gradient buckets (a second copy of {whose})", buckets))
    if sharding == "fsdp":
        gathered = fsdp_gathered_bytes(model, dtype) / GIB
        terms.append(("gathered units (embeddings+head and one layer, weights+grads)", gathered))
    how = "checkpointed" if checkpointing else "not checkpointed"
    acts = tokens * activation_bytes(model, dtype, checkpointing) / GIB
    terms.append((f"activations of one {tokens}-token micro-batch ({how})", acts))
    if overhead:
        terms.append(("overhead", overhead))
    parts = "\n".join(f"{value:5.1f} {what}" for what, value in terms)
    launch = f"{launch_name(sharding, n)}, {kind}"
    return Need(sum(value for _, value in terms), parts, launch)


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
