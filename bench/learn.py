"""Learning benchmark on the embedded model (CPU): does the app learn a user's preference?

A scripted, deterministic simulated user wants every answer in ONE short sentence. Code
checks it (`complies`): at most 20 words, at most one sentence terminator, no line break.
For each training method (`rl`, `opd`, `combine`), on a fresh engine home:

1. Compliance before training on held-out prompts (greedy, side turns: never trained on),
   plus a general-quality check scored by code (does the answer still contain the fact?).
2. Feedback loop: each training prompt is a main turn in a new session (temperature 1.0,
   on-policy sampling); the simulated user then replies in the same session (the next main
   request, `X-Session-Done: 1`): "Thanks, that's perfect!" when the answer complies, else
   a correction that states the preference ("No, that's too long. Answer in one short
   sentence."). The heuristic judge turns that into reward -1 with the user's corrective
   words as the OPD hint; thanks -> +1.
3. Every `--eval-every` feedback turns: wait until the trainer has consumed every usable
   eligible sample and the newest checkpoint is served, then measure held-out compliance
   and general quality again.
4. Latency: 16-token chat probes, and the feedback turns themselves, with the trainer idle
   (before any training, and between steps) vs during a training step (the request
   overlaps the StepStarted -> StepFinished events by at least half); and
   checkpoint-to-first-answer: from a checkpoint's
   registration (`CheckpointRow.created`) to the first answer whose `model` field names
   that version (1-token probes in a tight loop once the checkpoint is noticed).

Results are printed as markdown and appended to `bench/results/learn.md` (with the
command line and date); the raw numbers go to `bench/results/learn-<timestamp>.json`.

Run: `CLAWRL_HOME=/tmp/clawrl-dev HF_HUB_OFFLINE=1 .venv/bin/python bench/learn.py
      [--methods rl,opd,combine] [--turns 32] [--eval-every 8] [--lr 5e-4] [--batch-size 4]`
(`CLAWRL_HOME` only locates the converted embedded model; each method gets a fresh home.)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import signal
import statistics
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from learn_drive import (  # noqa: E402
    SIDE,
    CheckpointWatcher,
    Probe,
    StepWindows,
    TrainerCPU,
    latency_probe,
    post_chat,
)
from learn_report import _median, report  # noqa: E402
from learn_user import (  # noqa: E402
    HELDOUT_PROMPTS,
    QUALITY_PROMPTS,
    TRAIN_PROMPTS,
    complies,
    reaction,
)

from clawrl_app.config import load_settings  # noqa: E402
from clawrl_app.engine.engine_thread import EngineThread  # noqa: E402
from clawrl_app.models import resolve_model  # noqa: E402
from clawrl_app.paths import app_paths  # noqa: E402

# --- driving the engine ---------------------------------------------------------------------


def _ask(url: str, prompt: str, max_tokens: int) -> dict[str, Any]:
    with httpx.Client(timeout=600) as client:
        return post_chat(
            client,
            url,
            [{"role": "user", "content": prompt}],
            max_tokens=max_tokens,
            temperature=0.0,
            headers=SIDE,
        )


def evaluate(url: str, max_tokens: int, workers: int) -> dict[str, Any]:
    """Held-out compliance and general quality: greedy side turns, `workers` at a time (the
    backend decodes concurrent requests in one batch)."""
    prompts = HELDOUT_PROMPTS + [p for p, _ in QUALITY_PROMPTS]
    t0 = time.time()
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        answers = list(pool.map(lambda p: _ask(url, p, max_tokens), prompts))
    held, qual = [], []
    for p, j in zip(HELDOUT_PROMPTS, answers, strict=False):
        text = j["choices"][0]["message"]["content"] or ""
        held.append({"prompt": p, "answer": text, "ok": complies(text), "model": j["model"]})
    for (p, pattern), j in zip(QUALITY_PROMPTS, answers[len(HELDOUT_PROMPTS) :], strict=True):
        text = j["choices"][0]["message"]["content"] or ""
        ok = re.search(pattern, text, re.IGNORECASE) is not None
        qual.append({"prompt": p, "answer": text, "ok": ok, "model": j["model"]})
    return {
        "compliance": sum(h["ok"] for h in held) / len(held),
        "quality": sum(q["ok"] for q in qual) / len(qual),
        "models": sorted({h["model"] for h in held} | {q["model"] for q in qual}),
        "eval_s": time.time() - t0,
        "heldout": held,
        "general": qual,
    }


def usable(store: Any, method: str) -> int:
    """Eligible judged samples the trainer could still use under `method` (train_data rules)."""
    n = 0
    for s in store.trainable_samples(10_000):
        j = store.get_judgment(s.id)
        if j is None:
            continue
        has_rl = method in ("rl", "combine") and j.score != 0
        has_opd = method in ("opd", "combine") and j.teacher_logprobs is not None
        n += int(has_rl or has_opd)
    return n


def settle(
    et: EngineThread,
    method: str,
    batch_size: int,
    client: httpx.Client,
    cpu: TrainerCPU,
    watcher: CheckpointWatcher,
    probes: list[Probe],
    timeout_s: float,
    probe_every: float,
) -> dict[str, Any]:
    """Wait until collection and judging caught up, the trainer consumed every usable
    eligible sample, and the newest checkpoint is served; latency probes meanwhile."""
    store, backend = et.engine.store, et.engine.backend
    assert store is not None and backend is not None
    t0 = time.time()
    while True:
        st = store.session_stats()
        caught_up = st["samples"] >= st["turns_main"] and st.get("samples_pending", 0) == 0
        left = usable(store, method) if caught_up else None
        ckpts = store.list_checkpoints()
        newest = max(ckpts, key=lambda c: c.created) if ckpts else None
        served = (
            newest is None or backend.active_version == newest.version or newest.status == "refused"
        )
        if caught_up and left is not None and left < batch_size and served and not watcher.busy():
            return {"waited_s": time.time() - t0, "leftover": left, "timed_out": False}
        if time.time() - t0 > timeout_s:
            return {"waited_s": time.time() - t0, "leftover": left, "timed_out": True}
        probes.append(latency_probe(client, et.url, cpu, "loop"))
        time.sleep(probe_every)


def trace_backend(et: EngineThread) -> None:
    """Diagnostics (`--trace`): print when the backend starts/ends adapter loads and scoring."""
    b = et.engine.backend
    for name in ("load_adapter", "score", "activate"):
        orig = getattr(b, name)

        def wrap(orig: Any = orig, name: str = name) -> Any:
            async def traced(*a: Any, **k: Any) -> Any:
                t0 = time.time()
                try:
                    return await orig(*a, **k)
                finally:
                    print(f"  [trace] {name} {t0:.2f} -> {time.time():.2f}", flush=True)

            return traced

        setattr(b, name, wrap())


def stop_signal(et: EngineThread, sessions: list[str]) -> dict[str, Any]:
    """Where the OPD teacher pushes: the token advantage A = log pi_teacher - log pi_old at
    the first token after the answer's first sentence (the "go on" decision the user
    objects to) vs. on every other token, over the hinted training samples."""
    store, fmt = et.engine.store, et.engine.service.formatter  # type: ignore[union-attr]
    at_stop: list[float] = []
    other: list[float] = []
    for sid in sessions:
        for smp in store.samples_for_session(sid):  # type: ignore[union-attr]
            j = store.get_judgment(smp.id)  # type: ignore[union-attr]
            turn = store.get_turn(smp.turn_id)  # type: ignore[union-attr]
            if j is None or turn is None or j.teacher_logprobs is None:
                continue
            ids = turn.response_ids
            adv = [t - o for t, o in zip(j.teacher_logprobs, turn.logprobs, strict=True)]
            k = next(
                (
                    i + 1
                    for i in range(len(ids))
                    if re.search(r"[.!?][\"')\]]?\s*$", fmt.decode(ids[: i + 1]))
                ),
                None,
            )
            if k is None or k >= len(ids):
                continue
            at_stop.append(adv[k])
            other += adv[:k] + adv[k + 1 :]
    return {
        "n": len(at_stop),
        "stop_median": _median(at_stop),
        "stop_negative": sum(a < 0 for a in at_stop),
        "other_mean": statistics.fmean(other) if other else None,
        "other_mean_abs": statistics.fmean(abs(a) for a in other) if other else None,
        "other_tokens": len(other),
    }


def run_method(method: str, args: argparse.Namespace, model_dir: Path) -> dict[str, Any]:
    env = {
        "CLAWRL_MODEL__PATH": str(model_dir),
        "CLAWRL_SERVER__PORT": "0",
        "CLAWRL_TRAIN__METHOD": method,
        "CLAWRL_TRAIN__BATCH_SIZE": str(args.batch_size),
        "CLAWRL_TRAIN__LR": "" if args.lr is None else str(args.lr),  # "" = the app's default
        "CLAWRL_TRAIN__LORA_RANK": str(args.lora_rank),
        "CLAWRL_REVIEW__GRACE_S": "0",
        "CLAWRL_JUDGE__BACKEND": "heuristic",
    }
    home = tempfile.mkdtemp(prefix=f"clawrl-learn-{method}-")
    events: list[Any] = []
    watcher_ref: list[CheckpointWatcher] = []

    steps = StepWindows()

    def sink(ev: Any) -> None:
        events.append(ev)
        steps.on_event(ev)
        if watcher_ref:
            watcher_ref[0].on_event(ev)

    t_start = time.time()
    load_start = os.getloadavg()
    et = EngineThread(load_settings(env=env).settings, app_paths(home), events=sink).start()
    store = et.engine.store
    assert store is not None
    cpu = TrainerCPU(et)
    if args.trace:
        trace_backend(et)
    watcher = CheckpointWatcher(et)
    watcher_ref.append(watcher)
    probes: list[Probe] = []
    evals: list[dict[str, Any]] = []
    turns: list[dict[str, Any]] = []
    settles: list[dict[str, Any]] = []
    try:
        with httpx.Client(timeout=300) as client:
            print(f"[{method}] engine up at {et.url} (home {home})", flush=True)
            trainer_start_s = cpu.wait_idle()
            print(f"[{method}] trainer idle after {trainer_start_s:.0f}s", flush=True)
            for _ in range(args.latency_probes):
                probes.append(latency_probe(client, et.url, cpu, "before"))
            ev = evaluate(et.url, args.max_tokens, args.eval_workers)
            ev["after_turns"] = 0
            evals.append(ev)
            print(
                f"[{method}] before: compliance {ev['compliance']:.2f} quality {ev['quality']:.2f}",
                flush=True,
            )
            watcher.start()
            for i in range(args.turns):
                prompt = TRAIN_PROMPTS[i % len(TRAIN_PROMPTS)]
                sid = f"learn-{method}-{i:03d}-{uuid.uuid4().hex[:8]}"
                msgs = [{"role": "user", "content": prompt}]
                c0, t0 = cpu.seconds(), time.time()
                j = post_chat(
                    client,
                    et.url,
                    msgs,
                    max_tokens=args.max_tokens,
                    temperature=1.0,
                    headers={"X-Session-Id": sid},
                    seed=args.seed + i,
                )
                t1, c1 = time.time(), cpu.seconds()
                answer = j["choices"][0]["message"]["content"] or ""
                ok = complies(answer)
                reply = reaction(answer)
                msgs += [
                    {"role": "assistant", "content": answer},
                    {"role": "user", "content": reply},
                ]
                post_chat(
                    client,
                    et.url,
                    msgs,
                    max_tokens=8,
                    temperature=0.0,
                    headers={"X-Session-Id": sid, "X-Session-Done": "1"},
                )
                turns.append(
                    {
                        "i": i,
                        "session": sid,
                        "prompt": prompt,
                        "answer": answer,
                        "ok": ok,
                        "model": j["model"],
                        "latency_s": t1 - t0,
                        "t0": t0,
                        "t1": t1,
                        "tokens": int(j["usage"]["completion_tokens"]),
                        "trainer_cores": (c1 - c0) / (t1 - t0),
                    }
                )
                print(
                    f"[{method}] turn {i + 1:3d} {j['model']:>12} {'OK ' if ok else 'NO '}"
                    f"{answer[:70]!r}",
                    flush=True,
                )
                if (i + 1) % args.eval_every == 0 or i + 1 == args.turns:
                    s = settle(
                        et,
                        method,
                        args.batch_size,
                        client,
                        cpu,
                        watcher,
                        probes,
                        args.settle_s,
                        args.probe_every,
                    )
                    s["after_turns"] = i + 1
                    settles.append(s)
                    ev = evaluate(et.url, args.max_tokens, args.eval_workers)
                    ev["after_turns"] = i + 1
                    ev["steps"] = len(store.list_checkpoints())
                    evals.append(ev)
                    print(
                        f"[{method}] after {i + 1} turns ({ev['steps']} steps, served "
                        f"{ev['models']}, waited {s['waited_s']:.0f}s"
                        f"{' TIMEOUT' if s['timed_out'] else ''}): compliance "
                        f"{ev['compliance']:.2f} quality {ev['quality']:.2f}",
                        flush=True,
                    )
        watcher.stop()
        ckpts = store.list_checkpoints()
        metrics: dict[str, list[float]] = {}
        for name in (
            "loss",
            "pg_loss",
            "samples/rl",
            "samples/opd",
            "samples/both",
            "reward/mean",
            "adv/mean",
            "clip_frac",
            "ratio_mean",
            "optim/grad_norm",
            "time/step_s",
            "time/paused_s",
            "tokens",
        ):
            metrics[name] = [m.value for m in store.metrics(name)]
        skipped: dict[str, int] = {}
        states: dict[str, int] = {}
        hints = 0
        for sess in store.list_sessions(limit=10_000):
            if not sess.id.startswith("learn-"):
                continue
            for smp in store.samples_for_session(sess.id):
                states[smp.state] = states.get(smp.state, 0) + 1
                if (
                    smp.state == "skipped"
                    and smp.skip_reason
                    and "no next state" not in (smp.skip_reason)
                ):
                    key = smp.skip_reason.split(":")[0]
                    skipped[key] = skipped.get(key, 0) + 1
                j = store.get_judgment(smp.id)
                if j is not None and j.teacher_logprobs is not None:
                    hints += 1
        stop = stop_signal(et, [t["session"] for t in turns])
        for p in probes:
            p.in_step = steps.share(p.t0, p.t1)
        for t in turns:
            t["in_step"] = steps.share(t["t0"], t["t1"])
        trainer_log = Path(home) / "logs" / "trainer.log"
        log_tail = trainer_log.read_text(errors="replace")[-3000:] if trainer_log.exists() else ""
        return {
            "method": method,
            "home": home,
            "wall_s": time.time() - t_start,
            "loadavg_start": load_start,
            "trainer_start_s": trainer_start_s,
            "loadavg_end": os.getloadavg(),
            "evals": evals,
            "turns": turns,
            "settles": settles,
            "checkpoints": [
                {
                    "version": c.version,
                    "step": c.step,
                    "created": c.created,
                    "status": c.status,
                    "metrics": c.metrics,
                }
                for c in ckpts
            ],
            "first_answer": [
                {
                    "version": fa.version,
                    "outcome": fa.outcome,
                    "seconds": fa.seconds,
                    "publish_s": None if fa.published_at is None else fa.published_at - fa.created,
                    "probes": fa.probes,
                }
                for fa in watcher.results.values()
            ],
            "probes": [p.__dict__ for p in probes],
            "metrics": metrics,
            "sample_states": states,
            "skip_reasons": skipped,
            "samples_with_teacher": hints,
            "stop_signal": stop,
            "training_status": et.engine.status().get("training"),
            "trainer_log_tail": log_tail,
        }
    finally:
        with contextlib.suppress(Exception):
            watcher.stop()
        et.stop()


def main() -> None:
    # SIGTERM -> SystemExit, so `finally: et.stop()` also stops the trainer process
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--methods", default="rl,opd,combine", help="comma-separated")
    ap.add_argument("--turns", type=int, default=32, help="feedback turns per method")
    ap.add_argument("--eval-every", type=int, default=8, help="evaluate after every K turns")
    ap.add_argument(
        "--lr", type=float, default=None, help="trainer learning rate (default: the app's)"
    )
    ap.add_argument("--batch-size", type=int, default=4, help="samples per optimizer step")
    ap.add_argument("--lora-rank", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=48, help="answer budget (train and eval)")
    ap.add_argument("--seed", type=int, default=1000, help="sampling seed of turn 0")
    ap.add_argument("--latency-probes", type=int, default=5, help="idle probes before training")
    ap.add_argument("--settle-s", type=float, default=600, help="longest wait for the trainer")
    ap.add_argument("--eval-workers", type=int, default=6, help="concurrent eval requests")
    ap.add_argument("--probe-every", type=float, default=3.0, help="latency probe spacing (s)")
    ap.add_argument(
        "--threads",
        type=int,
        default=0,
        help="torch/OpenMP threads for serving and the trainer (0 = leave the defaults)",
    )
    ap.add_argument("--trace", action="store_true", help="print backend publish/score timings")
    ap.add_argument("--note", default="", help="free text recorded with the results")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "learn.md"))
    args = ap.parse_args()
    if args.threads > 0:  # serving (this process) and the trainer process (inherits the env)
        os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(args.threads)
        torch.set_num_threads(args.threads)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    for m in methods:
        if m not in ("rl", "opd", "combine"):
            ap.error(f"unknown method {m!r}")
    cmd = "CLAWRL_HOME=/tmp/clawrl-dev HF_HUB_OFFLINE=1 .venv/bin/python " + " ".join(
        shlex.quote(a) for a in ["bench/learn.py", *sys.argv[1:]]
    )
    date = datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    model = resolve_model(None, app_paths())
    runs = [run_method(m, args, model.path) for m in methods]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    raw = out.parent / f"learn-{stamp}.json"
    raw.write_text(
        json.dumps({"command": cmd, "date": date, "args": vars(args), "runs": runs}, indent=1)
    )
    text = report(runs, args, cmd, date)
    print("\n" + text)
    if not out.exists():
        out.write_text(
            "# Learning benchmark (bench/learn.py)\n\n"
            "Simulated user who wants ONE short sentence (<= 20 words, <= 1 terminator); "
            "see the module docstring of bench/learn.py. Each run appends a section.\n\n"
        )
    with out.open("a") as f:
        f.write(text + "\n")
    print(f"\nappended to {out}; raw numbers in {raw}")


if __name__ == "__main__":
    main()
