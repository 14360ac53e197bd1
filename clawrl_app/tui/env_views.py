"""Pure view-model functions of the Environments screen (no Textual here): the engine's
env overview and job status in, table rows, lines and chart series out."""

from __future__ import annotations

import time
from typing import Any

from rich.markup import escape

from clawrl_app.tui.views import NONE, reward
from clawrl_app.tui.views import short as _short

ENV_COLUMNS = ("env", "tasks", "train", "held out", "families", "status")


def short(text: Any, width: int = 60) -> str:
    """One line of at most `width` characters, with Rich markup escaped (model replies
    and pages contain `[e7]`-like text that would otherwise be read as markup)."""
    return escape(_short(str(text), width))


def env_row(e: dict[str, Any]) -> tuple[str, ...]:
    """A row of the env table: counts, families and whether it can run here."""
    families = ", ".join(f"{name} {n}" for name, n in e.get("families", {}).items())
    status = "ready" if e["available"] else "unavailable"
    return (e["name"], str(e["tasks"]), str(e["train"]), str(e["heldout"]),
            short(families or NONE, 34), status)  # fmt: skip


def requirements_line(overview: dict[str, Any]) -> str:
    """Sandbox and browser status in one line (what to install when missing)."""
    sb, br = overview.get("sandbox") or {}, overview.get("browser") or {}
    sandbox = (
        f"sandbox: {sb.get('name')} ok"
        if sb.get("ok")
        else f"sandbox: unavailable ({sb.get('detail', NONE)})"
    )
    browser = "browser: ok" if br.get("ok") else f"browser: {br.get('detail', 'unavailable')}"
    return f"{sandbox} · {browser}"


def unavailable_note(overview: dict[str, Any]) -> str:
    """Why each unavailable env cannot run (one line each), or empty."""
    return "\n".join(
        f"{e['name']}: {e['why']}" for e in overview.get("envs", []) if not e["available"]
    )


def _duration(job: dict[str, Any], now: float | None = None) -> str:
    end = job.get("finished") or (now if now is not None else time.time())
    s = max(0, int(end - job["started"]))
    return f"{s // 60}:{s % 60:02d}"


def job_summary(job: dict[str, Any] | None, now: float | None = None) -> str:
    """The job panel: what runs, its state, episodes, success rate, checkpoints."""
    if job is None:
        return "No env job yet.\nt: train on the selected env · e: evaluate it"
    rate = job.get("success_rate")
    what = (
        f"training {job['env']} until {job['steps']} new checkpoint"
        + ("s" if job["steps"] != 1 else "")
        if job["kind"] == "train"
        else f"evaluating {job['env']} ({job['split']} tasks)"
    )
    lines = [
        f"[b]{what}[/b]",
        f"state {job['state']} · {_duration(job, now)}",
        f"episodes {job['episodes']} · solved {job['successes']} · success "
        f"{NONE if rate is None else f'{rate:.0%}'} · aborted {job['aborted']}",
    ]
    if job["kind"] == "train":
        varied = (
            f" · groups with variance {job.get('varied', 0)}/{job['groups']}"
            if job.get("groups")
            else ""
        )
        lines.append(
            f"checkpoints {job['checkpoints']}/{job['steps']} · rounds {len(job['rounds'])}"
            + varied
        )
    if job.get("note"):
        lines.append(f"[b]{job['note']}[/b]")
    if job.get("error"):
        lines.append(f"[b]error[/b] {short(job['error'], 200)}")
    return "\n".join(lines)


def job_curves(job: dict[str, Any] | None) -> dict[str, tuple[list[float], list[float]]]:
    """Per-round series: `success` (rate, 0..1) and `reward` (mean outcome reward)."""
    rounds = (job or {}).get("rounds", [])
    success = ([float(r["round"]) for r in rounds], [float(r["success_rate"]) for r in rounds])
    scored = [r for r in rounds if r.get("reward_mean") is not None]
    rewards = ([float(r["round"]) for r in scored], [float(r["reward_mean"]) for r in scored])
    return {"success": success, "reward": rewards}


def live_text(job: dict[str, Any] | None, turns: int = 6) -> str:
    """The live episode: task, the last turns (reply, actions, observations), its result."""
    live = (job or {}).get("live")
    if not live:
        return "No episode yet."
    out = [f"[b]task {live['task_id']}[/b]: {short(live['instruction'], 300)}"]
    for t in live["turns"][-turns:]:
        out.append(f"[b]turn {t['index'] + 1}[/b] model: {short(t['response'] or NONE, 240)}")
        out += [f"  action: {short(a, 200)}" for a in t["actions"]]
        out += [f"  observation: {short(o, 240)}" for o in t["observations"]]
        if t.get("parse_error"):
            out.append(f"  parse error: {short(t['parse_error'], 160)}")
    r = live.get("result")
    if r:
        score = NONE if r["score"] is None else f"{r['score']:.2f}"
        out.append(
            f"[b]verifier[/b] {'solved' if r['success'] else 'not solved'} · score {score} · "
            f"reward {reward(r['reward'])} · {r['status']} ({short(r['reason'], 80)})"
        )
    return "\n".join(out)
