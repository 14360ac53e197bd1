"""The markdown report of bench/learn.py: per-persona learning table, the mean over personas,
the goals of issue #14 (met / not met with figures), per-step metrics and latency."""

from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass
from typing import Any

from learn_drive import LATENCY_TOKENS
from learn_personas import USERS as PERSONAS

GOAL_COMPLIANCE = 0.8
GOAL_TURNS = 32
GOAL_PERSONAS = 3


def _or_default(value: float | None) -> str:
    """A command-line override as written, or "app default" where none was given."""
    return "app default" if value is None else f"{value:g}"


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def _fmt(x: float | None, spec: str = ".2f", unit: str = "") -> str:
    return "n/a" if x is None else f"{x:{spec}}{unit}"


@dataclass(frozen=True)
class Goals:
    """The issue's goals for one benchmark run, with the figures they were judged on."""

    compliance: dict[str, float | None]
    """Persona -> held-out compliance at the last measurement within `GOAL_TURNS` turns."""
    personas_met: int
    general_ok: dict[str, bool]
    """Persona -> general score after >= before."""
    measured_to: int
    """Feedback turns the run went to (goals need `GOAL_TURNS`)."""

    @property
    def compliance_met(self) -> bool:
        return self.personas_met >= min(GOAL_PERSONAS, len(self.compliance))

    @property
    def general_met(self) -> bool:
        return all(self.general_ok.values())


def goals(runs: list[dict[str, Any]]) -> Goals:
    """Judge the runs against the goals: held-out compliance >= 0.8 after at most 32 feedback
    turns (the last block measured within 32) on at least three personas (all of them when
    fewer than three ran); general score after >= before for every persona."""
    comp: dict[str, float | None] = {}
    for r in runs:
        within = [e for e in r["evals"][1:] if e["after_turns"] <= GOAL_TURNS]
        comp[r["persona"]] = within[-1]["compliance"] if within else None
    met = sum(c is not None and c >= GOAL_COMPLIANCE for c in comp.values())
    gen = {r["persona"]: r["general_after"]["score"] >= r["general_before"]["score"] for r in runs}
    turns = min((len(r["turns"]) for r in runs), default=0)
    return Goals(comp, met, gen, turns)


def goal_lines(g: Goals) -> list[str]:
    """The goals as printed: met / not met, with the figures."""
    figs = ", ".join(f"{p} {_fmt(c)}" for p, c in g.compliance.items())
    need = min(GOAL_PERSONAS, len(g.compliance))
    short = (
        f" (this run went to {g.measured_to} turns only: not a measurement of the goal)"
        if g.measured_to < GOAL_TURNS
        else ""
    )
    bad = [p for p, ok in g.general_ok.items() if not ok]
    return [
        f"Goals (issue #14){short}:",
        "",
        f"- held-out compliance >= {GOAL_COMPLIANCE} within {GOAL_TURNS} feedback turns on >= "
        f"{need} of {len(g.compliance)} personas: **{'met' if g.compliance_met else 'NOT met'}**"
        f" ({g.personas_met} reached it; {figs})",
        f"- general score after >= before: **{'met' if g.general_met else 'NOT met'}**"
        + (f" (lower after: {', '.join(bad)})" if bad else ""),
    ]


def _teacher(run: dict[str, Any]) -> str:
    """The teacher's held-out compliance (base + the persona's hint); n/a in older results."""
    return _fmt(run["teacher"]["compliance"]) if "teacher" in run else "n/a"


