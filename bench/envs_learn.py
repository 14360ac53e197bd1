"""`bench/envs.py --learn`: does env training make the embedded model better (issue #27)?

Per seed, on a fresh engine home with training on (method `rl`, the app's trainer and
publishing; the regression guard off, the general score is measured here instead), with
every env turn a forced tool call (`[envs] tool_choice = "required"`):

(The seed varies the rollouts and task order; the trainer's own seed is the app's.)

1. held-out success of the env's `--families` (one greedy episode per held-out task) and the
   general score (`general_eval`'s shipped set, greedy, through the endpoint, incognito);
2. rounds: one rollout group (`--group-size` episodes at `--temperature`, 1 by default)
   for each of `--tasks-per-round` train tasks, recorded by the engine; then, once the
   trainer's queue holds a batch (`--batch-size` samples with signal; fewer carry over to
   the next round), a wait until it has made and published a checkpoint; then held-out
   success again. One line per round: train solved, groups with variance, checkpoints,
   served version, held-out success, training wall time;
3. after the last round (or `--budget-min` of training wall time), the general score again;
4. with `--validation N` (3 by default; 0: off), N train tasks per family are never rolled
   out but answered greedily by each new served version (`envs/selection.py`, what `env
   train` does); at the end the version that solved most of them is served if it beats the
   last, and held-out success is measured again on it ("kept").

Prints one markdown row per seed. Run: `CLAWRL_HOME=/tmp/clawrl-test-cache .venv/bin/python
bench/envs.py --learn [--env toolcall] [--families calc_one,lookup_one,calc_two]
[--rounds 8] [--seeds 0,1] [--budget-min 30]`.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from clawrl_app.config import load_settings
from clawrl_app.engine.engine_thread import EngineThread
from clawrl_app.envs import make_env
from clawrl_app.envs.base import Episode, Task
from clawrl_app.envs.endpoint_policy import EndpointPolicy
from clawrl_app.envs.engine_client import EngineClient
from clawrl_app.envs.selection import Validation, validation_split
from clawrl_app.envs.training import (
    DECIDED,
    RolloutHooks,
    RolloutSettings,
    check_validation,
    checkpoint_count,
    evaluate_env,
    run_round,
    split_tasks,
    wait_decided,
)
from clawrl_app.general_eval import load_general_set, score_answers
from clawrl_app.paths import app_paths


def add_learn_flags(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--learn", action="store_true", help="the learning benchmark (this module)")
    ap.add_argument("--env", default="toolcall", help="--learn: the env")
    ap.add_argument("--families", default="calc_one,lookup_one,calc_two",
                    help="--learn: task families (comma-separated; empty: all)")  # fmt: skip
    ap.add_argument("--rounds", type=int, default=8, help="--learn: training rounds")
    ap.add_argument("--seeds", default="0,1", help="--learn: seeds (one engine each)")
    ap.add_argument("--budget-min", type=float, default=30.0,
                    help="--learn: stop after this much training wall time")  # fmt: skip
    ap.add_argument("--general-items", type=int, default=20,
                    help="--learn: general questions asked before and after (0: none)")  # fmt: skip
    ap.add_argument("--wait-s", type=float, default=600.0,
                    help="--learn: longest wait for a round's checkpoint")  # fmt: skip
    ap.add_argument("--keep-home", action="store_true",
                    help="--learn: keep each seed's app home (its store holds every episode)")  # fmt: skip
    ap.add_argument("--temperature", type=float, default=1.0,
                    help="--learn: the rollouts' sampling temperature")  # fmt: skip
    ap.add_argument("--show-failures", action="store_true",
                    help="--learn: print each unsolved held-out task and the calls made")  # fmt: skip
    ap.add_argument("--validation", type=int, default=3,
                    help="--learn: train tasks per family set aside to keep the best version "
                    "(0: keep the last)")  # fmt: skip
    ap.add_argument("--judge", choices=["heuristic", "none"], default="heuristic",
                    help="--learn: the step judge (none: outcome rewards only, so only "
                    "groups whose outcomes differ teach)")  # fmt: skip


def progress(msg: str) -> None:
    print(f"[envs --learn] {msg}", file=sys.stderr, flush=True)


def general_score(thread: Any, alias: str, n: int) -> float | None:
    """The general set's score (first `n` items, greedy, 48 tokens), never recorded."""
    if n <= 0:
        return None
    from openai import OpenAI

    items = load_general_set()[:n]
    client = OpenAI(base_url=thread.url, api_key=thread.engine.api_key or "x", max_retries=0)
    answers = []
    try:
        for it in items:
            r = client.chat.completions.create(
                model=alias, messages=[{"role": "user", "content": it.question}],
                temperature=0, max_tokens=48, extra_headers={"X-Session-Incognito": "1"},
            )  # fmt: skip
            answers.append(r.choices[0].message.content or "")
    finally:
        client.close()
    return score_answers(items, answers).score


