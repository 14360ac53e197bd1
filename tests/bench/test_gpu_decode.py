"""bench/gpu_decode.py (bench/gpu.py's side-by-side rows) on the CPU with a tiny random Llama:
both sides decode, every stream runs to its token count, and the rows say what was compared.
A smoke check of the benchmark's code; its figures belong to GPU runs."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from gpu_decode import side_by_side  # noqa: E402

from tests.random_model import LlamaShape, save_random_llama  # noqa: E402

pytestmark = pytest.mark.slow


def test_side_by_side_rows_on_a_tiny_model(embedded_model: Any, tmp_path: Path) -> None:
    shape = LlamaShape(
        hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16, intermediate=128, vocab=49152
    )
    model_dir = tmp_path / "tiny"
    save_random_llama(model_dir, shape.params, embedded_model.path, device="cpu", shape=shape)
    said: list[str] = []
    rows = side_by_side(model_dir, "cpu", streams=2, tokens=6, repeats=1, say=said.append)
    names = [r[0] for r in rows]
    assert names == [
        "decode ms/token, base, 1 stream(s): bare loop vs backend",
        "decode ms/token, LoRA, 1 stream(s): bare loop vs backend",
        "decode ms/token, base, 2 stream(s): bare loop vs backend",
        "decode ms/token, LoRA, 2 stream(s): bare loop vs backend",
        "backend tokens/s, base: 2 streams vs 1",
        "backend tokens/s, LoRA: 2 streams vs 1",
    ]
    for _, value, _ in rows[:4]:
        bare, ours, ratio = map(float, re.fullmatch(r"(\S+) vs (\S+) \((\S+)x\)", value).groups())  # type: ignore[union-attr]
        assert bare > 0 and ours > 0
        # the figures are printed to 2 decimals, the ratio from the unrounded ones: allow for
        # the rounding of both (a fast CPU makes ms/token small and the error relatively big)
        slack = (ours / bare) * (0.005 / bare + 0.005 / ours) + 0.005
        assert abs(ratio - ours / bare) <= slack
    assert len(said) == 4
