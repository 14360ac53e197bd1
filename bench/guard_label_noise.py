"""How well can any guard agree with the bench's "looping" label? Kept checkpoints answered on
the bench's form pool and on the guard's own prompt sets, side by side.

`bench/learn.py --keep-home` keeps each run's engine home. For every kept checkpoint (and the
base model) this answers, greedily with torch (f32):
- `pool`: the user's form pool (`learn_personas.form_pool`, ~50 prompts) at the user's
  max_tokens: the bench's label (*looping*: its degeneration rate exceeds the base's by more
  than 0.05, issue #29's bar);
- `budget`: the 48 shipped open prompts at the same length (what the guard's check at the
  user's length answers, 24 of them and 24 more to confirm);
- `own`: the user's own (trained) prompts at the same length (what the guard's check on the
  user's prompts answers).
It prints per version each set's rate against the base's, how often the same bar on the
guard's 48 prompts agrees with the pool's label, and which pool prompts carry the new loops.
Answers are cached per home in `--cache` (JSON), so a second run only scores.

Run: `CLAWRL_HOME=/tmp/clawrl-dev HF_HUB_OFFLINE=1 .venv/bin/python bench/guard_label_noise.py
      /tmp/clawrl-learn-brevity-dozen-XXXX [...]` (about 1 minute per checkpoint on 2 cores)
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from learn_personas import USERS, form_pool  # noqa: E402

from clawrl_app.degeneration import score  # noqa: E402
from clawrl_app.general_eval import load_open_prompts  # noqa: E402

BAR = 0.05


def user_of(home: Path) -> str:
    """The bench user a kept home belongs to ("clawrl-learn-brevity-dozen-xxxx")."""
    name = home.name.removeprefix("clawrl-learn-").rsplit("-", 1)[0]
    return name.replace("-", "/", 1)


def sets_of(user: str) -> dict[str, tuple[list[str], int]]:
    persona = USERS[user]
    opens = [p.prompt for p in load_open_prompts()][:48]
    n = persona.max_tokens
    return {
        "pool": (list(form_pool(persona)), n),
        "budget": (opens, n),
        "own": (list(persona.train_prompts), n),
    }


def answer_home(home: Path, cache: Path) -> dict[str, Any]:
    """Every checkpoint's answers on the three sets (cached)."""
    out = cache / f"{home.name}.json"
    if out.exists():
        return json.loads(out.read_text())
    import torch
    from peft import PeftModel
    from pool_versions import answers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from clawrl_app.models import resolve_model
    from clawrl_app.paths import app_paths

    user = user_of(home)
    path = str(resolve_model(None, app_paths(), progress=False).path)
    tok = AutoTokenizer.from_pretrained(path)
    tok.padding_side = "left"
    base = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    sets = sets_of(user)
    rec: dict[str, Any] = {"user": user, "home": str(home), "versions": {}}
    rec["versions"]["base"] = {k: answers(base, tok, p, n) for k, (p, n) in sets.items()}
    for folder in sorted((home / "data" / "checkpoints").iterdir()):
        if not (folder / "adapter_model.safetensors").exists():
            continue
        version = json.loads((folder / "manifest.json").read_text())["version"]
        model = PeftModel.from_pretrained(base, str(folder))
        rec["versions"][f"{version}@{folder.name}"] = {
            k: answers(model, tok, p, n) for k, (p, n) in sets.items()
        }
        base = model.unload()
        print(f"{home.name}: {version} answered", file=sys.stderr, flush=True)
    cache.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rec))
    return rec


def rate(texts: list[str]) -> tuple[float, list[bool]]:
    flags = [score(t).degenerate for t in texts]
    return sum(flags) / len(flags), flags


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("homes", type=Path, nargs="+")
    ap.add_argument("--cache", type=Path, default=Path("/tmp/guard-label-noise"))
    args = ap.parse_args()
    print("| user | version | pool (base) | open prompts at the user's length (base) | "
          "the user's own prompts (base) | looping (pool) | same bar on the open prompts |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    agree = total = 0
    carriers: Counter[str] = Counter()
    new_total = 0
    for home in args.homes:
        rec = answer_home(home, args.cache)
        prompts = sets_of(rec["user"])["pool"][0]
        base = {k: rate(v) for k, v in rec["versions"]["base"].items()}
        for name, sets in rec["versions"].items():
            if name == "base":
                continue
            mine = {k: rate(v) for k, v in sets.items()}
            loops = mine["pool"][0] - base["pool"][0] > BAR
            guard = mine["budget"][0] - base["budget"][0] > BAR
            agree += loops == guard
            total += 1
            for p, m, b in zip(prompts, mine["pool"][1], base["pool"][1], strict=True):
                if m and not b:
                    carriers[p] += 1
                    new_total += 1
            cells = [f"{mine[k][0]:.2f} ({base[k][0]:.2f})" for k in ("pool", "budget", "own")]
            print(f"| {rec['user']} | {name.split('@')[0]} | " + " | ".join(cells)
                  + f" | {'yes' if loops else 'no'} | {'yes' if guard else 'no'} |")  # fmt: skip
    print(
        f"\nthe same bar on the 48 open prompts agrees with the pool's label on {agree} of {total}"
    )
    print(f"{new_total} new loops on the pool; the prompts that carry the most:")
    for p, c in carriers.most_common(5):
        print(f"  {c:3d}  {p}")


if __name__ == "__main__":
    main()
