"""The feedback loop in one process, to see whether a method collapses the policy.

The real trainer step (`Trainer.train_step`: the app's losses, optimizer and settings) on
answers sampled from the policy being trained, judged by simulated users who want short
answers and say so in their own words. No endpoint and no llama.cpp (so it runs in minutes
on a CPU, several users and methods in one go); `bench/learn.py` is the end-to-end run.

Per round: 4 training prompts answered by the current policy (temperature 1, the user's
max_tokens), the user's verdict (+1 when the answer is within its word limit and ends on
its own; else -1 and the correction, whose words are the OPD hint), the base model's
teacher log-probs under the hint (as the app's judge scores them), one trainer step. Every
`--eval-every` rounds: greedy answers to the user's held-out prompts (compliance: within
the limit, ended on its own, not degenerate; degeneration by `clawrl_app.degeneration`)
and to a fixed set of open prompts (128 tokens: loops show there first).

Measured per step: the mean entropy of the sampled tokens, the advantage signs, whether
the batch had any contrast (rewards not all equal), the KL to the base.

Variants of the teacher term: `--method combine-topk --topk 8` (the teacher's top-8 at each
position), `--method combine-stop --topk 8` (the end token's bin alone: the hint teaches where to
stop, nothing else), `--entropy-cap R` (halve a step while the batch's entropy exceeds the
base model's by more than R).

Run: `CLAWRL_HOME=/tmp/clawrl-dev .venv/bin/python bench/collapse.py [--users u15,dozen]
      [--rounds 8] [--lr 5e-4] [--set kl_coef=0.1] [--method combine] [--seed 0]`
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from learn_personas import ADVICE_HELD_OUT, ADVICE_PROMPTS, OPEN_PROMPTS  # noqa: E402
from learn_personas import USERS as PERSONA_USERS  # noqa: E402

from clawrl_app.degeneration import score as degeneration  # noqa: E402
from clawrl_app.engine.chat.formatter import ChatFormatter, eos_token_ids  # noqa: E402
from clawrl_app.engine.judging.prompts import teacher_messages  # noqa: E402
from clawrl_app.engine.judging.teacher_answer import MIN_HINT_GAIN, quotes  # noqa: E402
from clawrl_app.engine.judging.teacher_cut import asks_for_less, cut_of  # noqa: E402
from clawrl_app.engine.training.config import TrainerConfig  # noqa: E402
from clawrl_app.engine.training.policy_forward import response_logprobs  # noqa: E402
from clawrl_app.engine.training.train_data import TrainItem, stop_pair  # noqa: E402
from clawrl_app.engine.training.trainer import Trainer  # noqa: E402
from clawrl_app.general_eval import is_correct, load_general_set, load_open_prompts  # noqa: E402
from clawrl_app.models import resolve_model  # noqa: E402
from clawrl_app.paths import app_paths  # noqa: E402

QUESTIONS = [
    "What is photosynthesis?", "Why is the sky blue?", "What does a compiler do?",
    "What is gravity?", "How do vaccines work?", "What is a black hole?",
    "What is machine learning?", "Why do leaves change colour in autumn?",
    "What causes earthquakes?", "What is democracy?", "What is a prime number?",
    "How does a rainbow form?", "What is DNA?", "Why do we have seasons?",
    "What is a volcano?", "What does the heart do?", "What is recycling?",
    "What is the internet?", "What is an atom?", "What is inflation?",
    "How do airplanes fly?", "What is a computer virus?", "Why do cats purr?",
    "What is electricity?", "What is the moon made of?", "How do plants drink water?",
    "What is a galaxy?", "What is a glacier?", "How does a refrigerator keep food cold?",
    "What is a spreadsheet?", "Why do we dream?", "What is a noun?",
]  # fmt: skip
HELD_OUT = [
    "What is a tornado?", "How does the stomach digest food?", "What is climate change?",
    "What is a rainforest?", "Why do birds migrate?", "What is a battery?",
    "How do magnets work?", "What is a hurricane?", "What is a desert?",
    "How does a microwave oven heat food?", "What is a fossil?", "Why is the sea salty?",
]  # fmt: skip
ADVICE = list(ADVICE_PROMPTS[:16])
OPEN = list(OPEN_PROMPTS)


@dataclass(frozen=True)
class User:
    """A simulated user who wants answers of at most `limit` words."""

    name: str
    limit: int
    correction: str
    thanks: str
    prompts: list[str]
    held_out: list[str]
    max_tokens: int
    wants: Callable[[str], bool] | None = None
    """What the user wants when it is not a word limit (a `bench/learn.py` user's check)."""

    def complies(self, text: str, stopped: bool) -> bool:
        if degeneration(text).degenerate:
            return False
        if self.wants is not None:
            return self.wants(text)
        return stopped and 0 < len(text.split()) <= self.limit


def persona_user(name: str) -> User:
    """A `bench/learn.py` user (`calm/plain`, `brevity/tips25`, ...) as a collapse user."""
    p = PERSONA_USERS[name]
    return User(
        name, 0, p.correction, p.thanks, list(p.train_prompts), list(p.heldout_prompts),
        p.max_tokens, p.complies,
    )  # fmt: skip


USERS = {
    u.name: u
    for u in (
        User(
            "u15",
            15,
            "Too long. Please answer in at most 15 words.",
            "Thanks!",
            QUESTIONS,
            HELD_OUT,
            64,
        ),
        User(
            "dozen",
            12,
            "That is a lot of text. Keep it to about a dozen words, please.",
            "Great, thank you.",
            QUESTIONS,
            HELD_OUT,
            64,
        ),
        User(
            "tips25",
            25,
            "Shorter please, 25 words max.",
            "Perfect.",
            ADVICE,
            list(ADVICE_HELD_OUT[:8]),
            96,
        ),
        User(
            "tweet",
            20,
            "Way too wordy. Give me a tweet-length answer, twenty words tops.",
            "Nice, thanks.",
            QUESTIONS[::-1],
            HELD_OUT[::-1],
            48,
        ),
    )  # fmt: skip
}


@torch.no_grad()
def generate(
    model: Any,
    fmt: ChatFormatter,
    prompts: list[list[int]],
    max_tokens: int,
    greedy: bool,
    temperature: float = 1.0,
    top_p: float = 1.0,
) -> list[tuple[list[int], bool]]:
    """(response ids, stopped on EOS) per prompt; sampled at `temperature` unless greedy."""
    tok = fmt.tokenizer
    eos = set(eos_token_ids(tok))
    pad = tok.pad_token_id if tok.pad_token_id is not None else next(iter(eos))
    L = max(len(p) for p in prompts)
    ids = torch.tensor([[pad] * (L - len(p)) + p for p in prompts])
    attn = torch.tensor([[0] * (L - len(p)) + [1] * len(p) for p in prompts])
    out = model.generate(
        input_ids=ids, attention_mask=attn, max_new_tokens=max_tokens,
        do_sample=not greedy, temperature=None if greedy else temperature,
        top_p=None if greedy else top_p, top_k=0,
        eos_token_id=sorted(eos), pad_token_id=pad,
    )  # fmt: skip
    results = []
    for row in out[:, L:].tolist():
        resp: list[int] = []
        stopped = False
        for t in row:
            resp.append(t)
            if t in eos:
                stopped = True
                break
        results.append((resp, stopped))
    return results


def logprobs_of(
    model: Any, prompt: list[int], resp: list[int], temperature: float = 1.0
) -> list[float]:
    item = TrainItem(0, "", prompt, resp, [0.0] * len(resp), temperature, 0.0, False, None, "x")
    with torch.no_grad():
        return [float(x) for x in response_logprobs(model, [item], "cpu").logprobs_BT[0]]


def topk_of(
    model: Any, prompt: list[int], resp: list[int], k: int, temperature: float = 1.0
) -> tuple[list[list[int]], list[list[float]]]:
    """The model's top-k ids and log-probs at each response position (the teacher's top-k)."""
    ids = torch.tensor([prompt + resp])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : len(prompt) - 1 + len(resp)]
    lps = torch.log_softmax(logits.float() / temperature, dim=-1)
    top = lps.topk(k, dim=-1)
    return top.indices.tolist(), top.values.tolist()


