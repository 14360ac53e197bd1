"""Pure view-model functions: engine data in, strings and series out (no Textual here)."""

from __future__ import annotations

import time
from typing import Any

NONE = "–"


def clock(ts: float | None) -> str:
    """Local date and time of a Unix timestamp, to the second."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else NONE


def reward(value: float | None) -> str:
    """A reward with its sign (`+1.00`), or a dash when not judged yet."""
    return NONE if value is None else f"{value:+.2f}"


def short(text: str, width: int = 60) -> str:
    """One line, at most `width` characters."""
    line = " ".join(str(text).split())
    return line if len(line) <= width else line[: width - 1] + "…"


def source_label(s: dict[str, Any]) -> str:
    """Where a session came from; env rollouts are marked `env ▸ <env> <task>`."""
    ep = s.get("episode")
    if ep:
        return f"env ▸ {ep['env']} {ep['task_id']}"
    source = str(s.get("source") or NONE)
    return f"env ▸ {source[4:]}" if source.startswith("env:") else source


def episode_line(ep: dict[str, Any] | None) -> str:
    """An env session's episode in one line (empty for conversations)."""
    if not ep:
        return ""
    trained = "trained on" if ep["trained"] else "not trained on"
    return (
        f"env episode: {ep['env']} task {ep['task_id']} ({ep['split']}), {ep['status']}, "
        f"outcome {reward(ep['outcome_reward'])}, {trained}"
    )


def session_row(s: dict[str, Any]) -> tuple[str, ...]:
    """A row of the sessions table."""
    return (
        short(s["id"], 28),
        short(source_label(s), 28),
        str(s["turns"]),
        reward(s["mean_reward"]),
        s["review_state"],
        clock(s["created"]),
    )


def votes_text(votes: list[Any]) -> str:
    """The judge's votes in a compact form, e.g. `+1 +1 -1`."""
    parts = []
    for v in votes:
        score = v.get("score") if isinstance(v, dict) else v
        parts.append(f"{score:+g}" if isinstance(score, int | float) else str(score))
    return " ".join(parts) or NONE


def turn_row(t: dict[str, Any]) -> tuple[str, ...]:
    """A row of the session detail: one recorded turn."""
    rated = {1: " (you +1)", -1: " (you -1)"}.get(t["user_rating"] or 0, "")
    return (
        str(t["idx"]),
        t["type"],
        short(t["prompt"], 40),
        short(t["response"], 60),
        reward(t["reward"]) + rated,
        votes_text(t["votes"]),
        short(t["hint"] or NONE, 30),
        t["trained_in"] or NONE,
    )


def trained_versions(detail: dict[str, Any]) -> list[str]:
    """The checkpoints that already trained on this session (sorted, unique)."""
    return sorted({t["trained_in"] for t in detail["turns"] if t["trained_in"]})


def delete_text(session_id: str, turns: int, trained: list[str]) -> str:
    """The confirmation text of a session delete: what goes, what stays."""
    text = (
        f"Deletes {session_id} for good: its {turns} turns, samples, judgments, episode and "
        "events, in one transaction. This cannot be undone."
    )
    if trained:
        text += (
            f" {', '.join(trained)} already trained on it: those checkpoints keep their "
            "weights. After the delete you will be offered to roll back to before this session."
        )
    return text


def metric(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, int | float) else NONE


def checkpoint_row(c: dict[str, Any]) -> tuple[str, ...]:
    """A row of the checkpoints table; the served version is marked with ▶."""
    m = c["metrics"]
    return (
        ("▶ " if c["served"] else "  ") + c["version"],
        c["parent"] or "base",
        str(c["step"]),
        clock(c["created"]),
        c["status"],
        metric(m.get("loss")),
        metric(m.get("reward/mean")),
        metric(m.get("kl")),
        str(len(c["sessions"])),
    )


def rollback_plan(target: str, served: str | None, rows: list[dict[str, Any]]) -> str:
    """The confirmation text: exactly what serving `target` does."""
    later = [c["version"] for c in rows if c["version"] != target and _is_after(c, target, rows)]
    text = (
        f"Serve {target} instead of {served or 'the current version'}: new requests use "
        f"{target} at once (requests in flight finish on the old one), and the trainer "
        f"restarts from {target}"
        + (" (the base model, no adapter)" if target == "base" else " (its weights and optimizer)")
        + "."
    )
    if later:
        text += f" {', '.join(later)} stay on disk; roll forward with f."
    return text


