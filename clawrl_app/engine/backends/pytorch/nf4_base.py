"""QLoRA serving: serve the base weights the 4-bit trainer actually sees.

A QLoRA trainer computes with dequantize(NF4(W)), not W. Serving the original bf16 W makes
every comparison between trainer and server unfair: on an H100 the publisher's canary saw
log-probs 1.27 apart (tolerance 0.05) and refused every checkpoint, and the first step's
importance ratios were already off (ratio_mean 1.05, clip_frac 0.36). So when the trainer
runs QLoRA, the app quantizes the base once exactly as the trainer loads it (same
`BitsAndBytesConfig`, same bitsandbytes code), dequantizes every 4-bit linear layer back
to plain weights and saves that as an ordinary model folder. Either backend serves it at
full speed (LoRA versions merge into it like into any base), and the trainer's log-probs
and the server's differ only by kernel rounding
(tests/engine/backends/pytorch/test_qlora_serving.py measures it).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

log = logging.getLogger("clawrl.nf4_base")
STAMP = "clawrl_nf4_base.json"
FORMAT = 1  # bump when the quantization recipe changes: old exports are rebuilt


def nf4_config(compute_dtype: torch.dtype) -> Any:
    """The one 4-bit recipe of the app: the trainer loads with it, the export reproduces it."""
    from transformers import BitsAndBytesConfig

    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_compute_dtype=compute_dtype,
        bnb_4bit_use_double_quant=True,
    )


def load_nf4(path: Path, device: str, compute_dtype: torch.dtype) -> Any:
    """The model at `path` with its linear layers in 4-bit NF4 on `device` (as QLoRA trains it)."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(
        str(path),
        quantization_config=nf4_config(compute_dtype),
        device_map={"": device},
        dtype=compute_dtype,
        local_files_only=True,
    )


def dequantize_linears(model: Any, dtype: torch.dtype) -> int:
    """Replace every bitsandbytes 4-bit linear layer by a plain one holding its dequantized
    weight (in place); returns how many were replaced. The model stops being 'quantized'."""
    import bitsandbytes as bnb
    from bitsandbytes.functional import dequantize_4bit

    swaps = [(n, m) for n, m in model.named_modules() if isinstance(m, bnb.nn.Linear4bit)]
    for name, module in swaps:
        weight = module.weight
        dense = torch.nn.Linear(
            module.in_features,
            module.out_features,
            bias=module.bias is not None,
            device=weight.device,
            dtype=dtype,
        )
        with torch.no_grad():
            state = weight.quant_state  # type: ignore[attr-defined]
            dense.weight.copy_(dequantize_4bit(weight.data, state).to(dtype))
            if module.bias is not None:
                dense.bias.copy_(module.bias.to(dtype))
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, child, dense)
    for attr in ("is_loaded_in_4bit", "is_quantized"):
        if hasattr(model, attr):
            setattr(model, attr, False)
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    return len(swaps)


def export_nf4_base(
    src: Path,
    dest: Path,
    *,
    device: str,
    dtype: torch.dtype,
    progress: Callable[[str], None] = lambda line: None,
) -> Path:
    """Write (once) the dequantized-NF4 copy of the model at `src` into `dest`; returns it.

    Reused while `src` is unchanged (same config and weight file sizes and mtimes)."""
    key = _source_key(src, dtype)
    stamp = dest / STAMP
    if stamp.exists():
        try:
            if json.loads(stamp.read_text()) == key:
                return dest
        except (OSError, ValueError):
            pass
    progress(f"QLoRA: quantizing {src.name} to NF4 as the trainer sees it (once) ...")
    from transformers import AutoTokenizer

    model = load_nf4(src, device, dtype)
    count = dequantize_linears(model, dtype)
    progress(f"QLoRA: {count} linear layers dequantized; saving {dest}")
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True, mode=0o700)
    model.save_pretrained(str(tmp))
    AutoTokenizer.from_pretrained(str(src), local_files_only=True).save_pretrained(str(tmp))
    (tmp / STAMP).write_text(json.dumps(key))
    for f in tmp.iterdir():
        os.chmod(f, 0o600)
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    progress("QLoRA: serving base ready")
    return dest


def _source_key(src: Path, dtype: torch.dtype) -> dict[str, Any]:
    files = sorted(p for p in src.iterdir() if p.suffix in (".json", ".safetensors", ".bin"))
    return {
        "format": FORMAT,
        "dtype": str(dtype),
        "files": [[p.name, p.stat().st_size, int(p.stat().st_mtime)] for p in files],
    }
