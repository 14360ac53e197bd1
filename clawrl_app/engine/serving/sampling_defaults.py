"""Sampling for requests that leave it to the server (OpenClaw sends no temperature).

OpenAI's defaults (temperature 1, top_p 1) suit large models; a small model sampled at 1
wanders and rarely ends its answer. Like other local servers, we use the model's own
recommended values when a request omits them: `temperature` and `top_p` from its
`generation_config.json` (greedy when it says `do_sample: false`), falling back to the
embedded model's card (0.2 / 0.9) for the embedded model, else to OpenAI's defaults.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

GENERATION_CONFIG = "generation_config.json"


@dataclass(frozen=True)
class SamplingDefaults:
    temperature: float = 1.0
    top_p: float = 1.0
    source: str = "OpenAI's defaults"
    """Where the values come from (shown by `clawrl-app doctor`)."""


OPENAI_DEFAULTS = SamplingDefaults()
EMBEDDED_DEFAULTS = SamplingDefaults(0.2, 0.9, "the SmolLM2-135M-Instruct model card")


def _number(value: object, low: float, high: float) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if low <= value <= high else None


def recommended_defaults(model_dir: Path | None, embedded: bool = False) -> SamplingDefaults:
    """The model's recommended sampling (see the module doc); never raises."""
    fallback = EMBEDDED_DEFAULTS if embedded else OPENAI_DEFAULTS
    if model_dir is None:
        return fallback
    path = Path(model_dir) / GENERATION_CONFIG
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return fallback
    if not isinstance(cfg, dict):
        return fallback
    if cfg.get("do_sample") is False:
        return SamplingDefaults(0.0, 1.0, f"{path.name} (do_sample: false, greedy)")
    temperature = _number(cfg.get("temperature"), 0.0, 2.0)
    top_p = _number(cfg.get("top_p"), 1e-6, 1.0)
    if temperature is None and top_p is None:
        return fallback
    return SamplingDefaults(
        fallback.temperature if temperature is None else temperature,
        fallback.top_p if top_p is None else top_p,
        path.name,
    )
