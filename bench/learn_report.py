"""The markdown report of bench/learn.py (tables of learning, latency and publishing)."""

from __future__ import annotations

import argparse
import statistics
from typing import Any

from learn_user import HELDOUT_PROMPTS, LATENCY_TOKENS, QUALITY_PROMPTS, TRAIN_PROMPTS


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def _fmt(x: float | None, spec: str = ".2f", unit: str = "") -> str:
    return "n/a" if x is None else f"{x:{spec}}{unit}"


def latency_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    probes = [p for r in runs for p in r["probes"]]
    before = [p for p in probes if p["phase"] == "before" and p["trainer_cores"] < 0.05]
    loop = [p for p in probes if p["phase"] == "loop"]
    busy = [p for p in loop if p["in_step"] >= 0.5]
    idle = [p for p in loop if p["in_step"] == 0]

    def stats(ps: list[dict[str, Any]]) -> dict[str, Any]:
        """Count, median latency and median ms/token of probes or turns."""
        return {
            "n": len(ps),
            "p50_ms": None if not ps else 1000 * statistics.median(p["latency_s"] for p in ps),
            "ms_per_token": None
            if not ps
            else 1000 * statistics.median(p["latency_s"] / max(p["tokens"], 1) for p in ps),
        }

    turns = [t for r in runs for t in r["turns"] if "trainer_cores" in t]

    fa = [f["seconds"] for r in runs for f in r["first_answer"] if f["outcome"] == "served"]
    pub = [f["publish_s"] for r in runs for f in r["first_answer"] if f["publish_s"] is not None]
    return {
        "before": stats(before),
        "idle_between_steps": stats(idle),
        "training": stats(busy),
        "turns_idle": stats([t for t in turns if t["in_step"] == 0]),
        "turns_training": stats([t for t in turns if t["in_step"] >= 0.5]),
        "first_answer_s": {
            "n": len(fa),
            "p50": _median(fa),
            "max": max(fa) if fa else None,
            "min": min(fa) if fa else None,
        },
        "publish_s": {"n": len(pub), "p50": _median(pub)},
        "outcomes": {
            o: sum(f["outcome"] == o for r in runs for f in r["first_answer"])
            for o in ("served", "superseded", "refused", "timeout", "pending")
        },
    }


def report(runs: list[dict[str, Any]], args: argparse.Namespace, cmd: str, date: str) -> str:
    evs = runs[0]["evals"]
    cols = [e["after_turns"] for e in evs[1:]]
    lines = [
        f"## Run {date}",
        "",
        f"Command: `{cmd}`",
        "",
        f"Settings: turns {args.turns}, eval every {args.eval_every}, "
        f"lr {args.lr or 'app default (5e-4 for LoRA on the CPU)'}, "
        f"batch {args.batch_size}, LoRA rank {args.lora_rank}, max_tokens {args.max_tokens}, "
        f"seed {args.seed}, threads {args.threads or 'default'}; "
        f"{len(TRAIN_PROMPTS)} training prompts, "
        f"{len(HELDOUT_PROMPTS)} held-out, {len(QUALITY_PROMPTS)} quality prompts."
        + (f" Note: {args.note}" if args.note else ""),
        "",
        "Held-out compliance (greedy, one short sentence), general quality and training:",
        "",
        "| method | before | "
        + " | ".join(f"after {c}" for c in cols)
        + " | quality before | quality after | steps | on-policy compliance per block "
        "| samples rl/opd/both | wall |",
        "|---|---|" + "---|" * len(cols) + "---|---|---|---|---|---|",
    ]
    for r in runs:
        ev = r["evals"]
        blocks = []
        for k in range(0, len(r["turns"]), args.eval_every):
            blk = r["turns"][k : k + args.eval_every]
            blocks.append(f"{sum(t['ok'] for t in blk)}/{len(blk)}")
        m = r["metrics"]
        lines.append(
            f"| {r['method']} | {ev[0]['compliance']:.2f} | "
            + " | ".join(f"{e['compliance']:.2f}" for e in ev[1:])
            + f" | {ev[0]['quality']:.2f} | {ev[-1]['quality']:.2f} | {len(r['checkpoints'])} | "
            f"{' '.join(blocks)} | {sum(m['samples/rl']):.0f}/{sum(m['samples/opd']):.0f}/"
            f"{sum(m['samples/both']):.0f} | {r['wall_s'] / 60:.1f} min (load "
            f"{r['loadavg_start'][0]:.1f} -> {r['loadavg_end'][0]:.1f}) |"
        )
    lines += [
        "",
        "Per step (loss, reward mean, grad norm, step time incl. pauses for serving / paused):",
        "",
    ]
    for r in runs:
        m = r["metrics"]
        paused = m.get("time/paused_s") or [0.0] * len(m["loss"])
        steps = [
            f"{lo:+.3f}/{rw:+.2f}/{g:.2f}/{ts:.0f}s/{ps:.0f}s"
            for lo, rw, g, ts, ps in zip(
                m["loss"],
                m["reward/mean"],
                m["optim/grad_norm"],
                m["time/step_s"],
                paused,
                strict=False,
            )
        ]
        ss = r["stop_signal"]
        lines.append(
            f"- {r['method']}: OPD token advantage at the first token after the first "
            f"sentence: median {_fmt(ss['stop_median'], '+.2f')} ({ss['stop_negative']}/"
            f"{ss['n']} negative) vs mean {_fmt(ss['other_mean'], '+.3f')} (mean |A| "
            f"{_fmt(ss['other_mean_abs'], '.3f')}) on the other {ss['other_tokens']} tokens"
        )
        lines.append(
            f"- {r['method']}: {', '.join(steps) or 'no steps'}; sample states "
            f"{r['sample_states']}; skips {r['skip_reasons'] or 'none'}; judged with a hint "
            f"and teacher log-probs {r['samples_with_teacher']}"
        )
    lat = latency_summary(runs)
    lines += [
        "",
        "Chat latency (medians, all methods pooled). Probes: the same 16-token greedy "
        "answer; feedback turns: the training turns themselves (temperature 1, <= "
        f"{args.max_tokens} tokens). In a step: at least half of the request overlapped a "
        "training step (StepStarted -> StepFinished events); idle: no overlap:",
        "",
        "| requests | trainer | n | p50 latency | p50 ms/token |",
        "|---|---|---|---|---|",
    ]
    for key, label in (
        ("before", f"{LATENCY_TOKENS}-token probes | idle, before any training"),
        ("idle_between_steps", f"{LATENCY_TOKENS}-token probes | idle, between steps"),
        ("training", f"{LATENCY_TOKENS}-token probes | in a step"),
        ("turns_idle", "feedback turns | idle"),
        ("turns_training", "feedback turns | in a step"),
    ):
        s = lat[key]
        lines.append(
            f"| {label} | {s['n']} | {_fmt(s['p50_ms'], '.0f', ' ms')} | "
            f"{_fmt(s['ms_per_token'], '.1f')} |"
        )
    fa = lat["first_answer_s"]
    lines += [
        "",
        f"Checkpoint-to-first-answer (registration -> first answer naming the version): "
        f"median {_fmt(fa['p50'], '.2f', ' s')}, min {_fmt(fa['min'], '.2f', ' s')}, "
        f"max {_fmt(fa['max'], '.2f', ' s')} over {fa['n']} checkpoints; "
        f"registration -> PolicyPublished median {_fmt(lat['publish_s']['p50'], '.2f', ' s')}; "
        f"outcomes {lat['outcomes']}.",
        "",
    ]
    return "\n".join(lines)