def learning_table(runs: list[dict[str, Any]], block: int) -> list[str]:
    """Per persona: the teacher's held-out compliance (base + hint: what distillation pulls
    towards), held-out compliance before and after each block, general before -> after,
    steps, on-policy compliance of the feedback turns per block; then the mean."""
    cols = max(len(r["evals"]) - 1 for r in runs)
    heads = [str(e["after_turns"]) for e in max((r["evals"] for r in runs), key=len)[1:]]
    lines = [
        "| persona | teacher | before | "
        + " | ".join(f"after {h}" for h in heads)
        + " | general before -> after | steps | on-policy per block | wall |",
        "|---|---|---|" + "---|" * cols + "---|---|---|---|",
    ]
    for r in runs:
        ev = r["evals"]
        cells = [f"{e['compliance']:.2f}" for e in ev[1:]] + ["n/a"] * (cols - len(ev) + 1)
        blocks = []
        for k in range(0, len(r["turns"]), block):
            blk = r["turns"][k : k + block]
            blocks.append(f"{sum(t['ok'] for t in blk)}/{len(blk)}")
        gb, ga = r["general_before"], r["general_after"]
        lines.append(
            f"| {r['persona']} | {_teacher(r)} | {ev[0]['compliance']:.2f} | "
            + " | ".join(cells)
            + f" | {gb['score']:.2f} -> {ga['score']:.2f} ({gb['correct']}->{ga['correct']}/"
            f"{ga['total']}) | {r['steps']} | {' '.join(blocks)} | {r['wall_s'] / 60:.1f} min |"
        )
    if len(runs) > 1:
        mean_cells = []
        for k in range(cols + 1):
            vals = [r["evals"][k]["compliance"] for r in runs if len(r["evals"]) > k]
            mean_cells.append(f"{statistics.fmean(vals):.2f}")
        gb = statistics.fmean(r["general_before"]["score"] for r in runs)
        ga = statistics.fmean(r["general_after"]["score"] for r in runs)
        steps = statistics.fmean(r["steps"] for r in runs)
        teach = [r["teacher"]["compliance"] for r in runs if "teacher" in r]
        lines.append(
            f"| **mean** | {_fmt(statistics.fmean(teach) if teach else None)} | {mean_cells[0]} | "
            + " | ".join(mean_cells[1:])
            + f" | {gb:.2f} -> {ga:.2f} | {steps:.1f} | | |"
        )
    return lines


