"""How often can the teacher show a usable answer: greedy alone, or greedy then sampled tries?

For each simulated user (a `bench/collapse.py` user or a `bench/learn.py` one), the base
model first answers the user's first `--prompts` training prompts greedily without the hint
(the answer the user rejects); then the teacher (the base model reading the correction,
`teacher_messages`) answers each greedily and `--tries` times sampled at each
`--temperatures`. Each teacher answer goes through the app's checks of
`judging/teacher_answer.py` (ended on its own, not degenerate, does not quote the hint, says
something, does what a request for less asks, hint gain >= MIN_HINT_GAIN). Printed per user
and temperature: how many prompts get a kept answer from the greedy one alone and from the
greedy one or any try, how many single tries were kept, how many kept answers the user
would accept, their mean words, and why the others were dropped.

Run: `CLAWRL_HOME=/tmp/clawrl-dev HF_HUB_OFFLINE=1 .venv/bin/python bench/teacher_tries.py
      [--users u15,dozen,tips25] [--prompts 16] [--tries 4] [--temperatures 0.7,1.0]`
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import collapse as C  # noqa: E402

from clawrl_app.engine.judging.length_request import (  # noqa: E402
    does_what_was_asked,
    says_something,
)
from clawrl_app.engine.judging.prompts import HINT_MARKER  # noqa: E402


def why_dropped(
    model: Any, fmt: C.ChatFormatter, ids: list[int], stopped: bool, question: str,
    rejected: str, hint: str,
) -> str:  # fmt: skip
    """The first check of the app's that the answer fails ("ok": none, the app keeps it)."""
    text = fmt.decode(ids)
    msgs = [{"role": "user", "content": question}]
    if not stopped or not text.strip() or C.degeneration(text).degenerate:
        return "form"
    if C.quotes(text, hint) or C.quotes(text, HINT_MARKER, 2):
        return "quote"
    if not says_something(text, question):
        return "nothing"
    if not does_what_was_asked(text, rejected, hint):
        return "not asked"
    with_hint = C.logprobs_of(model, fmt.render(C.teacher_messages(msgs, hint)), ids)
    without = C.logprobs_of(model, fmt.render(msgs), ids)
    gain = statistics.fmean(with_hint) - statistics.fmean(without)
    return "ok" if gain >= C.MIN_HINT_GAIN else "gain"


def verdicts(
    model: Any, fmt: C.ChatFormatter, got: list[tuple[list[int], bool]],
    ask: tuple[list[str], list[str], C.User],
) -> list[tuple[str, bool, int]]:  # fmt: skip
    """(why dropped or "ok", the user accepts it, words) per answer of `got`."""
    qs, rejected, user = ask
    out = []
    for i, (ids, stopped) in enumerate(got):
        why = why_dropped(model, fmt, ids, stopped, qs[i], rejected[i], user.correction)
        text = fmt.decode(ids)
        out.append((why, user.complies(text, stopped), len(text.split())))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", default="u15,dozen,tips25")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--tries", type=int, default=4)
    ap.add_argument("--temperatures", default="0.7,1.0")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("THREADS", "2")))
    torch.manual_seed(args.seed)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = C.resolve_model(None, C.app_paths(Path(os.environ.get("CLAWRL_HOME", ".")))).path
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    fmt = C.ChatFormatter(tok)
    temps = [float(t) for t in args.temperatures.split(",")]
    n, k = args.prompts, args.tries
    print(f"| user | temperature | greedy kept | greedy or any of {k} tries | tries kept | "
          "kept the user accepts | kept words | dropped tries (why) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for name in args.users.split(","):
        t0 = time.monotonic()
        user = C.USERS[name] if name in C.USERS else C.persona_user(name)
        qs = user.prompts[:n]
        asks = [[{"role": "user", "content": q}] for q in qs]
        plain = [fmt.render(m) for m in asks]
        rejected = [fmt.decode(r) for r, _ in C.generate(model, fmt, plain, user.max_tokens, True)]
        hinted = [fmt.render(C.teacher_messages(m, user.correction)) for m in asks]

        ask = (qs, rejected, user)
        greedy = verdicts(model, fmt, C.generate(model, fmt, hinted, user.max_tokens, True), ask)
        g_ok = [v == "ok" for v, _, _ in greedy]
        for t in temps:
            tries = [
                verdicts(
                    model,
                    fmt,
                    C.generate(model, fmt, hinted, user.max_tokens, False, temperature=t),
                    ask,
                )
                for _ in range(k)
            ]
            any_ok = sum(g_ok[i] or any(tr[i][0] == "ok" for tr in tries) for i in range(n))
            kept = [x for tr in tries for x in tr if x[0] == "ok"]
            dropped = Counter(x[0] for tr in tries for x in tr if x[0] != "ok")
            words = f"{statistics.fmean(w for _, _, w in kept):.1f}" if kept else "-"
            print(
                f"| {name} | {t} | {sum(g_ok)}/{n} | {any_ok}/{n} | {len(kept)}/{n * k} | "
                f"{sum(c for _, c, _ in kept)}/{len(kept)} | {words} | "
                + ", ".join(f"{why} {c}" for why, c in dropped.most_common())
                + " |",
                flush=True,
            )
        print(f"<!-- {name}: {time.monotonic() - t0:.0f} s -->", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
