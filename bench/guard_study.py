"""Does the regression guard refuse the looping versions and pass the harmless ones?

Replays the guard's decision rule (`clawrl_app.engine.publishing.guard.decide`, the app's
own function) on the versions of `bench/collapse.py --guard-view` runs: at each evaluation
the run recorded what the guard answers (greedy, the guard's default budgets: 40 general
questions, 12 open prompts, 12 of the user's own prompts) and, apart from it, the user's
held-out prompts the guard never sees. A version is *looping* when its degeneration rate on
those held-out prompts exceeds the base model's by more than 0.05 (issue #29's bar), else
*harmless*. Printed per rule: looping versions refused, harmless versions passed.

Run: `.venv/bin/python bench/guard_study.py /tmp/gs/*.json`
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from clawrl_app.config import GuardSettings  # noqa: E402
from clawrl_app.engine.publishing.guard import VersionScores, decide, new_loops  # noqa: E402

BAR = 0.05
"""A version whose held-out degeneration exceeds the base's by more than this loops."""


def scores(name: str, view: dict[str, Any], base: dict[str, Any]) -> VersionScores:
    """The guard's scores of one version from its recorded answers (paired with the base's)."""
    facts_ok = [ok and not bad for ok, bad in zip(view["facts_ok"], view["facts_deg"], strict=True)]
    general_deg = view["facts_deg"] + view["open_deg"]
    base_general_deg = base["facts_deg"] + base["open_deg"]
    n, u = len(general_deg), len(view["user_deg"])
    return VersionScores(
        name, None, 0, sum(facts_ok) / len(facts_ok), len(facts_ok),
        sum(general_deg) / n, n,
        user_degeneration=sum(view["user_deg"]) / u,
        base_user_degeneration=sum(base["user_deg"]) / u, user_n=u,
        user_repetition=sum(view["user_rep"]) / u,
        base_user_repetition=sum(base["user_rep"]) / u,
        new_loops=new_loops(general_deg + view["user_deg"], base_general_deg + base["user_deg"]),
        new_loops_n=n + u,
    )  # fmt: skip


def versions(paths: list[Path]) -> list[dict[str, Any]]:
    """Every evaluated version after round 0 of every run, with its label and guard scores."""
    out = []
    for path in paths:
        data = json.loads(path.read_text())
        for run in data["runs"]:
            evals = [e for e in run["evals"] if "guard" in e]
            if not evals or evals[0]["round"] != 0:
                continue
            base = evals[0]
            b = scores("base", base["guard"], base["guard"])
            for e in evals[1:]:
                out.append({
                    "run": f"{path.stem}/{run['user']}", "round": e["round"],
                    "held_out_deg": e["degenerate"], "base_held_out_deg": base["degenerate"],
                    "looping": e["degenerate"] > base["degenerate"] + BAR + 1e-9,
                    "scores": scores(f"r{e['round']}", e["guard"], base["guard"]),
                    "base": b,
                })  # fmt: skip
    return out


RULES = {
    "rates (before)": {"max_new_loops": 1.0},
    "new loops <= 0.05": {"max_new_loops": 0.05},
    "new loops <= 0.03": {"max_new_loops": 0.03},
    "new loops <= 0.02": {"max_new_loops": 0.02},
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path, help="bench/collapse.py --guard-view results")
    ap.add_argument("-v", "--verbose", action="store_true", help="one line per version")
    args = ap.parse_args()
    vs = versions(args.runs)
    looping = [v for v in vs if v["looping"]]
    harmless = [v for v in vs if not v["looping"]]
    print(f"{len(vs)} versions: {len(looping)} looping, {len(harmless)} harmless")
    print("| rule | looping refused | harmless passed |")
    print("|---|---|---|")
    for name, overrides in RULES.items():
        settings = GuardSettings(**overrides)

        def refused(v: dict[str, Any], s: GuardSettings = settings) -> bool:
            b = v["base"]
            return not decide(v["scores"], b, s, b.general, b.degeneration).passed

        r = sum(refused(v) for v in looping)
        p = sum(not refused(v) for v in harmless)
        print(f"| {name} | {r}/{len(looping)} | {p}/{len(harmless)} |")
        for line in [explain(v, settings) for v in vs] if args.verbose else []:
            print(line)
    return 0


def explain(v: dict[str, Any], settings: GuardSettings) -> str:
    """One version's label and the guard's decision on it, with the reasons."""
    b = v["base"]
    verdict = decide(v["scores"], b, settings, b.general, b.degeneration)
    return (
        f"    {v['run']} r{v['round']} looping={v['looping']} held-out "
        f"{v['held_out_deg']:.2f} (base {v['base_held_out_deg']:.2f}) "
        f"refused={not verdict.passed} {verdict.reasons}"
    )


if __name__ == "__main__":
    raise SystemExit(main())
