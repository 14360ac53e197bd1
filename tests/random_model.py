"""A randomly initialised Llama-architecture model of a chosen size, built without downloads.

Shared by `tests/test_gpu.py` and `bench/gpu.py` (which imports it through `sys.path`). The
tokenizer and chat template come from a model directory the caller already has (the embedded
SmolLM2 one), so the vocabulary, special tokens and template are real; only the weights are
random. Shapes follow common Llama practice: head_dim 64 (128 from a hidden size of 2048 up),
a quarter as many KV heads as query heads, an MLP of about 8/3 x hidden, tied embeddings, and
the width/depth pair whose aspect ratio is closest to that of well-known models of the size.
"""

from __future__ import annotations

import json
import math
import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

MARKER = "clawrl_random_model.json"
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmb]?)\s*$", re.IGNORECASE)
_UNIT = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9}
# hidden / layers of known models: ~20 at 135M (SmolLM2), ~64 at 1.5B, 128 at 7-8B (Llama)
_ASPECT = ((1.5e8, 24.0), (1.5e9, 64.0), (7e9, 128.0))


def parse_size(text: str) -> int:
    """Parameter count from `30m`, `0.5b`, `1.5B`, `135M`, `2000000`; ValueError otherwise."""
    m = _SIZE.match(text)
    if m is None:
        raise ValueError(f"model size {text!r}: use a number with k, m or b (e.g. 50m, 1.5b)")
    n = int(float(m.group(1)) * _UNIT[m.group(2).lower()])
    if n <= 0:
        raise ValueError(f"model size {text!r} must be positive")
    return n


@dataclass(frozen=True)
class LlamaShape:
    """The numbers that make a Llama model of a given size."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int

    @property
    def params(self) -> int:
        """Parameter count (tied embeddings, gated MLP, two RMSNorms per layer, final norm)."""
        h = self.hidden
        attn = 2 * h * self.heads * self.head_dim + 2 * h * self.kv_heads * self.head_dim
        per_layer = attn + 3 * h * self.intermediate + 2 * h
        return self.vocab * h + self.layers * per_layer + h


def _target_aspect(params: int) -> float:
    """hidden/layers of well-known models around this size (log-linear between anchors)."""
    if params <= _ASPECT[0][0]:
        return _ASPECT[0][1]
    for (p0, a0), (p1, a1) in zip(_ASPECT, _ASPECT[1:], strict=False):
        if params <= p1:
            f = math.log(params / p0) / math.log(p1 / p0)
            return a0 * (a1 / a0) ** f
    return _ASPECT[-1][1]


def _shape_for_hidden(hidden: int, layers: int, vocab: int) -> LlamaShape:
    head_dim = 128 if hidden >= 2048 else 64
    heads = max(1, hidden // head_dim)
    kv = max(d for d in range(1, heads + 1) if heads % d == 0 and d <= max(1, heads // 4))
    inter = 64 * math.ceil(hidden * 8 / 3 / 64)
    return LlamaShape(hidden, layers, heads, kv, head_dim, inter, vocab)


def llama_shape(params: int, vocab: int) -> LlamaShape:
    """The width/depth closest in aspect ratio to known models that lands near `params`."""
    candidates = []
    for hidden in [*range(128, 2048, 128), *range(2048, 8192 + 1, 512)]:
        probe = _shape_for_hidden(hidden, 1, vocab)
        per_layer = probe.params - _shape_for_hidden(hidden, 0, vocab).params
        layers = round((params - vocab * hidden - hidden) / per_layer)
        if layers >= 2:
            candidates.append(_shape_for_hidden(hidden, layers, vocab))
    if not candidates:  # smaller than the embeddings allow: the narrowest 2-layer model
        return _shape_for_hidden(128, 2, vocab)
    aspect = _target_aspect(params)
    return min(candidates, key=lambda s: abs(math.log(s.hidden / s.layers / aspect)))


def llama_config(shape: LlamaShape, tokenizer: Any, context: int = 8192) -> Any:
    """A `LlamaConfig` for `shape` with the tokenizer's special token ids."""
    from transformers import LlamaConfig

    eos = tokenizer.convert_tokens_to_ids(tokenizer.eos_token)
    bos = tokenizer.convert_tokens_to_ids(tokenizer.bos_token) if tokenizer.bos_token else eos
    return LlamaConfig(
        vocab_size=shape.vocab,
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        head_dim=shape.head_dim,
        max_position_embeddings=context,
        tie_word_embeddings=True,
        bos_token_id=bos,
        eos_token_id=eos,
        pad_token_id=eos,
    )


def random_llama(config: Any, device: str, dtype: torch.dtype, seed: int = 0) -> Any:
    """The model with random weights, initialised directly on `device` in `dtype`, eval mode."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    with torch.device(device):  # no CPU round trip: a 1.5B model initialises on the GPU
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model.eval()


def default_dtype(device: str) -> torch.dtype:
    """bf16 on CUDA (what serving uses there), float32 on the CPU."""
    return torch.bfloat16 if device.startswith("cuda") else torch.float32


def save_random_llama(
    out: Path,
    params: int,
    tokenizer_dir: Path,
    *,
    device: str = "cpu",
    dtype: torch.dtype | None = None,
    seed: int = 0,
    shape: LlamaShape | None = None,
    progress: bool = False,
) -> LlamaShape:
    """Build and save a random Llama model of about `params` parameters into `out`
    (safetensors + tokenizer + chat template); returns its shape."""
    from transformers import AutoTokenizer

    from clawrl_app.models import CHATML_TEMPLATE

    def say(msg: str) -> None:
        if progress:
            print(f"[random-model] {msg}", file=sys.stderr, flush=True)

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir), local_files_only=True)
    if not getattr(tokenizer, "chat_template", None):
        tokenizer.chat_template = CHATML_TEMPLATE
    shape = shape or llama_shape(params, len(tokenizer))
    dtype = dtype or default_dtype(device)
    say(
        f"building {shape.params / 1e6:.1f}M parameters (hidden {shape.hidden}, "
        f"{shape.layers} layers, {shape.heads}/{shape.kv_heads} heads) on {device}, {dtype}"
    )
    model = random_llama(llama_config(shape, tokenizer), device, dtype, seed)
    out.mkdir(parents=True, exist_ok=True)
    say(f"saving safetensors into {out}")
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    meta = {"shape": asdict(shape), "params": shape.params, "seed": seed, "dtype": str(dtype)}
    (out / MARKER).write_text(json.dumps(meta, indent=1))
    del model
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return shape