def pending_samples(client: EngineClient) -> int:
    """Samples judged and not yet trained (the trainer's queue)."""
    return int(client.status().get("counts", {}).get("samples_judged", 0))


def wait_checkpoint(client: EngineClient, before: int, wait_s: float) -> str:
    """Wait up to `wait_s` for a checkpoint past `before` to be published (or refused); the
    served version."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        cps = client.checkpoints()
        rows = cps.get("data", [])
        if len(rows) > before and rows[0]["status"] in DECIDED:
            return str(cps.get("served"))
        time.sleep(2.0)
    return str(client.checkpoints().get("served"))


def learn_seed(seed: int, args: argparse.Namespace, model_dir: Path) -> dict[str, Any]:
    name = args.env
    home = Path(tempfile.mkdtemp(prefix=f"clawrl-envs-learn-{name}-"))
    env = {
        "CLAWRL_MODEL__PATH": str(model_dir), "CLAWRL_SERVER__PORT": "0",
        "CLAWRL_TRAIN__ENABLED": "true", "CLAWRL_TRAIN__METHOD": "rl",
        "CLAWRL_TRAIN__BATCH_SIZE": str(args.batch_size),
        "CLAWRL_REVIEW__GRACE_S": "0", "CLAWRL_GUARD__ENABLED": "false",
        "CLAWRL_ENVS__TOOL_CHOICE": "required",
    }  # fmt: skip
    if args.lr:
        env["CLAWRL_TRAIN__LR"] = str(args.lr)
    settings = load_settings(env=env).settings
    thread = EngineThread(settings, app_paths(home)).start()
    client = EngineClient(thread.base, thread.engine.api_key, timeout_s=300)
    families = tuple(f for f in args.families.split(",") if f)
    cfg = RolloutSettings(
        group_size=args.group_size, tasks_per_round=args.tasks_per_round,
        max_tokens=args.max_tokens, seed=seed, families=families, reward_mode="sequence",
        judge=args.judge, temperature=args.temperature,
    )  # fmt: skip
    alias = settings.server.model_alias

    def policy_for(temp: float) -> Any:
        return lambda s: EndpointPolicy(
            base_url=thread.url, env_name=name, model=alias, api_key=thread.engine.api_key,
            temperature=temp, max_tokens=args.max_tokens, seed=s if temp == 0 else None,
            tool_choice=settings.envs.tool_choice_for(name),
        )  # fmt: skip

    def heldout() -> tuple[float, str]:
        seen: list[tuple[Task, Episode]] = []
        hooks = RolloutHooks(on_episode=lambda task, ep: seen.append((task, ep)))
        rate, rep = evaluate_env(
            name, client, policy_for(0.0), cfg, limit=args.heldout_limit, hooks=hooks
        )
        progress(f"seed {seed}: held-out {family_line(seen)}")
        if args.show_failures:
            for line in failure_lines(seen):
                progress(f"seed {seed}:   {line}")
        return rate, f"{rep.successes}/{rep.episodes}"

    out: dict[str, Any] = {"seed": seed}
    try:
        t_start = time.monotonic()
        base, base_s = heldout()
        general0 = general_score(thread, alias, args.general_items)
        progress(f"seed {seed}: held-out before {base_s} ({base:.0%}), general {general0}")
        tasks, held = validation_split(
            split_tasks(make_env(name).tasks(), "train", families), args.validation
        )
        validation = Validation(held)
        check_validation(validation, name, client, policy_for(0.0), cfg)
        rng = random.Random(seed)
        train_s, rate, rate_s, best = 0.0, base, base_s, base
        for r in range(args.rounds):
            t0 = time.monotonic()
            before = checkpoint_count(client)
            batch = rng.sample(tasks, min(cfg.tasks_per_round, len(tasks)))
            rep = run_round(name, batch, client, policy_for(cfg.temperature), cfg, round_index=r)
            # the trainer steps on `--batch-size` samples with signal: fewer wait for the
            # next round's (waiting here would only idle until --wait-s)
            batch_ready = rep.signal and pending_samples(client) >= args.batch_size
            served = wait_checkpoint(client, before, args.wait_s if batch_ready else 0.0)
            train_s += time.monotonic() - t0
            rate, rate_s = heldout()
            best = max(best, rate)
            scored = check_validation(validation, name, client, policy_for(0.0), cfg)
            if scored:
                progress(f"seed {seed} round {r + 1}: validation {scored[0]} {scored[1]:.2f}")
            progress(
                f"seed {seed} round {r + 1}: train {rep.successes}/{rep.episodes} solved, "
                f"groups with variance {rep.varied}/{rep.groups} "
                f"({rep.outcome_varied} in outcome), "
                f"{checkpoint_count(client) - before} checkpoint(s), served {served}, "
                f"held-out {rate_s} ({rate:.0%}), training {train_s / 60:.1f} min"
            )
            if train_s > args.budget_min * 60:
                break
        kept, kept_s, last_s = None, "-", f"{rate_s} ({rate:.0%})"
        if validation.tasks:
            wait_decided(client, args.wait_s)
            check_validation(validation, name, client, policy_for(0.0), cfg)
            progress(f"seed {seed}: {validation.line()}")
            kept = validation.keep_best(client)
            if kept is not None:
                k_rate, k_s = heldout()
                kept_s = f"{k_s} ({k_rate:.0%}, {kept})"
            progress(f"seed {seed}: kept {kept or 'the last'}; held-out {kept_s}")
        general1 = general_score(thread, alias, args.general_items)
        progress(
            f"seed {seed}: held-out after {last_s} (best {best:.0%}, kept {kept_s}), "
            f"general {general1} (of what is served now)"
        )
        out.update(
            before=f"{base_s} ({base:.0%})", after=last_s,
            best=f"{best:.0%}", rounds=r + 1, train_min=f"{train_s / 60:.1f}", kept=kept_s,
            validation=validation.line(),
            general=f"{general0} -> {general1}",
            wall_min=f"{(time.monotonic() - t_start) / 60:.1f}",
        )  # fmt: skip
    finally:
        client.close()
        thread.stop()
        if args.keep_home:
            progress(f"seed {seed}: app home kept at {home}")
        else:
            shutil.rmtree(home, ignore_errors=True)
    return out


def _solved(ep: Episode) -> bool:
    """Counted as `run_round` counts successes (an aborted episode is not one)."""
    return ep.verdict is not None and ep.verdict.success and ep.trainable


def family_line(seen: list[tuple[Task, Episode]]) -> str:
    """Held-out success per family: "calc_one 3/6, lookup_one 2/6"."""
    per: dict[str, list[int]] = {}
    for task, ep in seen:
        n = per.setdefault(task.family or "-", [0, 0])
        n[0] += _solved(ep)
        n[1] += 1
    return ", ".join(f"{fam} {a}/{b}" for fam, (a, b) in sorted(per.items()))


def failure_lines(seen: list[tuple[Task, Episode]]) -> list[str]:
    """Each unsolved task: its prompt, then the calls the model made (or its text)."""
    out = []
    for task, ep in sorted(seen, key=lambda te: te[0].id):
        if _solved(ep):
            continue
        made = [
            f"{a.tool}({json.dumps(a.arguments, sort_keys=True)})" if a.tool else repr(a.text[:60])
            for t in ep.turns
            for a in t.actions
        ] or [repr(t.response_text[:60]) for t in ep.turns]
        want = task.data.get("answer", "?")
        out.append(
            f"{task.id} {task.instruction[:70]!r} (answer {want}): {' ; '.join(made)} [{ep.reason}]"
        )
    return out


def learn_main(args: argparse.Namespace, model_dir: Path) -> int:
    rows = [learn_seed(int(s), args, model_dir) for s in args.seeds.split(",") if s.strip()]
    print(f"env {args.env}, families {args.families or 'all'}, {args.tasks_per_round} tasks x "
          f"{args.group_size} episodes a round, batch {args.batch_size}")  # fmt: skip
    print("| seed | held-out before | held-out after (last / kept) | best | rounds | training min | "
          "general before -> after | wall min |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['seed']} | {r['before']} | {r['after']} / {r['kept']} | {r['best']} | "
              f"{r['rounds']} | {r['train_min']} | {r['general']} | {r['wall_min']} |")  # fmt: skip
    for r in rows:
        print(f"seed {r['seed']}: {r['validation']}")
    return 0
