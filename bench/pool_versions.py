"""A kept run's checkpoints on its user's form pool, answered with torch (f32, greedy).

`bench/learn.py --keep-home` keeps the engine home; this answers the user's form pool
(`learn_personas.form_pool`: ~50 prompts no user of the bench trains on) at the user's
max_tokens under the base model and each named checkpoint's adapter, and prints the
degenerate share, the answers degenerate where the base's are not, and the mean words:
whether a drift grows with the steps, without the endpoint or llama.cpp. `--set guard`
answers the guard's open prompts instead (`guard.budget_prompts` of them, at the same
length: what the guard's check at the user's length sees) and says whether that rule
refuses each version.

Run: `CLAWRL_HOME=/tmp/clawrl-test-cache HF_HUB_OFFLINE=1 .venv/bin/python bench/pool_versions.py
      brevity/dozen /tmp/clawrl-learn-brevity-dozen-XXXX 1 2 4 6 [--set guard]`
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from learn_personas import USERS, form_pool  # noqa: E402

from clawrl_app.config import GuardSettings  # noqa: E402
from clawrl_app.degeneration import score as degeneration  # noqa: E402
from clawrl_app.engine.publishing.user_form import allowed_new_loops  # noqa: E402
from clawrl_app.general_eval import load_open_prompts  # noqa: E402
from clawrl_app.models import resolve_model  # noqa: E402
from clawrl_app.paths import app_paths  # noqa: E402

BATCH = 25


def answers(model: object, tok: object, prompts: list[str], max_tokens: int) -> list[str]:
    """Greedy answers to `prompts` (chat template, left-padded batches)."""
    texts = [
        tok.apply_chat_template(  # type: ignore[attr-defined]
            [{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True
        )
        for p in prompts
    ]
    out: list[str] = []
    for i in range(0, len(texts), BATCH):
        enc = tok(texts[i : i + BATCH], return_tensors="pt", padding=True)  # type: ignore[operator]
        with torch.no_grad():
            ids = model.generate(  # type: ignore[attr-defined]
                **enc, max_new_tokens=max_tokens, do_sample=False,
                pad_token_id=tok.pad_token_id or tok.eos_token_id,  # type: ignore[attr-defined]
            )  # fmt: skip
        n = enc["input_ids"].shape[1]
        out += [tok.decode(x[n:], skip_special_tokens=True) for x in ids]  # type: ignore[attr-defined]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("user", choices=sorted(USERS))
    ap.add_argument("home", type=Path, help="the engine home bench/learn.py --keep-home kept")
    ap.add_argument("steps", type=int, nargs="*", help="checkpoint steps (adapter_00000N)")
    ap.add_argument("--set", choices=("pool", "guard"), default="pool",
                    help="the user's form pool, or the guard's open prompts")  # fmt: skip
    args = ap.parse_args()
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    user = USERS[args.user]
    g = GuardSettings()
    prompts = (
        list(form_pool(user))
        if args.set == "pool"
        else [p.prompt for p in load_open_prompts()[: g.budget_prompts]]
    )
    allowed = allowed_new_loops(len(prompts), g.max_new_loops)
    path = str(resolve_model(None, app_paths(), progress=False).path)
    tok = AutoTokenizer.from_pretrained(path)
    tok.padding_side = "left"
    base = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    print(f"{args.user}: {len(prompts)} prompts at {user.max_tokens} tokens")
    print(f"| version | degenerate | new (base clean) | words | new > {allowed} |")
    print("|---|---|---|---|---|")
    ref: list[bool] | None = None
    for step in [0, *args.steps]:
        folder = args.home / "data" / "checkpoints" / f"adapter_{step:06d}"
        model = base if step == 0 else PeftModel.from_pretrained(base, str(folder))
        texts = answers(model, tok, prompts, user.max_tokens)
        flags = [degeneration(t).degenerate for t in texts]
        ref = flags if ref is None else ref
        new = sum(f and not r for f, r in zip(flags, ref, strict=True))
        words = sum(len(t.split()) for t in texts) / len(texts)
        name = "base" if step == 0 else f"v{step}"
        refuse = "refuse" if new > allowed else "pass"
        print(f"| {name} | {sum(flags) / len(flags):.2f} | {new} | {words:.1f} | {refuse} |",
              flush=True)  # fmt: skip
        if step:
            base = model.unload()  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
