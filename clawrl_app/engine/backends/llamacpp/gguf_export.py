"""Turn trained versions into files llama.cpp can serve next to the base GGUF.

* `lora_to_gguf`: a peft LoRA adapter folder -> a llama.cpp LoRA adapter GGUF (F32),
  loaded with `llama_adapter_lora_init` and applied with scale 1.0.
* `full_to_gguf`: a full fine-tuning checkpoint (HF safetensors) -> a complete GGUF with
  the base's metadata and tokenizer, 2-D weights in F16 and 1-D weights (norms) in F32.

Facts this relies on (llama.cpp's src/llama-adapter.cpp, llama-graph.cpp):
* llama.cpp adds `scale * B @ (A @ x)` with scale = adapter_scale * alpha / rank, where
  rank = the rows of A (ne[0] of lora_b) and alpha = `adapter.lora.alpha`; alpha 0 means
  scale = adapter_scale. Any other peft scale (rsLoRA: alpha / sqrt(r)) is folded into B.
* lora_a is stored as peft's A (r, in) and lora_b as peft's B (out, r): no transposition.
* Llama GGUFs store the Q and K projection rows of each head in interleaved rotary order
  (row 2i = HF row i, row 2i + 1 = HF row i + d/2): Q/K weights and the lora_b of
  q_proj/k_proj get that row permutation (n_head for Q, n_head_kv for K).
Files are written to a private temp file beside `out`, then moved over it (mode 0600).
"""

from __future__ import annotations

import functools
import json
import math
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np

