"""The privacy commands: `clawrl-app sessions delete ID`, `clawrl-app data export DIR`,
`clawrl-app data wipe`.

A delete goes through the running engine when there is one (so it also forgets the
session in memory), else straight to the store file. A wipe refuses while an engine answers
on the configured port.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from clawrl_app.config import LoadedSettings
from clawrl_app.paths import AppPaths

STOP_HINT = (
    "Stop it first: quit the terminal UI (ctrl+q) or press ctrl+c where `clawrl-app serve` "
    "runs (or stop its service), then run this again."
)


def add_data_parser(sub: Any) -> None:
    """`data export DIR` and `data wipe [--yes]`."""
    p = sub.add_parser(
        "data",
        help="export everything about you, or wipe it",
        description="Your data: `export` writes it all as documented JSON Lines "
        "(docs/data-export.md); `wipe` deletes the store, checkpoints and logs but keeps the "
        "base model, its converted cache, your settings and the API key.",
    )
    dsub = p.add_subparsers(dest="data_command", metavar="ACTION", required=True)
    e = dsub.add_parser("export", help="write sessions, turns, samples, ... as JSONL into DIR")
    e.add_argument("dir", metavar="DIR", help="output folder (new or empty; made 0700)")
    w = dsub.add_parser(
        "wipe", help="delete the store, checkpoints and logs (keeps the model cache)"
    )
    w.add_argument("--yes", action="store_true", help="do not ask for the typed confirmation")


def add_delete_parser(ssub: Any) -> None:
    """`sessions delete ID [--yes]`."""
    d = ssub.add_parser(
        "delete",
        help="delete a session and everything derived from it",
        description="Deletes the session's turns, samples, judgments, episode and events in "
        "one transaction. Checkpoints that already trained on it keep their weights; roll "
        "back with `clawrl-app rollback --before-session ID`.",
    )
    d.add_argument("session_id", metavar="ID")
    d.add_argument("--yes", action="store_true", help="do not ask for confirmation")


def running_engine(loaded: LoadedSettings, paths: AppPaths) -> tuple[str, str | None] | None:
    """(base URL, API key) of an engine answering on the configured port, else None."""
    import httpx

    from clawrl_app.api_key import get_api_key, is_loopback

    s = loaded.settings.server
    host = "127.0.0.1" if s.host in ("0.0.0.0", "::") else s.host
    base = f"http://{host}:{s.port}"
    try:
        httpx.get(f"{base}/healthz", timeout=3)
    except httpx.HTTPError:
        return None
    needs_key = s.require_api_key or not is_loopback(s.host)
    stored = get_api_key(paths, create=False) if needs_key else None
    return base, stored.value if stored is not None else None


def _ask(prompt: str, want: Callable[[str], bool]) -> bool:
    try:
        return want(input(prompt).strip())
    except EOFError:
        return False


def cmd_sessions_delete(args: argparse.Namespace, loaded: LoadedSettings, paths: AppPaths) -> int:
    """Confirm (unless --yes), then delete through the engine or the store file."""
    from clawrl_app.engine.store import Store

    sid = args.session_id
    if not paths.store_file.exists():
        print("error: no store yet: nothing to delete.", file=sys.stderr)
        return 1
    with Store(paths.store_file) as store:
        if store.get_session(sid) is None:
            print(f"error: no session {sid!r}; `clawrl-app sessions` lists them.", file=sys.stderr)
            return 1
        turns = len(store.turns_for_session(sid))
        trained = sorted({s.trained_in for s in store.samples_for_session(sid) if s.trained_in})
    if not args.yes:
        print(f"Delete session {sid} ({turns} turns, with its samples, judgments and events)?")
        if trained:
            print(
                f"{', '.join(trained)} already trained on it: those checkpoints keep their "
                f"weights. To stop serving them: clawrl-app rollback --before-session {sid}"
            )
        if not _ask("Delete? [y/N] ", lambda a: a.lower() in ("y", "yes")):
            print("nothing deleted")
            return 1
    engine = running_engine(loaded, paths)
    if engine is not None:
        import httpx

        base, key = engine
        r = httpx.post(
            f"{base}/admin/sessions/{sid}/delete",
            json={},
            timeout=60,
            headers={"Authorization": f"Bearer {key}"} if key else {},
        )
        if r.status_code != 200:
            print(f"error: {r.json().get('error', {}).get('message', r.text)}", file=sys.stderr)
            return 1
        trained = r.json()["trained_in"]
    else:
        with Store(paths.store_file) as store:
            gone = store.delete_session(sid)
        if gone is None:
            print(f"error: no session {sid!r}", file=sys.stderr)
            return 1
        trained = gone.trained_in
    print(f"deleted session {sid}")
    if trained:
        print(
            f"{', '.join(trained)} trained on it and keep their weights; "
            f"`clawrl-app rollback --before-session {sid}` serves the newest checkpoint before it."
        )
    return 0


def cmd_data(args: argparse.Namespace, loaded: LoadedSettings, paths: AppPaths) -> int:
    """`data export` / `data wipe`."""
    if args.data_command == "export":
        return _export(Path(args.dir), paths)
    return _wipe(args, loaded, paths)


def _export(out: Path, paths: AppPaths) -> int:
    from clawrl_app.engine.store import Store
    from clawrl_app.privacy.data_export import export_data

    if not paths.store_file.exists():
        print("error: no store yet: nothing to export.", file=sys.stderr)
        return 1
    with Store(paths.store_file) as store:
        try:
            counts = export_data(store, paths, out)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    lines = ", ".join(f"{name} {n}" for name, n in counts.items())
    print(f"wrote {out} (0700; files 0600): {lines}")
    return 0


def _wipe(args: argparse.Namespace, loaded: LoadedSettings, paths: AppPaths) -> int:
    from clawrl_app.privacy.wipe import plan_wipe, wipe

    if running_engine(loaded, paths) is not None:
        port = loaded.settings.server.port
        print(f"error: clawrl-app is running (port {port}). {STOP_HINT}", file=sys.stderr)
        return 1
    plan = plan_wipe(paths)
    if not plan.remove:
        print("nothing to wipe: no store, checkpoints or logs.")
        return 0
    print("This deletes, for good:")
    for p in plan.remove:
        print(f"  {p}")
    print(f"({plan.size_bytes() / 1e6:.1f} MB). Kept: " + ", ".join(str(k) for k in plan.keep))
    print("(the base model and its converted cache, your settings and the API key)")
    if not args.yes and not _ask("Type 'wipe' to confirm: ", lambda a: a == "wipe"):
        print("nothing deleted")
        return 1
    n = wipe(plan)
    print(f"wiped {n} entries; the next start begins with an empty store.")
    return 0
