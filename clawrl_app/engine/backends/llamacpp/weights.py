"""The weights the llama.cpp backend serves: an F16 copy of a quantized GGUF, made once.

llama.cpp's quantized matrix kernels also quantize the activations, which moves the served
log-probs ~0.1 nat per token away from what the float32 trainer computes on the same
(dequantized) weights; on F16 weights the gap is a few thousandths at about the same decode
speed on a small model (README, "Serving on a CPU"). The copy is written by llama.cpp's own
quantizer (dequantize, store F16), atomically, 0600, and reused while its source file is
unchanged.
"""

from __future__ import annotations

import ctypes
import json
import os
from collections.abc import Callable
from pathlib import Path

from clawrl_app.engine.backends.llamacpp.runtime import LlamaCppError, llama_cpp_module

MOSTLY_F16 = 1  # llama_ftype LLAMA_FTYPE_MOSTLY_F16


def _fingerprint(source: Path) -> dict[str, object]:
    st = source.stat()
    return {"source": str(source), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def f16_copy(source: Path, dest: Path, progress: Callable[[str], None] | None = None) -> Path:
    """`dest`: `source` with every quantized matrix stored as F16 (made when missing/stale)."""
    meta = dest.with_suffix(".json")
    want = _fingerprint(source)
    try:
        if dest.is_file() and json.loads(meta.read_text(encoding="utf-8")) == want:
            return dest
    except (OSError, ValueError):
        pass
    if progress is not None:
        size = source.stat().st_size / 1e6
        progress(f"writing an F16 copy of {source.name} ({size:.0f} MB) for llama.cpp (once)")
    lc = llama_cpp_module()
    dest.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    params = lc.llama_model_quantize_default_params()
    params.ftype = MOSTLY_F16
    params.allow_requantize = True
    params.nthread = max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1)
    try:
        rc = lc.llama_model_quantize(str(source).encode(), str(tmp).encode(), ctypes.byref(params))
        if rc != 0:
            raise LlamaCppError(f"llama.cpp could not write an F16 copy of {source} (code {rc})")
        os.chmod(tmp, 0o600)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    meta.write_text(json.dumps(want), encoding="utf-8")
    os.chmod(meta, 0o600)
    return dest