def batch_entropy(model: Any, items: list[TrainItem]) -> float:
    with torch.no_grad():
        out = response_logprobs(model, items, "cpu")
    m = out.mask_BT
    return float((out.entropy_BT * m).sum() / m.sum())


def entropy_backtrack(model: Any, items: list[TrainItem], before: list[Any], cap: float) -> int:
    """Halve this step's update while the policy's entropy on the batch exceeds the base's
    by more than `cap` (relative); the number of halvings."""
    with model.disable_adapter():
        base = batch_entropy(model, items)
    params = [q for q in model.parameters() if q.requires_grad]
    n = 0
    while n < 6 and batch_entropy(model, items) > base * (1 + cap):
        with torch.no_grad():
            for q, b in zip(params, before, strict=True):
                q.copy_(b + 0.5 * (q - b))
        n += 1
    print(json.dumps({"base_entropy": base, "now": batch_entropy(model, items), "halvings": n}))
    return n


def guard_view(model: Any, fmt: ChatFormatter, user: User) -> dict[str, Any]:
    """What the regression guard answers at its default settings (greedy): the general set's
    questions (48 tokens), the shipped open prompts (160) and 12 of the user's own prompts
    (the user's budget), each answer's form; `bench/guard_study.py` replays decision rules on
    these."""
    items = load_general_set()[:40]

    def ask(qs: list[str], n: int) -> list[str]:
        got = generate(
            model, fmt, [fmt.render([{"role": "user", "content": q}]) for q in qs], n, True
        )
        return [fmt.decode(r) for r, _ in got]

    facts = ask([i.question for i in items], 48)
    opens = ask([p.prompt for p in load_open_prompts()[:12]], 160)
    mine = ask(user.prompts[:12], user.max_tokens)
    return {
        "facts_ok": [is_correct(i, a) for i, a in zip(items, facts, strict=True)],
        "facts_deg": [degeneration(a).degenerate for a in facts],
        "open_deg": [degeneration(a).degenerate for a in opens],
        "user_deg": [degeneration(a).degenerate for a in mine],
        "user_rep": [degeneration(a).repeated_share for a in mine],
        "open_answers": opens, "user_answers": mine,
    }  # fmt: skip


