"""Judge health: is the reward signal still trustworthy?

Three numbers, each from what the store already holds: how often the judge agreed with
your explicit ratings (the `judge/agreement` metric that `feedback.apply_feedback`
records), the balance of reward signs among recent judgments, and how answer length moved
across policy versions (a judge that likes long answers makes the model ramble). Each
crosses a threshold in `HealthSettings` into a warning that says what it means and what to
do. The maths are pure functions; `judge_health` only reads the store.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from clawrl_app.config import HealthSettings
from clawrl_app.engine.store import Store, VersionLength

BASE = "base"
SIGN_NAMES = {1: "+1", 0: "0", -1: "-1"}


def agreement(values: Sequence[float]) -> tuple[float | None, int]:
    """(share of ratings the judge agreed with, number of ratings); None when there are none."""
    return (sum(values) / len(values) if values else None), len(values)


def reward_balance(counts: Mapping[int, int]) -> dict[str, float]:
    """`{1: n+, 0: n0, -1: n-}` → shares `{"+1", "0", "-1"}` (all 0.0 when there are none)."""
    total = sum(counts.values())
    return {
        name: (counts.get(sign, 0) / total if total else 0.0) for sign, name in SIGN_NAMES.items()
    }


def drift(new: float, old: float) -> float | None:
    """Relative change of a mean length, (new - old) / old; None when `old` is 0."""
    return (new - old) / old if old else None


def length_drift(lengths: Sequence[VersionLength]) -> dict[str, Any]:
    """The newest version's length drift vs the version before it and vs base (None where
    there is no such version)."""
    if not lengths:
        return {"version": None, "vs_previous": None, "vs_base": None}
    newest = lengths[-1]
    previous = lengths[-2] if len(lengths) > 1 else None
    base = next((v for v in lengths if v.version == BASE), None)
    return {
        "version": newest.version,
        "vs_previous": drift(newest.mean_tokens, previous.mean_tokens) if previous else None,
        "vs_base": (
            drift(newest.mean_tokens, base.mean_tokens)
            if base is not None and base is not newest
            else None
        ),
    }


def agreement_warning(value: float | None, n: int, s: HealthSettings) -> str | None:
    """A sentence when the judge disagrees with you too often (and enough ratings say so)."""
    if value is None or n < s.min_ratings or value >= s.min_agreement:
        return None
    return (
        f"The judge agreed with only {value:.0%} of your last {n} ratings (below "
        f"{s.min_agreement:.0%}), so its rewards may teach the wrong thing: check its verdicts "
        "in Sessions, try another judge (judge.backend, judge.model_path), or pause training."
    )


def balance_warning(counts: Mapping[int, int], s: HealthSettings) -> str | None:
    """A sentence when one reward sign dominates recent judgments (and there are enough)."""
    total = sum(counts.values())
    if total < s.min_judgments:
        return None
    sign, n = max(counts.items(), key=lambda kv: kv[1])
    share = n / total
    if share <= s.max_sign_share:
        return None
    meaning = {
        1: "the judge may be too lenient, and training learns little from all-positive rewards",
        0: "the judge rarely decides, so training has almost nothing to learn from",
        -1: "the judge may be too harsh, or the model got worse (roll back in Checkpoints)",
    }[sign]
    return (
        f"{share:.0%} of the last {total} rewards are {SIGN_NAMES[sign]}: {meaning}; "
        "rate a few turns yourself to check the judge."
    )


def drift_warning(lengths: Sequence[VersionLength], s: HealthSettings) -> str | None:
    """A sentence when the newest version answers much longer or shorter than base (with
    enough turns of both)."""
    base = next((v for v in lengths if v.version == BASE), None)
    if not lengths or base is None or lengths[-1] is base:
        return None
    newest = lengths[-1]
    if min(newest.turns, base.turns) < s.min_turns_per_version:
        return None
    change = drift(newest.mean_tokens, base.mean_tokens)
    if change is None or abs(change) <= s.max_length_drift:
        return None
    way = "longer" if change > 0 else "shorter"
    return (
        f"{newest.version} answers are {abs(change):.0%} {way} than base's "
        f"({newest.mean_tokens:.0f} vs {base.mean_tokens:.0f} tokens): the judge may be "
        "rewarding length, not quality; read a few answers and roll back in Checkpoints if "
        "they got worse."
    )


def summarize(
    agreement_values: Sequence[float],
    sign_counts: Mapping[int, int],
    lengths: Sequence[VersionLength],
    s: HealthSettings,
) -> dict[str, Any]:
    """The judge-health summary (JSON-ready) from what the store read."""
    value, n = agreement(agreement_values)
    warnings = [
        agreement_warning(value, n, s),
        balance_warning(sign_counts, s),
        drift_warning(lengths, s),
    ]
    return {
        "agreement": {"value": value, "n": n},
        "balance": {"n": sum(sign_counts.values()), **reward_balance(sign_counts)},
        "lengths": [asdict(v) for v in lengths],
        "drift": length_drift(lengths),
        "warnings": [w for w in warnings if w],
    }


def judge_health(store: Store, s: HealthSettings) -> dict[str, Any]:
    """The judge-health summary of a store (three short reads)."""
    return summarize(
        store.recent_agreement(s.ratings),
        store.recent_reward_signs(s.judgments),
        store.answer_lengths(s.length_window),
        s,
    )
