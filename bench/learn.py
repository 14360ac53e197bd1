"""Learning benchmark: does the app learn a user's preference, for several kinds of user?

Four scripted, deterministic simulated users (`bench/learn_personas.py`) each want one thing
that code can check: one short sentence (`brevity`), a bulleted list (`bullets`), a one-line
summary first then detail (`summary`), no exclamation marks or emoji (`calm`). A method that
wins one persona by a trick (stop early, always list) loses another. Each persona runs with
the app's default method and settings (heuristic judge, no review grace) on a fresh engine
home:

1. Before training: held-out compliance (the persona's held-out prompts, greedy side turns:
   never trained on) and the general score (`assets/general_set.jsonl`, >= 30 questions
   scored by code, `clawrl_app.general_eval`).
2. Feedback loop: each training prompt is a main turn in a new session (temperature 1.0,
   on-policy sampling); the simulated user then replies in the same session, as a real user
   would: thanks when the answer complies, else its correction stating the preference
   ("No, that's too long. Answer in one short sentence please.").
3. After every `--block` feedback turns: wait until the trainer has consumed every usable
   sample of the block and the newest checkpoint is served, then measure held-out
   compliance again; after the last block also the general score.
4. Latency probes and checkpoint-to-first-answer, as a side product (`learn_drive.py`).
5. The regression guard (on, as the app ships; `--no-guard` turns it off): its verdict on
   every checkpoint it checked and each version's personal and general score.

Goals (issue #14), checked and printed: held-out compliance >= 0.8 after 32 feedback turns on
at least three of the four personas, and the general score after >= before.

Results are printed as markdown and appended to `bench/results/learn.md` (with the command
line and date); the raw numbers go to `bench/results/learn-<timestamp>.json`.

Run: `CLAWRL_HOME=/tmp/clawrl-dev HF_HUB_OFFLINE=1 .venv/bin/python bench/learn.py
      [--personas brevity,bullets,summary,calm] [--turns 32] [--block 8] [--batch-size 4]
      [--model PATH_OR_GGUF]`
(`CLAWRL_HOME` only locates the converted model; each persona gets a fresh home. `--model`
takes a HF model folder or a .gguf file, resolved like the app's `model.path` setting.)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import signal
import sys
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from learn_drive import (  # noqa: E402
    CheckpointWatcher,
    Probe,
    StepWindows,
    TrainerCPU,
    latency_probe,
    post_chat,
)
from learn_evals import every_version, general, heldout, open_form, pool_form  # noqa: E402
from learn_personas import USERS, Persona  # noqa: E402
from learn_report import report  # noqa: E402

from clawrl_app.config import load_settings  # noqa: E402
from clawrl_app.degeneration import score as degeneration  # noqa: E402
from clawrl_app.engine.engine_thread import EngineThread  # noqa: E402
from clawrl_app.engine.store.guard import GENERAL, PERSONAL  # noqa: E402
from clawrl_app.engine.training.config import TOPK_METHODS  # noqa: E402
from clawrl_app.engine.training.losses import needs_reward  # noqa: E402
from clawrl_app.general_eval import GeneralItem, load_general_set  # noqa: E402
from clawrl_app.models import resolve_model  # noqa: E402
from clawrl_app.paths import app_paths  # noqa: E402

# --- driving the engine ---------------------------------------------------------------------


def usable(store: Any, method: str) -> int:
    """Eligible judged samples the trainer could still use under `method` (train_data rules)."""
    n = 0
    for s in store.trainable_samples(10_000):
        j = store.get_judgment(s.id)
        if j is None:
            continue
        has_rl = needs_reward(method) and j.score != 0
        if method in TOPK_METHODS:  # the teacher's top-k is the signal
            has_opd = j.teacher_topk is not None
        else:
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
    eligible sample, and the newest checkpoint is served, refused, or deferred by the guard
    (it waits for prompts the next block writes); latency probes meanwhile."""
    store, backend = et.engine.store, et.engine.backend
    assert store is not None and backend is not None
    t0 = time.time()
    while True:
        st = store.session_stats()
        caught_up = st["samples"] >= st["turns_main"] and st.get("samples_pending", 0) == 0
        left = usable(store, method) if caught_up else None
        ckpts = store.list_checkpoints()
        newest = max(ckpts, key=lambda c: c.created) if ckpts else None
        guard = et.engine.publisher.guard if et.engine.publisher is not None else None
        served = (
            newest is None
            or backend.active_version == newest.version
            or newest.status == "refused"
            # deferred by the guard until the user has written more prompts: the next
            # block writes them (waiting here only idled to the timeout, 2026-11-29)
            or (guard is not None and guard.was_deferred(newest.version))
        )
        if caught_up and left is not None and left < batch_size and served and not watcher.busy():
            return {"waited_s": time.time() - t0, "leftover": left, "timed_out": False}
        if time.time() - t0 > timeout_s:
            return {"waited_s": time.time() - t0, "leftover": left, "timed_out": True}
        probes.append(latency_probe(client, et.url, cpu, "loop"))
        time.sleep(probe_every)