def evaluate(model: Any, fmt: ChatFormatter, user: User, guard: bool = False) -> dict[str, Any]:
    model.eval()
    view = guard_view(model, fmt, user) if guard else None
    asks = [fmt.render([{"role": "user", "content": q}]) for q in user.held_out]
    got = generate(model, fmt, asks, user.max_tokens, greedy=True)
    texts = [fmt.decode(r) for r, _ in got]
    open_got = generate(
        model, fmt, [fmt.render([{"role": "user", "content": q}]) for q in OPEN], 128, True
    )
    open_texts = [fmt.decode(r) for r, _ in open_got]
    model.train()
    forms = [degeneration(t) for t in texts]
    open_forms = [degeneration(t) for t in open_texts]
    n = len(texts)
    return {
        "compliant": sum(user.complies(t, s) for t, (_, s) in zip(texts, got, strict=True)) / n,
        "degenerate": sum(f.degenerate for f in forms) / n,
        "looping": sum(f.max_phrase_repeats >= 3 for f in forms) / n,
        "open_looping": sum(f.max_phrase_repeats >= 3 for f in open_forms) / len(OPEN),
        "open_degenerate": sum(f.degenerate for f in open_forms) / len(OPEN),
        "words": sum(len(t.split()) for t in texts) / n,
        "answers": texts,
        "open_answers": open_texts,
        **({"guard": view} if view else {}),
    }


