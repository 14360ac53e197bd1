"""What the regression guard costs and decides, on the embedded model (CPU, torch backend).

Held-out personal turns: the base model's own greedy answers to N questions, rated +1 (as a
user who liked them). Candidates: a harmless LoRA adapter (B = 0: the base model's outputs)
and a damaged one (large random LoRA weights). For each: the time to score the personal
set and to answer the general check (questions and open prompts) at the default settings,
the scores, the degeneration rate and the verdict against the base model. For the base
model also the time to answer the questions alone (the general check before open prompts
were added), wall-clock and CPU seconds of this process (CPU time is what a busy shared
machine distorts least).

Run: `.venv/bin/python bench/guard.py [--personal 32] [--general 40] [--max-tokens 48]
[--open 12] [--open-max-tokens 160]`
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from clawrl_app.config import GuardSettings  # noqa: E402
from clawrl_app.engine.backends.pytorch.backend import TorchBackend  # noqa: E402
from clawrl_app.engine.chat.formatter import ChatFormatter  # noqa: E402
from clawrl_app.engine.publishing.compare import answer  # noqa: E402
from clawrl_app.engine.publishing.guard import RegressionGuard, decide  # noqa: E402
from clawrl_app.engine.store import NewTurn, Store  # noqa: E402
from clawrl_app.general_eval import load_general_set  # noqa: E402
from clawrl_app.models import load_model, resolve_model  # noqa: E402
from clawrl_app.paths import app_paths  # noqa: E402

TOPICS = ["rivers", "bread", "the moon", "chess", "rain", "bicycles", "owls", "tea"]


def make_adapter(model: Any, out: Path, damaged: bool) -> Path:
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    cfg = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj", "o_proj"],
                     init_lora_weights=not damaged)  # fmt: skip
    peft_model = get_peft_model(copy.deepcopy(model), cfg)
    if damaged:
        with torch.no_grad():
            for name, p in peft_model.named_parameters():
                if "lora_" in name:
                    p.mul_(40.0)
    peft_model.save_pretrained(str(out))
    return out


async def run(args: argparse.Namespace, home: Path) -> list[dict[str, Any]]:
    model, tok = load_model(resolve_model(None, app_paths(Path(args.home))))
    fmt = ChatFormatter(tok)
    store = Store(home / "store.db")
    be = TorchBackend(copy.deepcopy(model), tok, model_name="m", context_length=2048)
    await be.start()
    settings = GuardSettings(general_items=args.general, max_tokens=args.max_tokens,
                             personal_items=args.personal, open_prompts=args.open,
                             open_max_tokens=args.open_max_tokens)  # fmt: skip
    for k in range(args.personal):
        q = f"Tell me one fact about {TOPICS[k % len(TOPICS)]} (#{k})."
        msgs = [{"role": "user", "content": q}]
        prompt = fmt.render(msgs)
        text = await answer(be, fmt, "base", msgs, 32)
        ids = tok.encode(text, add_special_tokens=False)
        store.ensure_session(f"s{k}", "bench")
        row = store.record_turn(NewTurn(f"s{k}", "main", {"messages": msgs}, text, prompt, ids,
                                        [0.0] * len(ids), "base", holdout=True))  # fmt: skip
        store.set_user_rating(row.id, 1, None, eligible_at=0.0)
    guard = RegressionGuard(store, be, fmt, settings, load_general_set())
    w0, c0 = time.perf_counter(), time.process_time()
    await asyncio.gather(*[answer(be, fmt, "base", [{"role": "user", "content": i.question}],
                                  args.max_tokens) for i in guard.general])  # fmt: skip
    facts_only = (time.perf_counter() - w0, time.process_time() - c0)
    rows = []
    for name, damaged in (("base", None), ("harmless", False), ("damaged", True)):
        if damaged is not None:
            await be.load_adapter(name, make_adapter(model, home / name, damaged))
        t0 = time.perf_counter()
        personal, pn = await guard.personal(name)
        t1, c1 = time.perf_counter(), time.process_time()
        g = await guard.general_score(name)
        t2, c2 = time.perf_counter(), time.process_time()
        rows.append({"version": name, "personal": personal, "personal_n": pn,
                     "personal_s": t1 - t0, "general": g.general, "general_n": g.questions,
                     "facts_any_form": g.facts_any_form, "degeneration": g.degeneration,
                     "answers": g.answers, "general_s": t2 - t1, "general_cpu_s": c2 - c1})  # fmt: skip
    rows[0]["facts_only_s"], rows[0]["facts_only_cpu_s"] = facts_only
    await be.stop()
    from clawrl_app.engine.publishing.guard import VersionScores

    def scores(r: dict[str, Any]) -> VersionScores:
        return VersionScores(r["version"], r["personal"], r["personal_n"], r["general"],
                             r["general_n"], r["degeneration"], r["answers"])  # fmt: skip

    for r in rows:
        v = decide(scores(r), scores(rows[0]), settings, rows[0]["general"],
                   rows[0]["degeneration"])  # fmt: skip
        r["verdict"] = "-" if r["version"] == "base" else ("passed" if v.passed else "REFUSED")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--personal", type=int, default=32, help="held-out turns")
    ap.add_argument("--general", type=int, default=40, help="general questions")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--open", type=int, default=12, help="open prompts")
    ap.add_argument("--open-max-tokens", type=int, default=160)
    ap.add_argument("--home", default=str(Path.home() / ".cache" / "clawrl-bench"),
                    help="where the embedded model is converted once")  # fmt: skip
    ap.add_argument("--json", help="also write the rows here")
    args = ap.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    with tempfile.TemporaryDirectory() as tmp:
        rows = asyncio.run(run(args, Path(tmp)))
    print(f"\nGuard on the embedded model: {args.personal} held-out turns, {args.general} "
          f"general questions at {args.max_tokens} tokens, {args.open} open prompts at "
          f"{args.open_max_tokens} tokens\n")  # fmt: skip
    print("| version | personal | scoring (s) | general (any form) | degeneration | "
          "answering (s, CPU s) | vs base |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['version']} | {r['personal']:.2f} ({r['personal_n']}) | "
              f"{r['personal_s']:.1f} | {r['general']:.2f} ({r['facts_any_form']:.2f}) | "
              f"{r['degeneration']:.2f} ({r['answers']}) | {r['general_s']:.1f}, "
              f"{r['general_cpu_s']:.1f} | {r['verdict']} |")  # fmt: skip
    b = rows[0]
    print(
        f"\nbase, questions only (the check before open prompts): "
        f"{b['facts_only_s']:.1f} s, {b['facts_only_cpu_s']:.1f} CPU s"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