def feedback_turn(
    client: httpx.Client, url: str, persona: Persona, prompt: str, sid: str, seed: int, mt: int
) -> dict[str, Any]:
    """One main turn (at the user's temperature) and the simulated user's reply in the same
    session; a user who rates first posts +1 / -1 for the answer."""
    msgs: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
    t0 = time.time()
    j = post_chat(
        client,
        url,
        msgs,
        max_tokens=mt,
        temperature=persona.temperature,
        headers={"X-Session-Id": sid},
        seed=seed,
    )
    t1 = time.time()
    answer = j["choices"][0]["message"]["content"] or ""
    if persona.rates:  # the last main turn is this answer until the reply below
        rating = 1 if persona.complies(answer) and not degeneration(answer).degenerate else -1
        r = client.post(f"{url}/feedback", json={"session_id": sid, "turn": -1, "rating": rating})
        r.raise_for_status()
    msgs += [
        {"role": "assistant", "content": answer},
        {"role": "user", "content": persona.reaction(answer)},
    ]
    post_chat(
        client,
        url,
        msgs,
        max_tokens=8,
        temperature=0.0,
        headers={"X-Session-Id": sid, "X-Session-Done": "1"},
    )
    return {
        "session": sid,
        "prompt": prompt,
        "answer": answer,
        "ok": persona.complies(answer),
        "model": j["model"],
        "latency_s": t1 - t0,
        "t0": t0,
        "t1": t1,
        "tokens": int(j["usage"]["completion_tokens"]),
    }


def _engine_env(args: argparse.Namespace, model_dir: Path) -> dict[str, str]:
    env = {
        "CLAWRL_MODEL__PATH": str(model_dir),
        "CLAWRL_SERVER__PORT": "0",
        "CLAWRL_TRAIN__BATCH_SIZE": str(args.batch_size),
        "CLAWRL_REVIEW__GRACE_S": "0",
        "CLAWRL_JUDGE__BACKEND": "heuristic",
    }
    if args.no_guard:
        env["CLAWRL_GUARD__ENABLED"] = "false"
    if args.method:  # otherwise the app's default method
        env["CLAWRL_TRAIN__METHOD"] = args.method
    if args.lr is not None:
        env["CLAWRL_TRAIN__LR"] = str(args.lr)
    if args.updates is not None:
        env["CLAWRL_TRAIN__UPDATES_PER_BATCH"] = str(args.updates)
    for name in ("w_rl", "w_opd"):
        if getattr(args, name) is not None:
            env[f"CLAWRL_TRAIN__{name.upper()}"] = str(getattr(args, name))
    if args.lora_rank is not None:
        env["CLAWRL_TRAIN__LORA_RANK"] = str(args.lora_rank)
    # any other app setting from this process's environment (e.g. CLAWRL_TRAIN__KL_COEF)
    fixed = {"CLAWRL_HOME", "CLAWRL_MODEL__PATH", "CLAWRL_SERVER__PORT"}
    env.update({k: v for k, v in os.environ.items() if k.startswith("CLAWRL_") and k not in fixed})
    return env


def _metrics(store: Any) -> dict[str, list[float]]:
    names: tuple[str, ...] = ("loss", "samples/rl", "samples/opd", "samples/both", "reward/mean")
    names += ("optim/grad_norm", "time/step_s", "time/paused_s", "entropy", "adv/mean", "kl")
    return {n: [m.value for m in store.metrics(n)] for n in names}


def _sample_states(store: Any, prefix: str) -> dict[str, int]:
    states: dict[str, int] = {}
    for sess in store.list_sessions(limit=10_000):
        if sess.id.startswith(prefix):
            for smp in store.samples_for_session(sess.id):
                states[smp.state] = states.get(smp.state, 0) + 1
                if smp.state == "skipped":  # why, by the reason's first words
                    why = "skipped: " + " ".join(str(smp.skip_reason).split()[:5])
                    states[why] = states.get(why, 0) + 1
    return states