def _is_after(c: dict[str, Any], target: str, rows: list[dict[str, Any]]) -> bool:
    if target == "base":
        return True
    t = next((r for r in rows if r["version"] == target), None)
    return t is not None and c["step"] > t["step"]


def newest_version(rows: list[dict[str, Any]]) -> str | None:
    """The most recent servable checkpoint (the roll-forward target)."""
    ok = [c for c in rows if c["status"] in ("ready", "published")]
    return max(ok, key=lambda c: (c["created"], c["step"]))["version"] if ok else None


def curve(points: list[list[float]]) -> tuple[list[float], list[float]]:
    """`[[step, value], ...]` → (steps, values), in step order."""
    ordered = sorted(points, key=lambda p: p[0])
    return [p[0] for p in ordered], [p[1] for p in ordered]


LOOPS = ("serving", "collection", "judging", "training", "publishing", "storage")


def loop_lines(status: dict[str, Any]) -> list[str]:
    """One line per loop: state, queue depth and last error (and one for the store: ok, or
    failed with what to do)."""
    lines = []
    for name in LOOPS:
        loop = status.get(name)
        if not isinstance(loop, dict):
            continue
        state = loop.get("state") or ("failed" if loop.get("last_error") else "running")
        depth = loop.get("queue_depth")
        line = f"{name:<11} {state:<8}"
        if depth is not None:
            line += f" queue {depth}"
        if loop.get("stepping"):
            line += " step in progress"
        if loop.get("last_error"):
            line += f"  last error: {short(loop['last_error'], 60)}"
        lines.append(line)
    return lines


def counter_line(status: dict[str, Any]) -> str:
    """Turns and samples by state, in one line."""
    c = status.get("counts") or {}
    return (
        f"sessions {c.get('sessions', 0)} · turns {c.get('turns', 0)} · samples "
        f"pending {c.get('samples_pending', 0)} / judged {c.get('samples_judged', 0)} / "
        f"trained {c.get('samples_trained', 0)} / excluded {c.get('samples_excluded', 0)}"
        + privacy_text(status)
    )


def privacy_text(status: dict[str, Any]) -> str:
    """` · redacted N · incognito M` when there is anything to say (else "")."""
    p = status.get("privacy") or {}
    redacted = sum((p.get("redactions") or {}).values())
    incognito = p.get("incognito_turns") or 0
    out = f" · redacted {redacted}" if redacted else ""
    return out + (f" · incognito {incognito}" if incognito else "")


def endpoint_line(status: dict[str, Any]) -> str:
    """Endpoint URL, key hint and served version."""
    key = status.get("api_key_hint")
    key_text = f"key {key} (clawrl-app api-key)" if key else "no key needed (loopback)"
    version = (status.get("serving") or {}).get("version") or NONE
    return f"{status.get('url') or NONE}  ·  {key_text}  ·  serving {version}"


def percent(share: float | None) -> str:
    """A share as a whole percentage (`83%`), or a dash."""
    return NONE if share is None else f"{share:.0%}"


def signed_percent(change: float | None) -> str:
    """A relative change with its sign (`+58%`), or a dash."""
    return NONE if change is None else f"{change:+.0%}"


def judge_health_lines(status: dict[str, Any], versions: int = 3) -> list[str]:
    """The judge-health panel: agreement with your ratings (n), reward balance (n), mean
    answer tokens of the last `versions` versions (base always among them) and the newest one's drift."""
    h = status.get("judge_health")
    if not h:
        return ["(no data yet)"]
    a, b = h["agreement"], h["balance"]
    lines = [
        f"agreement {percent(a['value'])} of {a['n']} ratings",
        f"rewards   +1 {percent(b['+1'])} · 0 {percent(b['0'])} · -1 {percent(b['-1'])} of {b['n']}"
        if b["n"]
        else f"rewards   {NONE}",
    ]
    lengths = h["lengths"]
    base = [v for v in lengths if v["version"] == "base"]
    shown = lengths[-versions:]
    if base and base[0] not in shown:
        shown = base + lengths[-(versions - 1) :]
    parts = [f"{v['version']} {v['mean_tokens']:.0f}" for v in shown]
    lines.append("length    " + (" · ".join(parts) + " tok" if parts else NONE))
    d = h["drift"]
    if d["vs_previous"] is not None or d["vs_base"] is not None:
        lines.append(
            f"drift     {d['version']} {signed_percent(d['vs_previous'])} vs prev · "
            f"{signed_percent(d['vs_base'])} vs base"
        )
    return lines


