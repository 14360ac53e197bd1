"""`clawrl-app doctor`: hardware, plan, model, store, disk and key storage, explained.

Read-only: it reports what it finds (the store is checked with SQLite's quick check, never
migrated) and says what to do; it exits 1 only when the store is damaged.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from clawrl_app import __version__
from clawrl_app.config import Settings
from clawrl_app.paths import AppPaths

if TYPE_CHECKING:
    from clawrl_app.gpu_inventory import Inventory
    from clawrl_app.hardware import Plan

LOW_DISK_GIB = 2.0
"""Below this much free space in the data folder, doctor warns (turns stop being recorded
when the disk is full; a LoRA checkpoint of a 7B model is ~100 MB, a full one ~15 GB)."""


def sglang_line(inv: Inventory, settings: Settings) -> str:
    """Where SGLang would run from, or why it would not (and what to do)."""
    if settings.hardware.sglang_python:
        return f"{settings.hardware.sglang_python} (hardware.sglang_python)"
    if inv.sglang_installed:
        return f"{inv.sglang_installed} (installed by `make run`)"
    if inv.sglang_available:
        return "importable in this environment"
    if inv.gpus:
        return (
            "not installed: `make run` installs it on NVIDIA machines (its log: "
            ".venv-sglang.log); meanwhile the torch backend serves"
        )
    return "not needed (no NVIDIA GPU: llama.cpp or torch serve on the CPU)"


def run_doctor(settings: Settings, paths: AppPaths, *, resolve: bool = True) -> int:
    """Print the report; `resolve=False` skips resolving (and converting) the model."""
    from clawrl_app.cpu_backend import INSTALL, llamacpp_installed, with_cpu_backend
    from clawrl_app.hardware import ModelInfo, PlanError, format_plan, inventory, plan

    inv = inventory()
    print(f"clawrl-app {__version__} doctor\n")
    print("Hardware")
    print(f"  CPU cores: {inv.cpu_count}, RAM: {inv.ram_gib:.1f} GiB")
    if inv.gpus:
        for g in inv.gpus:
            print(f"  GPU {g.index}: {g.name}, {g.memory_gib:.0f} GiB")
    else:
        print("  GPUs: none found (nvidia-smi absent or no device)")
    print(f"  sglang: {sglang_line(inv, settings)}")
    has_llama = llamacpp_installed()
    print(f"  llama.cpp importable: {'yes' if has_llama else f'no ({INSTALL})'}")
    print("\nModel")
    gguf = None
    if not resolve:
        print("  (skipped: --no-model)")
        info = ModelInfo.estimate("SmolLM2-135M-Instruct", 0.135, 8192)
    else:
        from clawrl_app.models import gguf_source, read_model_config, resolve_model

        m = resolve_model(settings.model.path, paths)
        gguf = gguf_source(m)
        info = ModelInfo.from_hf_config(m.name, read_model_config(m.path))
        print(f"  {m.name} ({m.source}) at {m.path}")
        print(f"  {info.params_b:.3f} B parameters, context {m.context_length} tokens")
    print("\nPlan")
    try:
        the_plan = with_cpu_backend(
            plan(inv, info, settings), settings.hardware.backend, has_llama, gguf
        )
        print("  " + format_plan(the_plan).replace("\n", "\n  "))
        print("\nServing")
        for line in prefix_cache_lines(settings, the_plan, paths):
            print(f"  {line}")
    except PlanError as exc:
        print(f"  cannot plan: {exc}")
    print("\nStore, disk and secrets")
    store_ok, line = store_line(paths.store_file)
    print(f"  {line}")
    print(f"  {disk_line(paths.data_dir)}")
    config = paths.config_file
    print(f"  config file: {config}{'' if config.exists() else ' (none; defaults)'}")
    print(f"  keyring backend: {_keyring_line(paths)}")
    print("\nPrivacy")
    for line in privacy_lines(settings, paths.store_file if store_ok else None):
        print(f"  {line}")
    if store_ok and paths.store_file.exists():
        print("\nPublishing")
        for line in publishing_lines(paths.store_file):
            print(f"  {line}")
        print("\nJudge health")
        for line in judge_health_lines(settings, paths.store_file):
            print(f"  {line}")
        print("\nRegression guard")
        for line in guard_lines(settings, paths.store_file):
            print(f"  {line}")
    return 0 if store_ok else 1


def guard_lines(settings: Settings, store_file: Path) -> list[str]:
    """Whether the guard is on and with what thresholds, the personal set's size, and its
    latest verdicts (a refusal first says so)."""
    from datetime import datetime

    from clawrl_app.engine.store.peek import held_out_count_readonly, latest_events_readonly

    g = settings.guard
    if not g.enabled:
        return ["OFF (guard.enabled = false): new checkpoints are served without the check"]
    lines = [
        f"on: every {g.every} checkpoint(s); refuses a drop of > {g.max_personal_drop:g} "
        f"personal (with >= {g.min_personal_items} held-out turns; fewer: not deciding) or > "
        f"{g.max_general_drop:g} general ({g.general_items} questions), or a degeneration rate "
        f"> base + {g.max_degeneration_rise:g} (answers to the questions and "
        f"{g.open_prompts} open prompts of {g.open_max_tokens} tokens; and on your "
        f"{g.user_form_items} newest prompts vs the base's answers to them; and "
        f"{g.budget_prompts} more open prompts at your answer length), or repeated "
        f"phrases on those prompts > base + {g.max_repetition_rise:g}, or new loops > "
        f"{g.max_new_loops:g} (to the nearest answer)"
        f"{'; one answer alone: confirmed on the next prompts (deferred until they exist)' if g.user_form_confirm else ''}"
        f"; the trainer goes back to the served version after "
        f"{g.retreat_after} refusal(s) in a row",
        f"held-out turns (never trained on): {held_out_count_readonly(store_file)} "
        f"({g.holdout_share:.0%} of new main turns)",
    ]
    checked = latest_events_readonly(store_file, "GuardChecked", limit=5)
    if not checked:
        return [*lines, "no checkpoint checked yet"]
    for ev in checked:
        p = ev.payload
        why = "; ".join(p.get("reasons") or [])
        verdict = (
            "passed"
            if p.get("passed")
            else f"deferred to {p['deferred_until']} of your prompts: {why}"
            if p.get("deferred_until")
            else f"REFUSED: {why}"
        )
        lines.append(
            f"{datetime.fromtimestamp(ev.ts):%Y-%m-%d %H:%M}  {p.get('summary')}: {verdict}"
        )
    return lines


def prefix_cache_lines(settings: Settings, plan: Plan, paths: AppPaths | None) -> list[str]:
    """The prefix KV cache: its bound and where that comes from, then the live figures of
    an engine running on the configured port (when one answers; `paths` None: no probe)."""
    from clawrl_app.engine.backends.prefix_cache import MIN_REUSE_TOKENS
    from clawrl_app.hardware import prefix_cache_mib

    if plan.backend == "sglang":
        return ["prefix cache: SGLang's own (radix cache); server.prefix_cache_mb does not apply"]
    mib = prefix_cache_mib(settings, plan)
    asked = settings.server.prefix_cache_mb is not None
    source = "server.prefix_cache_mb" if asked else "the plan's default"
    if mib == 0:
        return [f"prefix cache: off ({source} = 0): every turn prefills its whole prompt"]
    lines = [
        f"prefix cache: {mib} MiB ({source}): a prompt that repeats an earlier prompt + answer "
        f"of the same version (>= {MIN_REUSE_TOKENS} tokens) prefills only the rest"
    ]
    live = _live_prefix_stats(settings, paths) if paths is not None else None
    if live is not None:
        lines.append(
            f"running engine: {live['entries']} entries, {live['bytes'] / 2**20:.0f} MiB, "
            f"{live['hits']} hits / {live['misses']} misses, {live['tokens_reused']} tokens "
            f"reused, {live['evictions']} evictions"
        )
    return lines


def _live_prefix_stats(settings: Settings, paths: AppPaths) -> dict[str, int] | None:
    """The prefix cache figures of the engine on the configured port; None when none answers."""
    from clawrl_app.api_key import get_api_key, is_loopback
    from clawrl_app.envs.engine_client import EngineClient

    s = settings.server
    host = "127.0.0.1" if s.host in ("0.0.0.0", "::") else s.host
    try:
        stored = get_api_key(paths) if (s.require_api_key or not is_loopback(s.host)) else None
        client = EngineClient(f"http://{host}:{s.port}", stored.value if stored else None, 2.0)
        try:
            stats = client.status().get("serving", {}).get("prefix_cache")
        finally:
            client.close()
    except Exception:  # nothing running there (or not ours): doctor only reports
        return None
    return stats if isinstance(stats, dict) else None


def privacy_lines(settings: Settings, store_file: Path | None) -> list[str]:
    """Whether turns are redacted, the incognito rules, and the redactions counted so far."""
    from clawrl_app.engine.store.peek import redaction_counts_readonly

    p = settings.privacy
    extra = f" + {len(p.redact_patterns)} pattern(s) of yours" if p.redact_patterns else ""
    lines = [f"redaction: {'on' + extra if p.redact else 'OFF (privacy.redact = false)'}"]
    rules = len(p.incognito_patterns) + len(p.incognito_sources)
    lines.append(f"incognito: X-Session-Incognito header; {rules} rule(s) in [privacy]")
    counts = redaction_counts_readonly(store_file) if store_file and store_file.exists() else {}
    shown = ", ".join(f"{kind} {n}" for kind, n in counts.items()) or "none yet"
    lines.append(f"redacted so far: {shown}")
    return lines


def publishing_lines(store_file: Path) -> list[str]:
    """The checkpoints the publisher refused lately, with the numbers it refused them on."""
    from datetime import datetime

    from clawrl_app.engine.store.peek import latest_events_readonly

    refused = latest_events_readonly(store_file, "PublishRefused", limit=5)
    if not refused:
        return ["no checkpoint was refused"]
    lines = [
        f"{datetime.fromtimestamp(ev.ts):%Y-%m-%d %H:%M}  {ev.payload.get('reason', '?')}"
        for ev in refused
    ]
    return [
        *lines,
        "A refused checkpoint is never served. A canary gap means the server and the trainer",
        "compute different policies (precision, quantization): see README, 'GPU workstations'.",
    ]


def judge_health_lines(settings: Settings, store_file: Path) -> list[str]:
    """One line of judge health (agreement with your ratings, reward balance, length drift of
    the newest version vs base), then its warnings."""
    from clawrl_app.engine.judging.health import summarize
    from clawrl_app.engine.store.peek import judge_health_inputs_readonly

    s = settings.health
    h = summarize(
        *judge_health_inputs_readonly(store_file, s.ratings, s.judgments, s.length_window), s
    )
    a, b, d = h["agreement"], h["balance"], h["drift"]
    agree = "no ratings yet" if a["value"] is None else f"{a['value']:.0%} of {a['n']} ratings"
    balance = (
        f"+1 {b['+1']:.0%} / 0 {b['0']:.0%} / -1 {b['-1']:.0%} of {b['n']}" if b["n"] else "none"
    )
    length = "no drift vs base yet"
    if d["vs_base"] is not None:
        length = f"{d['version']} {d['vs_base']:+.0%} vs base"
    line = f"agreement with you: {agree}; rewards: {balance}; answer length: {length}"
    return [line, *(f"WARNING: {w}" for w in h["warnings"])]


def store_line(store_file: Path) -> tuple[bool, str]:
    """(sound, one line): where the store is, its size and SQLite's quick check of it."""
    from clawrl_app.engine.store import StoreError, check_store_file
    from clawrl_app.engine.store.faults import advice_for

    if not store_file.exists():
        return True, f"store: {store_file} (created on first start)"
    size_mb = store_file.stat().st_size / 1e6
    try:
        problems = check_store_file(store_file)
    except StoreError as exc:  # names the file, what is wrong and what to do
        return exc.kind == "locked", str(exc)
    if problems != "ok":
        first = "; ".join(problems.splitlines()[:3])
        advice = advice_for("corrupt", store_file)
        return False, f"store: {store_file} is DAMAGED ({first}). {advice}"
    return True, f"store: {store_file} ({size_mb:.1f} MB, integrity check ok)"


def free_bytes(folder: Path) -> tuple[Path, int]:
    """The nearest existing folder at or above `folder` and the free bytes on its disk."""
    existing = next(p for p in [folder, *folder.parents] if p.exists())
    return existing, shutil.disk_usage(existing).free


def disk_line(folder: Path, low_gib: float = LOW_DISK_GIB) -> str:
    """Free space where the data lives, with a warning under `low_gib`."""
    where, free = free_bytes(folder)
    gib = free / 2**30
    line = f"free disk space: {gib:.1f} GiB at {where}"
    if gib < low_gib:
        line += (
            f" - LOW (under {low_gib:g} GiB): free some space; when the disk is full, "
            "answers are no longer recorded and checkpoints cannot be written"
        )
    return line


def _keyring_line(paths: AppPaths) -> str:
    from clawrl_app.api_key import keyring_backend

    kb = keyring_backend()
    return kb or f"none: the API key falls back to a 0600 file ({paths.api_key_file})"
