"""How well can any guard agree with the bench's "looping" label? Kept checkpoints answered on
the bench's form pool and on the guard's own prompt sets, side by side.

`bench/learn.py --keep-home` keeps each run's engine home. For every kept checkpoint (and the
base model) this answers, greedily with torch (f32), at the user's max_tokens:
- `pool`: the user's form pool (`learn_personas.form_pool`, ~170 prompts), read in two
  parts: the ~50 held-out prompts of the bench's users (the whole pool before 2026-12-03)
  and the 120 of `learn_pool.WIDE_POOL`. A version *loops* on a part when its degeneration
  rate there exceeds the base's by more than 0.05 (issue #29's bar);
- `budget`: the 48 shipped open prompts (what the guard's check at the user's length
  answers, 24 of them and 24 more to confirm);
- `own`: the user's own (trained) prompts (what the guard's check on the user's prompts
  answers).
It prints per version each set's rise over the base, how often the two parts of the pool
agree on "loops", how often the 48 open prompts agree with the whole pool, and which of the
first part's prompts carry its new loops. Answers are cached per home in `--cache` (JSON),
so a second run only scores.

Run: `CLAWRL_HOME=/tmp/clawrl-dev HF_HUB_OFFLINE=1 .venv/bin/python bench/guard_label_noise.py
      /tmp/clawrl-learn-brevity-dozen-XXXX [...]` (1-3 minutes per checkpoint on 2 cores)
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
from learn_pool import WIDE_POOL  # noqa: E402

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


def rise(mine: list[bool], base: list[bool], keep: list[int]) -> float:
    """The degeneration rate's rise over the base's on the answers at `keep`."""
    return (sum(mine[i] for i in keep) - sum(base[i] for i in keep)) / len(keep)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("homes", type=Path, nargs="+")
    ap.add_argument("--cache", type=Path, default=Path("/tmp/guard-label-noise"))
    args = ap.parse_args()
    print("| user | version | rise: pool's first ~50 | rise: its 120 more | rise: whole pool | "
          "rise: 48 open prompts | rise: the user's own prompts |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    parts = whole = total = 0
    carriers: Counter[str] = Counter()
    new_total = 0
    for home in args.homes:
        rec = answer_home(home, args.cache)
        prompts = sets_of(rec["user"])["pool"][0]
        wide = set(WIDE_POOL)
        first = [i for i, p in enumerate(prompts) if p not in wide]
        more = [i for i, p in enumerate(prompts) if p in wide]
        every = list(range(len(prompts)))
        base = {k: rate(v)[1] for k, v in rec["versions"]["base"].items()}
        for name, sets in rec["versions"].items():
            if name == "base":
                continue
            mine = {k: rate(v)[1] for k, v in sets.items()}
            r1, r2, r = (rise(mine["pool"], base["pool"], k) for k in (first, more, every))
            rb = rise(mine["budget"], base["budget"], list(range(len(base["budget"]))))
            ro = rise(mine["own"], base["own"], list(range(len(base["own"]))))
            parts += (r1 > BAR) == (r2 > BAR)
            whole += (r > BAR) == (rb > BAR)
            total += 1
            for i in first:
                if mine["pool"][i] and not base["pool"][i]:
                    carriers[prompts[i]] += 1
                    new_total += 1
            cells = [f"{x:+.3f}" for x in (r1, r2, r, rb, ro)]
            print(f"| {rec['user']} | {name.split('@')[0]} | " + " | ".join(cells) + " |")
    print(
        f"\n'loops' (rise > {BAR}) on the pool's first part and on its 120 more agree on "
        f"{parts} of {total} versions; the 48 open prompts and the whole pool on {whole}"
    )
    print(f"{new_total} new loops on the pool's first part; the prompts that carry the most:")
    for p, c in carriers.most_common(5):
        print(f"  {c:3d}  {p}")


if __name__ == "__main__":
    main()