CURVE_TITLES = {
    "guard/personal": "personal score (held-out)",
    "guard/general": "general score (code-checked)",
    "guard/degeneration": "degeneration rate",
}


def _fig(value: Any) -> str:
    return "-" if value is None else f"{value:.2f}"


def _repeats(verdict: dict[str, Any]) -> str:
    """ ", repeats 0.13 vs 0.03" when the verdict measured repeated phrases; else ""."""
    if verdict.get("user_repetition") is None:
        return ""
    return f", repeats {_fig(verdict['user_repetition'])} vs {_fig(verdict.get('base_user_repetition'))}"


def _at_length(verdict: dict[str, Any]) -> str:
    """ " · at your length (64 tok) 0.04 vs base 0.04, new loops 1/24" when measured."""
    n = verdict.get("budget_n")
    if not n:
        return ""
    share = verdict.get("budget_new_loops")  # a share of the n answers
    loops = "-" if share is None else str(round(share * n))
    return (
        f" · at your length ({verdict.get('budget_tokens')} tok) "
        f"{_fig(verdict.get('budget_degeneration'))} vs base "
        f"{_fig(verdict.get('base_budget_degeneration'))}, new loops "
        f"{loops}/{n}"
    )


def _confirmed(verdict: dict[str, Any]) -> str:
    """ ", 24 prompts, confirmed" when one answer's refusal was checked on more prompts."""
    if not verdict.get("user_confirmed"):
        return ""
    return f", {verdict.get('user_prompts')} prompts, confirmed"


def guard_score_lines(status: dict[str, Any]) -> list[str]:
    """The regression guard's last checked versions, one line each: personal score (with
    "n/8, not deciding" under the minimum of held-out turns), general score, degeneration
    rate (and on the user's own prompts, against the base's there; and on open prompts at the
    user's answer length, with the new loops), verdict. Empty before the first check."""
    guard = (status.get("publishing") or {}).get("guard") or {}
    recent = guard.get("recent") or []
    if not recent:
        return []
    base = recent[-1].get("base_degeneration")
    lines = [
        f"guard     refuses degeneration > base {_fig(base)} + "
        f"{guard.get('max_degeneration_rise', 0):g}; personal decides from "
        f"{guard.get('min_personal_items', '?')} held-out turns"
    ]
    for v in reversed(recent):
        n, need = v.get("personal_n", 0), guard.get("min_personal_items", 0)
        turns = f"{n}" if v.get("personal_decides", True) else f"{n}/{need}, not deciding"
        verdict = "passed" if v.get("passed") else "REFUSED"
        mine = (
            f" (your prompts {_fig(v.get('user_degeneration'))} vs base "
            f"{_fig(v.get('base_user_degeneration'))}{_repeats(v)}{_confirmed(v)})"
            if v.get("user_prompts")
            else ""
        )
        lines.append(
            f"{v['candidate']:<9} personal {_fig(v.get('personal'))} ({turns}) · general "
            f"{_fig(v.get('general'))} · degeneration {_fig(v.get('degeneration'))}{mine}"
            f"{_at_length(v)} · {verdict}"
        )
    return lines


def curve_title(name: str) -> str:
    """A chart's title: the metric's name, or what a guard score means."""
    return CURVE_TITLES.get(name, name)


def guard_banner(status: dict[str, Any]) -> str:
    """The regression guard's last verdict when it refused a version (else empty)."""
    publishing = status.get("publishing") or {}
    last = (publishing.get("guard") or {}).get("last")
    if not last or last.get("passed", True):
        return ""
    why = "; ".join(last.get("reasons") or [])
    if last.get("deferred_until"):
        return (
            f"{last['candidate']} not served yet, {last['served']} still served: {why}. That "
            f"rests on one answer; checked again at {last['deferred_until']} of your prompts. "
            "Training goes on from it."
        )
    in_row, retreat = publishing.get("refused_in_row") or 0, publishing.get("retreat_after")
    then = (
        f"Training goes on from it (refusal {in_row} of {retreat} in a row before it goes "
        f"back to {last['served']})."
        if in_row and retreat
        else f"Training went back to {last['served']}."
    )
    return (
        f"⚠ {last['candidate']} refused by the regression guard, {last['served']} still served: "
        f"{why}. {then}"
    )


def judge_health_warnings(status: dict[str, Any]) -> list[str]:
    """The judge-health warnings, one line each with a marker (none when all is well)."""
    h = status.get("judge_health") or {}
    return [f"⚠ {w}" for w in h.get("warnings") or []]
