"""Which users' hints can the embedded model read? The judge's teacher check, per user.

For each simulated user (a `bench/collapse.py` user or a `bench/learn.py` one such as
`calm/plain`), the base model answers the user's first `--prompts` training prompts
greedily at the user's max_tokens, once as asked and once with the user's correction
appended as the teacher sees it (`teacher_messages`). Printed per user: the degenerate
share (`clawrl_app.degeneration`) and mean words of both, the share the user would accept,
and the verdict of the app's rule (`decide_teacher`, `judge.teacher_check_max_rise`): a
hint the teacher loops on more than without it trains by reward only.

Run: `CLAWRL_HOME=/tmp/clawrl-dev HF_HUB_OFFLINE=1 .venv/bin/python bench/teacher_check.py
      [--users calm/plain,u15,dozen,tips25] [--prompts 12]`
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import collapse as C  # noqa: E402

from clawrl_app.config import JudgeSettings  # noqa: E402
from clawrl_app.engine.judging.teacher_check import decide_teacher  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", default="calm/plain,u15,dozen,tips25,tweet")
    ap.add_argument("--prompts", type=int, default=12)
    ap.add_argument("--max-rise", type=float, default=JudgeSettings().teacher_check_max_rise)
    args = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("THREADS", "2")))
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = C.resolve_model(None, C.app_paths(Path(os.environ.get("CLAWRL_HOME", ".")))).path
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    fmt = C.ChatFormatter(tok)
    print("| user | hint | degenerate without / with | words without / with | "
          "accepted without / with | verdict |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for name in args.users.split(","):
        user = C.USERS[name] if name in C.USERS else C.persona_user(name)
        asks = [[{"role": "user", "content": q}] for q in user.prompts[: args.prompts]]
        rows = {}
        for side, msgs in (
            ("without", asks),
            ("with", [C.teacher_messages(m, user.correction) for m in asks]),
        ):
            got = C.generate(model, fmt, [fmt.render(m) for m in msgs], user.max_tokens, True)
            texts = [fmt.decode(r) for r, _ in got]
            rows[side] = (
                [C.degeneration(t).degenerate for t in texts],
                sum(len(t.split()) for t in texts) / len(texts),
                sum(user.complies(t, s) for t, (_, s) in zip(texts, got, strict=True)) / len(texts),
            )
        v = decide_teacher(rows["with"][0], rows["without"][0], args.max_rise)
        print(
            f"| {user.name} | {user.correction} | {v.without:.2f} / {v.with_hint:.2f} | "
            f"{rows['without'][1]:.0f} / {rows['with'][1]:.0f} | "
            f"{rows['without'][2]:.2f} / {rows['with'][2]:.2f} | "
            f"{'teaches' if v.trusted else 'reward only'} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