PEFT_PREFIX = "base_model.model."
LORA_TARGETS = frozenset(
    {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
)
SUPPORTED_ARCHS = frozenset({"llama"})  # the layout facts above are checked for these only


@dataclass(frozen=True)
class _Base:
    """What an export needs to know about the base GGUF."""

    arch: str
    names: gguf.TensorNameMap
    heads: dict[gguf.MODEL_TENSOR, int]  # tensors stored with rotary-interleaved rows
    shapes: dict[str, tuple[int, ...]]  # GGUF tensor name -> numpy (HF) shape, file order
    reader: gguf.GGUFReader


def _field(reader: gguf.GGUFReader, key: str) -> Any:
    field = reader.get_field(key)
    if field is None:
        raise ValueError(f"{reader.data.filename}: no {key!r} in the GGUF metadata")
    return field.contents()


def _read_base(base_gguf: Path) -> _Base:
    """The base's layout; cached per file version (parsing the vocabulary takes ~2 s)."""
    st = base_gguf.stat()
    return _parse_base(str(base_gguf.resolve()), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=2)
def _parse_base(path: str, size: int, mtime_ns: int) -> _Base:
    reader = gguf.GGUFReader(path)  # read-only memory map
    arch = str(_field(reader, gguf.Keys.General.ARCHITECTURE))
    if arch not in SUPPORTED_ARCHS:
        raise ValueError(f"{path}: architecture {arch!r} is not supported (only llama)")
    model_arch = next(k for k, v in gguf.MODEL_ARCH_NAMES.items() if v == arch)
    n_block = int(_field(reader, gguf.Keys.LLM.BLOCK_COUNT.format(arch=arch)))
    n_head = int(_field(reader, gguf.Keys.Attention.HEAD_COUNT.format(arch=arch)))
    kv_key = gguf.Keys.Attention.HEAD_COUNT_KV.format(arch=arch)
    n_head_kv = int(_field(reader, kv_key)) if reader.get_field(kv_key) else n_head
    heads = {gguf.MODEL_TENSOR.ATTN_Q: n_head, gguf.MODEL_TENSOR.ATTN_K: n_head_kv}
    shapes = {t.name: tuple(int(d) for d in reversed(t.shape)) for t in reader.tensors}
    names = gguf.get_tensor_name_map(model_arch, n_block)
    return _Base(arch, names, heads, shapes, reader)


def rope_interleave_rows(rows: np.ndarray, n_head: int) -> np.ndarray:
    """Reorder the rows of each head from HF's rotary-half layout to llama.cpp's."""
    n = rows.shape[0]
    if n % (2 * n_head):
        raise ValueError(f"{n} rows cannot be split into {n_head} heads of even size")
    half = n // n_head // 2
    order = np.arange(n).reshape(n_head, 2, half).transpose(0, 2, 1).reshape(n)
    return rows[order]


@contextmanager
def _atomic(out: Path) -> Iterator[Path]:
    """A private temp path beside `out`, moved over `out` if the block completes."""
    fd, name = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.chmod(tmp, 0o600)
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


TensorSpec = tuple[str, tuple[int, ...], "np.dtype[Any]"]


def _write(
    path: Path,
    arch: str,
    meta: Callable[[gguf.GGUFWriter], None],
    specs: list[TensorSpec],
    produce: Callable[[str], np.ndarray],
    progress: Callable[[str], None] | None = None,
    label: str = "",
) -> None:
    """Write a GGUF one tensor at a time (only one tensor is held in memory)."""
    writer = gguf.GGUFWriter(path, arch)
    try:
        meta(writer)
        for name, shape, dtype in specs:
            writer.add_tensor_info(name, shape, dtype, math.prod(shape) * dtype.itemsize)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for i, (name, shape, dtype) in enumerate(specs, 1):
            array = np.ascontiguousarray(produce(name), dtype=dtype)
            if array.shape != shape:
                raise ValueError(f"{name}: shape {array.shape}, expected {shape}")
            writer.write_tensor_data(array)
            if progress is not None:
                progress(f"writing {label}: {i}/{len(specs)} tensors")
        writer.flush()
        for fh in writer.fout or []:
            os.fsync(fh.fileno())
    finally:
        writer.close()


# --- LoRA adapters ------------------------------------------------------------------------
def _lora_alpha(config: dict[str, Any]) -> tuple[float, bool, int]:
    """(lora_alpha, use_rslora, r) of a plain LoRA config; ValueError for anything else."""
    extras = ("use_dora", "alpha_pattern", "modules_to_save", "fan_in_fan_out", "lora_bias")
    bad = [k for k in extras if config.get(k)]
    if config.get("peft_type", "LORA") != "LORA" or config.get("bias", "none") != "none":
        bad.append(f"peft_type={config.get('peft_type')}, bias={config.get('bias')}")
    if bad or not config.get("r"):
        raise ValueError(f"unsupported LoRA adapter for llama.cpp: {bad or 'r missing'}")
    return float(config["lora_alpha"]), bool(config.get("use_rslora")), int(config["r"])


def _lora_tensors(adapter_dir: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Module name (HF, without peft's prefix) -> (A (r, in), B (out, r)) in float32."""
    from safetensors import safe_open

    pairs: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    with safe_open(str(adapter_dir / "adapter_model.safetensors"), framework="pt") as fh:
        keys = set(fh.keys())
        paired = {k.replace(".lora_A.", ".lora_B.") for k in keys if k.endswith(".lora_A.weight")}
        for key in sorted(keys - paired):  # lora_A keys, and anything unexpected
            b_key = key.replace(".lora_A.weight", ".lora_B.weight")
            if not key.endswith(".lora_A.weight") or b_key not in keys:
                raise ValueError(f"unsupported or unpaired tensor in the adapter: {key}")
            module = key.removesuffix(".lora_A.weight").removeprefix(PEFT_PREFIX)
            if module.rsplit(".", 1)[-1] not in LORA_TARGETS:
                raise ValueError(f"unsupported LoRA target module: {module}")
            a, b = (fh.get_tensor(k).float().numpy() for k in (key, b_key))
            pairs[module] = (a, b)
    return pairs


def lora_to_gguf(adapter_dir: Path, base_gguf: Path, out: Path) -> Path:
    """Write the peft LoRA adapter in `adapter_dir` as a llama.cpp adapter GGUF for the
    model `base_gguf`; apply it with scale 1.0 to get peft's output. Returns `out`."""
    return _lora_export(Path(adapter_dir), Path(base_gguf), Path(out), permute_qk=True)


def _lora_export(adapter_dir: Path, base_gguf: Path, out: Path, *, permute_qk: bool) -> Path:
    """`lora_to_gguf`; `permute_qk=False` writes the (wrong) unpermuted Q/K lora_b, for tests."""
    config = json.loads((adapter_dir / "adapter_config.json").read_text(encoding="utf-8"))
    alpha, rslora, r = _lora_alpha(config)
    base = _read_base(base_gguf)
    # llama.cpp's scale is alpha_gguf / rank; choose alpha_gguf so the default rank needs
    # no correction and fold any other peft scale (rank_pattern ranks) into B
    alpha_gguf = alpha * math.sqrt(r) if rslora else alpha
    arrays: dict[str, np.ndarray] = {}
    for module, (a, b) in _lora_tensors(adapter_dir).items():
        found = base.names.get_type_and_name(module)
        weight = f"{found[1]}.weight" if found else ""
        if found is None or weight not in base.shapes:
            raise ValueError(f"{module}: no matching tensor in {base_gguf.name}")
        rank = a.shape[0]
        if b.shape[1] != rank or base.shapes[weight] != (b.shape[0], a.shape[1]):
            raise ValueError(f"{module}: LoRA shapes {a.shape}, {b.shape} do not fit {weight}")
        peft_scale = alpha / (math.sqrt(rank) if rslora else rank)
        llama_scale = alpha_gguf / rank if alpha_gguf else 1.0
        if not math.isclose(peft_scale, llama_scale, rel_tol=1e-6):
            b = b * np.float32(peft_scale / llama_scale)
        if permute_qk and found[0] in base.heads:
            b = rope_interleave_rows(b, base.heads[found[0]])
        arrays[f"{weight}.lora_a"], arrays[f"{weight}.lora_b"] = a, b
    if not arrays:
        raise ValueError(f"{adapter_dir}: the adapter has no LoRA tensors")

    def meta(writer: gguf.GGUFWriter) -> None:
        writer.add_type(gguf.GGUFType.ADAPTER)
        writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
        writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, alpha_gguf)

    f32 = np.dtype(np.float32)
    specs: list[TensorSpec] = [(name, tuple(v.shape), f32) for name, v in arrays.items()]
    with _atomic(out) as tmp:
        _write(tmp, base.arch, meta, specs, arrays.__getitem__)
    return out


# --- full checkpoints ---------------------------------------------------------------------
def _checkpoint_files(checkpoint_dir: Path) -> list[Path]:
    index = checkpoint_dir / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        return [checkpoint_dir / name for name in sorted(set(weight_map.values()))]
    files = sorted(checkpoint_dir.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{checkpoint_dir}: no *.safetensors weights")
    return files


def _copy_metadata(reader: gguf.GGUFReader, writer: gguf.GGUFWriter) -> None:
    """Every key/value of the base except the ones the writer owns; file type F16."""
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == gguf.Keys.General.ARCHITECTURE:
            continue
        if key == gguf.Keys.General.ALIGNMENT:
            writer.add_custom_alignment(int(field.contents()))
        elif key == gguf.Keys.General.FILE_TYPE:
            writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
        elif field.types[0] == gguf.GGUFValueType.ARRAY:
            if len(field.types) != 2:
                raise ValueError(f"{key}: nested metadata arrays are not supported")
            writer.add_key_value(key, field.contents(), field.types[0], sub_type=field.types[1])
        else:
            writer.add_key_value(key, field.contents(), field.types[0])


def full_to_gguf(
    checkpoint_dir: Path,
    base_gguf: Path,
    out: Path,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Write the full checkpoint in `checkpoint_dir` (HF safetensors of the base's model) as
    a complete GGUF with `base_gguf`'s metadata and tensor list. Returns `out`."""
    from safetensors import safe_open

    checkpoint_dir, out = Path(checkpoint_dir), Path(out)
    base = _read_base(Path(base_gguf))
    with ExitStack() as stack:
        sources: dict[str, tuple[Any, str]] = {}  # GGUF name -> (open file, HF key)
        for file in _checkpoint_files(checkpoint_dir):
            fh = stack.enter_context(safe_open(str(file), framework="pt"))
            for key in list(fh.keys()):
                name = base.names.get_name(key, try_suffixes=(".weight", ".bias"))
                if name is not None:
                    sources[name] = (fh, key)
        if "output.weight" not in sources and "token_embd.weight" in sources:
            sources["output.weight"] = sources["token_embd.weight"]  # tied embeddings
        missing = [name for name in base.shapes if name not in sources]
        shapes = {n: tuple(fh.get_slice(k).get_shape()) for n, (fh, k) in sources.items()}
        wrong = [f"{n} {shapes[n]} != {s}" for n, s in base.shapes.items() if shapes.get(n, s) != s]
        if missing or wrong:
            raise ValueError(
                f"{checkpoint_dir} does not match {base.reader.data.filename}: "
                f"missing {missing[:5]}, shapes {wrong[:5]}"
            )
        kinds = {name: base.names.get_type(name.removesuffix(".weight")) for name in base.shapes}

        def produce(name: str) -> np.ndarray:
            fh, key = sources[name]
            array: np.ndarray = fh.get_tensor(key).float().numpy()
            kind = kinds[name]
            if kind in base.heads:
                array = rope_interleave_rows(array, base.heads[kind])
            return array

        f16, f32 = np.dtype(np.float16), np.dtype(np.float32)
        specs: list[TensorSpec] = [
            (name, shape, f16 if len(shape) == 2 else f32) for name, shape in base.shapes.items()
        ]

        def meta(writer: gguf.GGUFWriter) -> None:
            _copy_metadata(base.reader, writer)

        with _atomic(out) as tmp:
            _write(tmp, base.arch, meta, specs, produce, progress, out.name)
    return out