def run(user: User, args: argparse.Namespace, model_path: Path) -> dict[str, Any]:
    torch.manual_seed(args.seed)
    work = Path(tempfile.mkdtemp(prefix="clawrl-collapse-"))
    cfg = TrainerConfig(
        store_path=str(work / "s.sqlite3"), checkpoints_dir=str(work / "ckpt"),
        model_path=str(model_path), method=args.method, batch_size=4, lr=args.lr,
        baseline=args.baseline, resume_from="none", seed=args.seed, **args.extra,
    )  # fmt: skip
    trainer = Trainer(cfg)
    if args.opd_clip is not None:
        trainer.loss_cfg = replace(trainer.loss_cfg, opd_clip=args.opd_clip)
    model, fmt = trainer.model, ChatFormatter(trainer.tokenizer)
    rows: list[dict[str, Any]] = [{"round": 0, **evaluate(model, fmt, user, args.guard_view)}]
    print(
        json.dumps({"user": user.name, "round": 0, "compliant": rows[0]["compliant"]}), flush=True
    )
    steps: list[dict[str, Any]] = []
    for r in range(1, args.rounds + 1):
        qs = [user.prompts[(4 * (r - 1) + i) % len(user.prompts)] for i in range(4)]
        msgs = [[{"role": "user", "content": q}] for q in qs]
        prompts = [fmt.render(m) for m in msgs]
        model.eval()
        got = generate(model, fmt, prompts, user.max_tokens, False, args.temperature, args.top_p)
        items: list[TrainItem] = []
        for m, p, (resp, stopped) in zip(msgs, prompts, got, strict=True):
            text = fmt.decode(resp)
            ok = user.complies(text, stopped) and r > args.reject_first
            old = logprobs_of(model, p, resp, args.temperature)
            teacher, top = None, None
            if not ok and not (args.no_teacher_on_loops and degeneration(text).degenerate):
                t_prompt = fmt.render(teacher_messages(m, user.correction))
                with model.disable_adapter():
                    teacher = logprobs_of(model, t_prompt, resp, args.teacher_temperature)
                    if args.topk:
                        top = topk_of(model, t_prompt, resp, args.topk, args.teacher_temperature)
                    if args.hint_effect:  # the gap becomes what the hint changes in the base
                        plain = logprobs_of(model, p, resp, args.teacher_temperature)
                if args.hint_effect:
                    now = logprobs_of(model, p, resp, 1.0)
                    teacher = [t - b + s for t, b, s in zip(teacher, plain, now, strict=True)]
            items.append(TrainItem(
                len(items), "s", p, resp, old, args.temperature, 1.0 if ok else -1.0, True,
                teacher, "x", *(top or (None, None)),
            ))  # fmt: skip
            if not ok and args.teacher_answers == "cut" and asks_for_less(user.correction):
                t_prompt = fmt.render(teacher_messages(m, user.correction))
                body = resp[:-1] if stopped else resp
                end = resp[-1] if stopped else fmt.tokenizer.eos_token_id

                async def with_hint(r: list[int], t_prompt: list[int] = t_prompt) -> list[float]:
                    with model.disable_adapter():
                        return logprobs_of(model, t_prompt, r)

                cut = asyncio.run(cut_of(body, end, fmt.decode, with_hint))
                if cut is not None:  # the app's rules (judging/teacher_cut.py, stop_pair)
                    demo = TrainItem(len(items), "t", p, cut, [], args.temperature, 1.0, True,
                                     None, "x", demonstration=True)  # fmt: skip
                    pair = None if args.no_stop_pair else stop_pair(items[-1], demo)
                    items[-1:] = list(pair) if pair is not None else [items[-1], demo]
            elif not ok and args.teacher_answers:
                t_prompt = fmt.render(teacher_messages(m, user.correction))
                with model.disable_adapter():
                    model.eval()
                    ((t_resp, t_stopped),) = generate(
                        model,
                        fmt,
                        [t_prompt],
                        user.max_tokens,
                        args.teacher_answers == "greedy",
                        args.temperature,
                    )
                    model.train()
                    t_text = fmt.decode(t_resp)
                    gain = (
                        sum(logprobs_of(model, t_prompt, t_resp))
                        - sum(logprobs_of(model, p, t_resp))
                    ) / len(t_resp)
                if (
                    t_stopped
                    and not degeneration(t_text).degenerate
                    and not quotes(t_text, user.correction)
                    and gain >= MIN_HINT_GAIN
                ):  # the app's rule (judging/teacher_answer.py)
                    items.append(TrainItem(
                        len(items), "t", p, t_resp, logprobs_of(model, p, t_resp, args.temperature),
                        args.temperature, 1.0, True, None, "x",
                    ))  # fmt: skip
        if args.greedy_negatives:  # the policy's own loops, punished where they show
            model.eval()
            for p, (g_resp, _) in zip(
                prompts, generate(model, fmt, prompts, user.max_tokens, True), strict=True
            ):
                if degeneration(fmt.decode(g_resp)).degenerate:
                    items.append(TrainItem(
                        len(items), "g", p, g_resp, logprobs_of(model, p, g_resp, args.temperature),
                        args.temperature, -1.0, True, None, "x",
                    ))  # fmt: skip
        model.train()
        t0 = time.monotonic()
        before = [q.detach().clone() for q in model.parameters() if q.requires_grad]
        step_metrics = trainer.train_step(items)
        if args.entropy_cap is not None and "optim/skipped" not in step_metrics:
            step_metrics["backtracks"] = entropy_backtrack(model, items, before, args.entropy_cap)
        rewards = [it.reward for it in items]
        print(
            json.dumps(
                {
                    "teacher_answers": [
                        fmt.decode(it.response_ids) for it in items if it.session_id == "t"
                    ],
                    "greedy_loops": [
                        fmt.decode(it.response_ids)[:80] for it in items if it.session_id == "g"
                    ],
                }
            )
        )
        steps.append({
            "round": r, "reward": sum(rewards) / 4, "contrast": len(set(rewards)) > 1,
            "entropy": step_metrics.get("entropy"), "kl": step_metrics.get("kl"),
            "adv_mean": step_metrics.get("adv/mean"), "backtracks": step_metrics.get("backtracks"),
            "grad_norm": step_metrics.get("optim/grad_norm"), "step_s": round(time.monotonic() - t0, 1),
            "words": sum(len(fmt.decode(r).split()) for r, _ in got) / 4,
            "rewards": rewards, "texts": [fmt.decode(r) for r, _ in got],
        })  # fmt: skip
        print(
            json.dumps({"user": user.name, **{k: v for k, v in steps[-1].items() if k != "texts"}}),
            flush=True,
        )
        if r % args.eval_every == 0 or r == args.rounds:
            rows.append({"round": r, **evaluate(model, fmt, user, args.guard_view)})
            short = {k: v for k, v in rows[-1].items() if not k.endswith("answers")}
            print(json.dumps({"user": user.name, **short}), flush=True)
    return {"user": user.name, "evals": rows, "steps": steps}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--users", default="u15", help=f"{', '.join(USERS)} or a bench/learn.py user (calm/plain)"
    )
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--eval-every", type=int, default=4)
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--baseline", default="batch_mean")
    ap.add_argument(
        "--guard-view",
        action="store_true",
        help="record what the guard answers at each evaluation (bench/guard_study.py)",
    )
    ap.add_argument(
        "--greedy-negatives",
        action="store_true",
        help="punish the policy's greedy answers to the round's prompts that are degenerate",
    )
    ap.add_argument(
        "--teacher-answers",
        choices=["greedy", "sample", "cut"],
        default=None,
        help="also train on the hinted base model's own answer (reward +1) for each rejected "
        "one; cut: on the rejected answer cut where that model would stop (judge.teacher_cut)",
    )
    ap.add_argument("--no-stop-pair", action="store_true",
                    help="with --teacher-answers cut: train the cut and the answer whole, "
                    "batch-mean baseline (before stop_pair)")  # fmt: skip
    ap.add_argument("--method", default="combine")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--temperature",
        type=float,
        default=1.0,
        help="sampling temperature (the embedded model's server default is 0.2)",
    )
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument(
        "--teacher-temperature",
        type=float,
        default=1.0,
        help="temperature of the teacher's log-probs (the backends' score: 1)",
    )
    ap.add_argument("--set", action="append", default=[],
                    help="extra TrainerConfig field, e.g. --set kl_coef=0.1")  # fmt: skip
    ap.add_argument("--no-teacher-on-loops", action="store_true",
                    help="a degenerate answer gets the reward only, no teacher")  # fmt: skip
    ap.add_argument("--hint-effect", action="store_true",
                    help="teacher gap = base with hint - base without it (not - the policy)")  # fmt: skip
    ap.add_argument("--opd-clip", type=float, default=None, help="bound of the teacher gap")
    ap.add_argument("--topk", type=int, default=0,
                    help="also score the teacher's top-k per position (for --method combine-topk)")  # fmt: skip
    ap.add_argument("--entropy-cap", type=float, default=None,
                    help="halve a step while the batch entropy exceeds the base's by this share")  # fmt: skip
    ap.add_argument("--reject-first", type=int, default=0,
                    help="the user rejects every answer of the first N rounds")  # fmt: skip
    ap.add_argument("--signal-norm", type=float, default=0.0,
                    help="scale each step's lr by min(1, gradient norm / this)")  # fmt: skip
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    args.extra = {k: json.loads(v) for k, v in (s.split("=", 1) for s in args.set)}
    if args.signal_norm:  # the trainer's own `signal_norm` (step_size.signal_lr)
        args.extra["signal_norm"] = args.signal_norm
    torch.set_num_threads(int(os.environ.get("THREADS", "2")))
    model_path = resolve_model(None, app_paths(Path(os.environ.get("CLAWRL_HOME", "."))))
    users = [USERS[u] if u in USERS else persona_user(u) for u in args.users.split(",")]
    results = [run(u, args, model_path.path) for u in users]
    summary = {"args": {k: v for k, v in vars(args).items() if k != "out"}, "runs": results}
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1, default=str))
    print(
        "| user | round | compliant | degenerate | looping | open degenerate | open looping | words |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for res in results:
        for e in res["evals"]:
            print(f"| {res['user']} | {e['round']} | {e['compliant']:.2f} | {e['degenerate']:.2f} | "
                  f"{e['looping']:.2f} | {e['open_degenerate']:.2f} | {e['open_looping']:.2f} | "
                  f"{e['words']:.1f} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
