"""`clawrl-app export VERSION --merged DIR`: a standalone HF model folder with the adapter
merged into the base weights (loadable by transformers, vLLM, SGLang, llama.cpp converters).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from clawrl_app.engine.store import Store


def export_merged(store: Store, version: str, base_model: Path, out: Path) -> Path:
    """Merge `version`'s LoRA adapter into the base model and save it (with the tokenizer)."""
    from peft import PeftModel

    from clawrl_app.models import ResolvedModel, load_model

    row = store.get_checkpoint(version)
    if row is None:
        known = ", ".join(c.version for c in store.list_checkpoints()) or "none yet"
        raise ValueError(f"no checkpoint {version!r} (known: {known})")
    if out.exists() and any(out.iterdir()):
        raise ValueError(f"{out} is not empty; choose a new folder")
    model, tok = load_model(ResolvedModel(base_model, "local", base_model.name, 0))
    if (Path(row.path) / "adapter_config.json").exists():
        model = PeftModel.from_pretrained(model, row.path).merge_and_unload()
    else:  # a full fine-tuning checkpoint is already a model folder
        shutil.copytree(row.path, out, dirs_exist_ok=True)
        tok.save_pretrained(str(out))
        return out
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out))
    tok.save_pretrained(str(out))
    return out