def form_table(runs: list[dict[str, Any]]) -> list[str]:
    """Per persona and measurement: held-out degenerate / looping shares and mean words, the
    open prompts' degenerate / looping shares (128 tokens), the general set's degenerate
    share (before and after only)."""
    lines = [
        "| persona | after turns | version | held-out degenerate | looping | words | "
        "open degenerate | open looping |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        for e in r["evals"]:
            if "degenerate" not in e:  # results from before this table existed
                continue
            op = e.get("open", {})
            lines.append(
                f"| {r['persona']} | {e['after_turns']} | {' '.join(e['models'])} | "
                f"{e['degenerate']:.2f} | {e['looping']:.2f} | {e['words']:.1f} | "
                f"{_fmt(op.get('degenerate'))} | {_fmt(op.get('looping'))} |"
            )
    if len(lines) == 2:
        return []
    gens = [
        f"{r['persona']} {_fmt(r['general_before'].get('degenerate'))} -> "
        f"{_fmt(r['general_after'].get('degenerate'))}"
        for r in runs
    ]
    return [*lines, "", f"General set, degenerate answers before -> after: {'; '.join(gens)}."]


LOOP_MARGIN = 0.05
"""A version loops when its held-out degeneration exceeds the base's by more than this (the
issue's goal, and the guard's default margin)."""


def pool_table(runs: list[dict[str, Any]]) -> list[str]:
    """Per user: degenerate / looping shares on its form pool (~50 unseen prompts, greedy, at
    its max_tokens) before and after the run; answers that loop after but not before; whether
    the bar (degenerate after <= before + 0.05) holds."""
    rows = [r for r in runs if "pool_before" in r]
    if not rows:
        return []
    lines = [
        "| user | prompts | degenerate before -> after | looping before -> after | "
        "new loops | bar (<= base + 0.05) |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        b, a = r["pool_before"], r["pool_after"]
        new = sum(fa[1] and not fb[1] for fb, fa in zip(b["flags"], a["flags"], strict=True))
        ok = a["degenerate"] <= b["degenerate"] + LOOP_MARGIN + 1e-9
        lines.append(
            f"| {r['persona']} | {a['n']} | {b['degenerate']:.2f} -> {a['degenerate']:.2f} | "
            f"{b['looping']:.2f} -> {a['looping']:.2f} | {new} | {'met' if ok else 'NOT met'} |"
        )
    return lines


def step_lines(runs: list[dict[str, Any]]) -> list[str]:
    """Per step: loss / reward mean / grad norm / step time; sample states."""
    lines = []
    for r in runs:
        m = r["metrics"]
        steps = [
            f"{lo:+.3f}/{rw:+.2f}/{g:.2f}/{ts:.0f}s"
            for lo, rw, g, ts in zip(
                m["loss"], m["reward/mean"], m["optim/grad_norm"], m["time/step_s"], strict=False
            )
        ]
        ent = " ".join(f"{x:.2f}" for x in m.get("entropy", []))
        adv = " ".join(f"{x:+.2f}" for x in m.get("adv/mean", []))
        lines.append(
            f"- {r['persona']}: {', '.join(steps) or 'no steps'}; entropy per step {ent or 'n/a'}"
            f"; advantage mean per step {adv or 'n/a'}; samples rl/opd/both "
            f"{sum(m['samples/rl']):.0f}/{sum(m['samples/opd']):.0f}/"
            f"{sum(m['samples/both']):.0f}; sample states {r['sample_states']}"
        )
    return lines


def latency_lines(runs: list[dict[str, Any]]) -> list[str]:
    """Chat latency medians (idle vs in a training step) and checkpoint-to-first-answer."""
    probes = [p for r in runs for p in r["probes"]]
    turns = [t for r in runs for t in r["turns"]]

    def p50(xs: list[dict[str, Any]]) -> str:
        return f"{len(xs)} | {_fmt(_median([1000 * x['latency_s'] for x in xs]), '.0f', ' ms')}"

    fa = [f["seconds"] for r in runs for f in r["first_answer"] if f["outcome"] == "served"]
    return [
        "| requests | n | p50 latency |",
        "|---|---|---|",
        f"| {LATENCY_TOKENS}-token probes, before training | "
        + p50([p for p in probes if p["phase"] == "before"])
        + " |",
        f"| {LATENCY_TOKENS}-token probes, in a step | "
        + p50([p for p in probes if p["phase"] == "loop" and p["in_step"] >= 0.5])
        + " |",
        "| feedback turns, trainer idle | " + p50([t for t in turns if t["in_step"] == 0]) + " |",
        "| feedback turns, in a step | " + p50([t for t in turns if t["in_step"] >= 0.5]) + " |",
        "",
        f"Checkpoint-to-first-answer: median {_fmt(_median(fa), '.2f', ' s')} over {len(fa)} "
        "served checkpoints.",
    ]


def guard_lines(runs: list[dict[str, Any]]) -> list[str]:
    """The regression guard's verdict on each checked checkpoint, and the general score of
    every version it scored (base first), per persona."""
    lines = [
        "| persona | version | vs served | personal | general | degeneration (base) | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        for g in r.get("guard", []):
            verdict = "passed" if g["passed"] else "REFUSED: " + "; ".join(g["reasons"])
            lines.append(
                f"| {r['persona']} | {g['version']} | {g['served']} | "
                f"{_fmt(g['served_personal'])} -> {_fmt(g['personal'])} | "
                f"{_fmt(g['served_general'])} -> {_fmt(g['general'])} | "
                f"{_fmt(g.get('degeneration'))} ({_fmt(g.get('base_degeneration'))}) | {verdict} |"
            )
    if len(lines) == 2:
        return ["The regression guard checked no checkpoint (off, or none reached publishing)."]
    lines.append("")
    for r in runs:
        per = " -> ".join(f"{v} {x:.2f}" for v, x in r.get("version_general", {}).items())
        lines.append(f"- {r['persona']}: general score per version: {per or 'none'}")
    return lines


def version_lines(runs: list[dict[str, Any]]) -> list[str]:
    """Every version the run made (the refused ones too) on the held-out prompts and, where
    measured, on the user's form pool, and how the guard's verdicts match: looping versions
    (degeneration > base + 0.05, on the pool where measured) refused, harmless ones passed.
    A version neither served nor refused (superseded before its check, or deferred) is
    listed but not counted: the guard did not decide on it."""
    lines = [
        "| persona | version | status | compliant | degenerate | looping | pool degenerate | "
        "loops (> base + 0.05) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    tally = {"loop": 0, "loop_refused": 0, "fine": 0, "fine_passed": 0, "undecided": 0}
    for r in runs:
        base = r["evals"][0]["degenerate"]
        pool_base = r["pool_before"]["degenerate"] if "pool_before" in r else None
        for v in r.get("versions", []):
            if "error" in v:
                lines.append(f"| {r['persona']} | {v['version']} | {v['status']} | "
                             f"not measured: {v['error'][:80]} | | | | |")  # fmt: skip
                continue
            on_pool = pool_base is not None and "pool_degenerate" in v
            mine, ref = (v["pool_degenerate"], pool_base) if on_pool else (v["degenerate"], base)
            loops = mine > ref + LOOP_MARGIN + 1e-9
            refused = v["status"] == "refused"
            key = "loop" if loops else "fine"
            if v["status"] in ("published", "refused"):
                tally[key] += 1
                tally[key + ("_refused" if loops else "_passed")] += refused == loops
            else:
                tally["undecided"] += 1
            lines.append(
                f"| {r['persona']} | {v['version']} | {v['status']} | {v['compliance']:.2f} | "
                f"{v['degenerate']:.2f} | {v['looping']:.2f} | "
                f"{_fmt(v.get('pool_degenerate'))} | {'yes' if loops else 'no'} |"
            )
    if len(lines) == 2:
        return ["No version was measured on the held-out prompts."]
    return [
        *lines,
        "",
        f"Guard against the bench: {tally['loop_refused']} of {tally['loop']} looping versions "
        f"refused; {tally['fine_passed']} of {tally['fine']} others passed"
        + (f" ({tally['undecided']} neither served nor refused)." if tally["undecided"] else "."),
    ]


def report(
    runs: list[dict[str, Any]], args: argparse.Namespace, cmd: str, date: str, model: str
) -> str:
    """The whole markdown section appended to bench/results/learn.md."""
    desc = "; ".join(
        f"`{r['persona']}`: {PERSONAS[r['persona']].description} "
        f"({len(PERSONAS[r['persona']].train_prompts)} train / "
        f"{len(PERSONAS[r['persona']].heldout_prompts)} held-out prompts, "
        f"max_tokens {r['max_tokens']})"
        for r in runs
    )
    lines = [
        f"## Run {date}",
        "",
        f"Command: `{cmd}`",
        "",
        f"Model {model}, method {runs[0]['method']}, turns {args.turns}, block {args.block}, "
        f"batch {args.batch_size}, lr {args.lr or 'app default'}, "
        f"w_rl {_or_default(args.w_rl)}, w_opd {_or_default(args.w_opd)}, updates per batch "
        f"{_or_default(args.updates)}, LoRA rank "
        f"{args.lora_rank or 'app default'}, seed {args.seed}. Personas: {desc}. General set: "
        f"{runs[0]['general_before']['total']} questions scored by code."
        + (f" Note: {args.note}" if args.note else ""),
        "",
        "Held-out compliance (greedy) before and after each block of feedback turns, measured "
        "once the trainer has used the block's samples and the newest checkpoint is served; "
        "`teacher`: the base model's held-out compliance with the persona's hint appended "
        "(what the teacher of on-policy distillation writes):",
        "",
        *learning_table(runs, args.block),
        "",
        *goal_lines(goals(runs)),
        "",
        "Form (greedy; degeneration by `clawrl_app.degeneration`, looping: a 3-word phrase "
        ">= 3 times; a degenerate answer counts as not compliant and its facts as wrong):",
        "",
        *form_table(runs),
        "",
        "Degeneration on each user's form pool (its held-out prompts, every other user's and "
        "120 more of the same kinds, ~170 prompts none is trained on, `bench/learn_pool.py`; "
        "greedy, at the user's max_tokens; the served version after the last block against "
        "the base):",
        "",
        *pool_table(runs),
        "",
        "Per step (loss / reward mean / grad norm / step time):",
        "",
        *step_lines(runs),
        "",
        *latency_lines(runs),
        "",
        "Regression guard (personal = held-out preference agreement, general = the general "
        "set at the guard's settings):",
        "",
        *guard_lines(runs),
        "",
        "Every version on the held-out prompts (through `POST /admin/compare`, which also loads "
        "the refused ones):",
        "",
        *version_lines(runs),
        "",
    ]
    return "\n".join(lines)