def run_persona(
    persona: Persona, args: argparse.Namespace, model_dir: Path, items: list[GeneralItem]
) -> dict[str, Any]:
    """The whole benchmark for one persona on a fresh engine home."""
    settings = load_settings(env=_engine_env(args, model_dir)).settings
    method = settings.train.method
    mt = args.max_tokens or persona.max_tokens
    home = tempfile.mkdtemp(prefix=f"clawrl-learn-{persona.slug}-")
    watcher_ref: list[CheckpointWatcher] = []
    steps = StepWindows()

    def sink(ev: Any) -> None:
        steps.on_event(ev)
        if watcher_ref:
            watcher_ref[0].on_event(ev)

    t_start, load_start = time.time(), os.getloadavg()
    tag = f"[{persona.name}]"
    et = EngineThread(settings, app_paths(home), events=sink).start()
    store = et.engine.store
    assert store is not None
    cpu = TrainerCPU(et)
    watcher = CheckpointWatcher(et)
    watcher_ref.append(watcher)
    probes: list[Probe] = []
    evals: list[dict[str, Any]] = []
    turns: list[dict[str, Any]] = []
    settles: list[dict[str, Any]] = []
    try:
        with httpx.Client(timeout=300) as client:
            print(f"{tag} engine up at {et.url} (home {home}, method {method})", flush=True)
            print(f"{tag} trainer idle after {cpu.wait_idle():.0f}s", flush=True)
            for _ in range(args.latency_probes):
                probes.append(latency_probe(client, et.url, cpu, "before"))
            ev = heldout(et.url, persona, mt, args.eval_workers)
            ev["after_turns"], ev["steps"] = 0, 0
            ev["open"] = open_form(et.url, args.eval_workers)
            evals.append(ev)
            pool_before = pool_form(et.url, persona, mt, args.eval_workers)
            gen_before = general(et.url, items, args.eval_workers)
            teacher = heldout(et.url, persona, mt, args.eval_workers, persona.hint())
            print(
                f"{tag} before: compliance {ev['compliance']:.2f} (teacher: base + hint "
                f"{teacher['compliance']:.2f}) general {gen_before['score']:.2f}",
                flush=True,
            )
            watcher.start()
            for i in range(args.turns):
                prompt = persona.train_prompts[i % len(persona.train_prompts)]
                sid = f"learn-{persona.slug}-{i:03d}-{uuid.uuid4().hex[:8]}"
                t = feedback_turn(client, et.url, persona, prompt, sid, args.seed + i, mt)
                t["i"] = i
                turns.append(t)
                print(
                    f"{tag} turn {i + 1:3d} {t['model']:>12} {'OK ' if t['ok'] else 'NO '}"
                    f"{t['answer'][:70]!r}",
                    flush=True,
                )
                if (i + 1) % args.block and i + 1 != args.turns:
                    continue
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
                ev = heldout(et.url, persona, mt, args.eval_workers)
                ev["after_turns"], ev["steps"] = i + 1, len(store.list_checkpoints())
                ev["open"] = open_form(et.url, args.eval_workers)
                evals.append(ev)
                print(
                    f"{tag} after {i + 1} turns ({ev['steps']} steps, served {ev['models']}, "
                    f"waited {s['waited_s']:.0f}s{' TIMEOUT' if s['timed_out'] else ''}): "
                    f"compliance {ev['compliance']:.2f} degenerate {ev['degenerate']:.2f} "
                    f"open degenerate {ev['open']['degenerate']:.2f}",
                    flush=True,
                )
            gen_after = general(et.url, items, args.eval_workers)
            pool_after = pool_form(et.url, persona, mt, args.eval_workers)
            print(
                f"{tag} general after: {gen_after['score']:.2f}; form pool ({pool_after['n']} "
                f"prompts) degenerate {pool_before['degenerate']:.2f} -> "
                f"{pool_after['degenerate']:.2f}, looping {pool_before['looping']:.2f} -> "
                f"{pool_after['looping']:.2f}",
                flush=True,
            )
            versions = every_version(client, et.url, store, persona, mt)
            for v in versions:
                print(f"{tag} {v['version']} ({v['status']}): {v}", flush=True)
        watcher.stop()
        for p in probes:
            p.in_step = steps.share(p.t0, p.t1)
        for t in turns:
            t["in_step"] = steps.share(t["t0"], t["t1"])
        return {
            "persona": persona.name,
            "method": method,
            "max_tokens": mt,
            "home": home,
            "wall_s": time.time() - t_start,
            "loadavg_start": load_start,
            "loadavg_end": os.getloadavg(),
            "evals": evals,
            "teacher": teacher,
            "general_before": gen_before,
            "general_after": gen_after,
            "pool_before": pool_before,
            "pool_after": pool_after,
            "turns": turns,
            "settles": settles,
            "steps": len(store.list_checkpoints()),
            "checkpoints": [
                {"version": c.version, "step": c.step, "created": c.created, "status": c.status}
                for c in store.list_checkpoints()
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
            "metrics": _metrics(store),
            "sample_states": _sample_states(store, "learn-"),
            "guard": [e.payload for e in reversed(store.latest_events("GuardChecked", 1000))],
            "version_general": {m.version: m.value for m in store.metrics(GENERAL)},
            "versions": versions,
            "version_personal": {m.version: m.value for m in store.metrics(PERSONAL)},
        }
    finally:
        with contextlib.suppress(Exception):
            watcher.stop()
        et.stop()
        if sys.exc_info()[0] is not None:  # a failed run keeps its logs and store to read
            print(f"[{persona.slug}] failed: engine home kept at {home}", file=sys.stderr)
        elif not args.keep_home:  # its F16 copy of the model alone is ~270 MB
            shutil.rmtree(home, ignore_errors=True)


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--personas",
        default="brevity,bullets,summary,calm",
        help=f"comma-separated personas or user variants (known: {', '.join(USERS)})",
    )
    ap.add_argument("--turns", type=int, default=32, help="feedback turns per persona")
    ap.add_argument("--block", type=int, default=8, help="measure after every K feedback turns")
    ap.add_argument("--model", default=None, help="HF model folder or .gguf (default: embedded)")
    ap.add_argument("--method", default=None, help="training method (default: the app's)")
    ap.add_argument("--lr", type=float, default=None, help="learning rate (default: the app's)")
    ap.add_argument("--w-rl", type=float, default=None, help="reward-term weight (combine*)")
    ap.add_argument("--w-opd", type=float, default=None, help="teacher-term weight (combine*)")
    ap.add_argument("--updates", type=int, default=None, help="optimizer updates per batch")
    ap.add_argument("--batch-size", type=int, default=4, help="samples per optimizer step")
    ap.add_argument("--lora-rank", type=int, default=None, help="default: the app's")
    ap.add_argument("--max-tokens", type=int, default=0, help="answer budget (0 = persona's)")
    ap.add_argument("--seed", type=int, default=1000, help="sampling seed of turn 0")
    ap.add_argument("--latency-probes", type=int, default=3, help="idle probes before training")
    ap.add_argument("--settle-s", type=float, default=900, help="longest wait for the trainer")
    ap.add_argument("--eval-workers", type=int, default=6, help="concurrent eval requests")
    ap.add_argument("--probe-every", type=float, default=3.0, help="latency probe spacing (s)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = defaults)")
    ap.add_argument("--note", default="", help="free text recorded with the results")
    ap.add_argument("--no-guard", action="store_true", help="run without the regression guard")
    ap.add_argument("--keep-home", action="store_true", help="keep each persona's engine home")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "learn.md"))
    args = ap.parse_args()
    args.persona_list = [p.strip() for p in args.personas.split(",") if p.strip()]
    for p in args.persona_list:
        if p not in USERS:
            ap.error(f"unknown persona {p!r} (known: {', '.join(USERS)})")
    if args.block < 1 or args.turns < 1:
        ap.error("--turns and --block must be >= 1")
    return args


