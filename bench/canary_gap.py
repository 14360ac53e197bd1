"""Where a checkpoint's canary gap comes from: the trainer's log-probs vs each serving path.

The publisher refuses a version whose served log-probs of the canary (fixed prompts, a fixed
response) differ from those the trainer wrote into the checkpoint's manifest by more than the
tolerance. This script takes a model folder and a LoRA checkpoint folder (one the app's
trainer wrote) and prints, per path, the largest and the mean per-token gap to the manifest:

- `peft forward`: the base in the serving dtype + the adapter through peft, one full forward
  (the trainer's own computation, re-done in this process);
- `merged forward`: the adapter folded into a copy of the weights (`lora_merge.merged_copy`);
- `served (merge_lora=...)`: `TorchBackend.score`, as the publisher asks it (on 16-bit
  weights both go through forward hooks, lora_hooks.py);
- `base`: the base model without the adapter (how much the adapter itself moves the canary).

Run: `.venv/bin/python bench/canary_gap.py MODEL_DIR CHECKPOINT_DIR [--device cuda]`
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from clawrl_app.engine.backends.pytorch.backend import TorchBackend  # noqa: E402
from clawrl_app.engine.backends.pytorch.lora_merge import merged_copy  # noqa: E402
from clawrl_app.engine.core.checkpoints import read_manifest  # noqa: E402
from clawrl_app.engine.training.policy_forward import response_logprobs  # noqa: E402
from clawrl_app.engine.training.train_data import TrainItem  # noqa: E402
from clawrl_app.models import ResolvedModel, load_model  # noqa: E402


def forward(model: Any, canary: list[dict[str, Any]], device: str) -> list[list[float]]:
    out = []
    with torch.no_grad():
        for c in canary:
            resp = c["response_ids"]
            item = TrainItem(
                0, "", c["prompt_ids"], resp, [0.0] * len(resp), 1.0, 0.0, False, None, ""
            )
            out.append(response_logprobs(model, [item], device).logprobs_BT[0].tolist())
    return out


async def served(
    model: Any, tok: Any, ckpt: Path, canary: list[dict[str, Any]], merge: bool
) -> list[list[float]]:
    be = TorchBackend(model, tok, model_name="canary", context_length=8192, merge_lora=merge)
    await be.start()
    try:
        await be.load_adapter("v1", ckpt)
        return [
            await be.score(c["prompt_ids"], c["response_ids"], "v1", urgent=True) for c in canary
        ]
    finally:
        await be.stop()


def gaps(expected: list[list[float]], got: list[list[float]]) -> tuple[float, float]:
    flat = [
        abs(a - b) for e, g in zip(expected, got, strict=True) for a, b in zip(e, g, strict=True)
    ]
    return max(flat), statistics.fmean(flat)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("model", type=Path, help="the base model folder (HF format)")
    ap.add_argument("checkpoint", type=Path, help="a LoRA checkpoint folder written by the trainer")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default=None, help="default: bfloat16 on CUDA, float32 on the CPU")
    args = ap.parse_args(argv)
    dtype = args.dtype or ("bfloat16" if args.device.startswith("cuda") else "float32")
    from peft import PeftModel

    manifest = read_manifest(args.checkpoint)
    canary = manifest.canary
    expected = [c["logprobs"] for c in canary]
    resolved = ResolvedModel(args.model, "local", args.model.name, 8192)
    rows: list[tuple[str, float, float]] = []

    base, tok = load_model(resolved, dtype=dtype, device=args.device)
    rows.append(("base (no adapter)", *gaps(expected, forward(base, canary, args.device))))
    merged = merged_copy(base, args.checkpoint)
    if merged is not None:
        rows.append(("merged forward", *gaps(expected, forward(merged, canary, args.device))))
        del merged
    for merge in (False, True):
        model, tok = load_model(resolved, dtype=dtype, device=args.device)
        got = asyncio.run(served(model, tok, args.checkpoint, canary, merge))
        rows.append((f"served (merge_lora={merge})", *gaps(expected, got)))
        del model
    peft_model = PeftModel.from_pretrained(base, str(args.checkpoint)).eval()
    rows.append(("peft forward", *gaps(expected, forward(peft_model, canary, args.device))))

    tokens = sum(len(e) for e in expected)
    print(
        f"\ncanary gap of {args.checkpoint.name} ({len(canary)} prompts, {tokens} tokens; {dtype} on {args.device})\n"
    )
    print("| path | max gap | mean gap |\n|---|---|---|")
    for name, mx, mean in rows:
        print(f"| {name} | {mx:.4f} | {mean:.4f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