def main() -> None:
    # SIGTERM -> SystemExit, so `finally: et.stop()` also stops the trainer process
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    args = parse_args()
    if args.threads > 0:  # serving (this process) and the trainer process (inherits the env)
        os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(args.threads)
        torch.set_num_threads(args.threads)
    # the command as run: the app's settings from the environment (CLAWRL_*) included
    env = [
        f"{k}={shlex.quote(v)}" for k, v in sorted(os.environ.items()) if k.startswith("CLAWRL_")
    ]
    cmd = " ".join(
        [*env, ".venv/bin/python", *(shlex.quote(a) for a in ["bench/learn.py", *sys.argv[1:]])]
    )
    date = datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    model = resolve_model(args.model, app_paths())
    items = load_general_set()
    runs = [run_persona(USERS[p], args, model.path, items) for p in args.persona_list]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    raw = out.parent / f"learn-{datetime.now().strftime('%Y%m%d-%H%M%S')}.json"
    raw.write_text(
        json.dumps(
            {"command": cmd, "date": date, "model": model.name, "args": vars(args), "runs": runs},
            indent=1,
        )
    )
    text = report(runs, args, cmd, date, model.name)
    print("\n" + text)
    if not out.exists():
        out.write_text("# Learning benchmark (bench/learn.py)\n\nEach run appends a section.\n\n")
    with out.open("a") as f:
        f.write(text + "\n")
    print(f"\nappended to {out}; raw numbers in {raw}")


if __name__ == "__main__":
    main()
