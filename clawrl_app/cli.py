"""`clawrl-app` command line: launch, serve, doctor, config, openclaw-config, sessions, data."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
from typing import Any

from clawrl_app import __version__
from clawrl_app.compare_cli import add_compare_parser, cmd_compare
from clawrl_app.config import ConfigError, LoadedSettings, describe, load_settings
from clawrl_app.env_cli import add_env_parser, cmd_env
from clawrl_app.judge_eval_cli import add_judge_eval_parser, cmd_judge_eval
from clawrl_app.paths import AppPaths, app_paths
from clawrl_app.privacy.data_cli import (
    add_data_parser,
    add_delete_parser,
    cmd_data,
    cmd_sessions_delete,
)

EPILOG = "Settings: config.toml in the config dir < CLAWRL_<SECTION>__<KEY> env vars < flags."


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model",
        dest="model.path",
        metavar="SPEC",
        help="policy model: HF dir, hub id or .gguf (default: embedded SmolLM2-135M)",
    )
    p.add_argument("--host", dest="server.host", help="bind address (default 127.0.0.1)")
    p.add_argument("--port", dest="server.port", type=int, help="endpoint port (default 30000)")
    p.add_argument(
        "--backend",
        dest="hardware.backend",
        choices=["auto", "torch", "sglang", "llamacpp"],
        help="serving backend",
    )
    p.add_argument(
        "--custom-reward-path",
        dest="judge.custom_reward_path",
        metavar="FILE",
        help="Python file defining reward(turn, next_state, context); replaces the judge",
    )
    p.add_argument(
        "--custom-loss-path",
        dest="train.custom_loss_path",
        metavar="FILE",
        help="Python file defining loss(batch, cfg, adv_B); replaces the training objective",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="clawrl-app",
        epilog=EPILOG,
        description="Train your own agent by using it: a local OpenAI-compatible endpoint that "
        "records every turn, judges it and fine-tunes the model in the background.",
    )
    parser.add_argument("--version", action="version", version=f"clawrl-app {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("launch", help="start the engine and the terminal UI", epilog=EPILOG)
    _common(p)
    p = sub.add_parser("tui", help="attach the terminal UI to a running engine")
    p.add_argument("--attach", metavar="URL", help="the engine, e.g. http://127.0.0.1:30000")
    p.add_argument("--api-key", metavar="KEY", help="the engine's API key (if it needs one)")
    p = sub.add_parser("serve", help="start the engine headless (endpoint + loops)", epilog=EPILOG)
    _common(p)
    p = sub.add_parser("doctor", help="explain hardware, plan, model, store and key storage")
    _common(p)
    p.add_argument("--no-model", action="store_true", help="skip resolving/converting the model")
    p.add_argument(
        "--smoke",
        action="store_true",
        help="run the whole loop once on the configured model in a private temporary home "
        "(serve, record, judge, one training step, publish, canary) and print pass/fail with "
        "timings per stage; exits 1 when a stage fails. Your store and checkpoints are never "
        "touched; the temporary home is removed afterwards",
    )

    p = sub.add_parser("config", help="show the effective settings and where each came from")
    csub = p.add_subparsers(dest="config_command", metavar="ACTION")
    csub.add_parser("show", help="print every setting, its value, source and meaning")
    csub.add_parser("path", help="print the config file path")

    p = sub.add_parser(
        "openclaw-config", help="print the OpenClaw provider block for this endpoint"
    )
    _common(p)
    p.add_argument(
        "--compact",
        action="store_true",
        help="also print the small-prompt OpenClaw settings (for small-context models)",
    )

    p = sub.add_parser("sessions", help="list recorded sessions, show or delete one")
    ssub = p.add_subparsers(dest="sessions_command", metavar="ACTION")
    show = ssub.add_parser("show", help="print a session with its turns")
    show.add_argument("session_id")
    add_delete_parser(ssub)
    p.add_argument("--limit", type=int, default=50, help="how many sessions to list")

    add_judge_eval_parser(sub)

    p = sub.add_parser("rollback", help="serve an earlier checkpoint and retrain from it")
    p.add_argument(
        "version",
        nargs="?",
        help="checkpoint to serve (default: the previous one; 'base' = no adapter)",
    )
    p.add_argument(
        "--before-session",
        metavar="ID",
        help="the last checkpoint that never trained on this session",
    )
    _common(p)

    p = sub.add_parser("export", help="write a merged HF model folder for a checkpoint")
    p.add_argument("version", help="checkpoint version, e.g. v12")
    p.add_argument("--merged", metavar="DIR", required=True, help="output folder (new or empty)")
    p.add_argument(
        "--model",
        dest="model.path",
        metavar="SPEC",
        help="base model (default: the configured one)",
    )

    p = sub.add_parser("api-key", help="print the endpoint's API key and where it is stored")
    add_compare_parser(sub)
    add_data_parser(sub)
    add_env_parser(sub)
    return parser


FLAG_NAMES = {
    "model.path": "--model",
    "server.host": "--host",
    "server.port": "--port",
    "hardware.backend": "--backend",
    "judge.custom_reward_path": "--custom-reward-path",
    "train.custom_loss_path": "--custom-loss-path",
}


def _load(args: argparse.Namespace, paths: AppPaths) -> LoadedSettings:
    flags = {k: v for k, v in vars(args).items() if "." in k}
    return load_settings(paths.config_file, cli=flags, flag_names=FLAG_NAMES)


def main(argv: list[str] | None = None) -> int:
    """Run one `clawrl-app` command; returns its exit status.

    A reader that closes our stdout early (`clawrl-app sessions | head`) ends the command
    quietly with 141 (128 + SIGPIPE, what the shell reports for tools killed by SIGPIPE).
    """
    try:
        try:
            return _run(argv)
        finally:
            sys.stdout.flush()  # a closed pipe shows up here, not at interpreter exit
    except BrokenPipeError:
        # Python ignores SIGPIPE, so the write raised instead. Point stdout at devnull so
        # the interpreter's last flush at exit does not fail (and print) a second time.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 141


def _run(argv: list[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.command is None:
        parser.print_help()
        return 0
    paths = app_paths()
    try:
        loaded = _load(args, paths)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    handler = COMMANDS[args.command]
    try:
        return handler(args, loaded, paths)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # user-facing errors: one line, what to do next
        from clawrl_app.engine.store import StoreError
        from clawrl_app.hardware import PlanError
        from clawrl_app.models import ModelError

        if isinstance(exc, BrokenPipeError):
            raise  # stdout is gone: `main` ends quietly
        # OSError includes AppPathsError (a folder of the app that cannot be created)
        if isinstance(exc, ModelError | PlanError | OSError | StoreError):
            print(f"error: {exc}", file=sys.stderr)
            return 1
        raise


def cmd_serve(args: argparse.Namespace, loaded: LoadedSettings, paths: AppPaths) -> int:
    from clawrl_app.engine.orchestrator import Engine

    async def run() -> None:
        engine = Engine(loaded.settings, paths)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, stop.set)
        await engine.start()
        print(
            f"clawrl-app serving {engine.model.name if engine.model else '?'} at {engine.url}"
            f" (model alias '{loaded.settings.server.model_alias}'). Ctrl-C stops.",
            flush=True,
        )
        if engine.api_key:
            print("API key required: see `clawrl-app api-key`.", flush=True)
        try:
            await stop.wait()
        finally:
            print("stopping...", flush=True)
            await engine.stop()

    asyncio.run(run())
    return 0


def cmd_launch(args: argparse.Namespace, loaded: LoadedSettings, paths: AppPaths) -> int:
    """Engine (in a thread) + terminal UI; quitting the UI stops the engine and its trainer."""
    from clawrl_app.engine.engine_thread import EngineThread
    from clawrl_app.tui.app import ClawrlApp
    from clawrl_app.tui.client import LocalClient

    started: list[EngineThread] = []
    failures: list[BaseException] = []

    def start() -> LocalClient:
        try:
            thread = EngineThread(loaded.settings, paths)
            started.append(thread)
            return LocalClient(thread.start())
        except BaseException as exc:  # the loading screen shows it; repeated after the UI
            failures.append(exc)
            raise

    try:
        with _quiet_root_logging():
            ClawrlApp(start=start, keys=loaded.settings.ui.keys).run()
    finally:
        for thread in started:
            print("stopping the engine...", flush=True)
            thread.stop()
    if failures:
        print(f"error: the engine did not start: {failures[0]}", file=sys.stderr)
        return 1
    return 0


def cmd_tui(args: argparse.Namespace, loaded: LoadedSettings, paths: AppPaths) -> int:
    """The UI attached to a running engine; quitting leaves that engine running."""
    from clawrl_app.tui.app import ClawrlApp
    from clawrl_app.tui.client import HttpClient

    if not args.attach:
        print("error: give --attach URL (or use `clawrl-app launch`)", file=sys.stderr)
        return 2
    client = HttpClient(args.attach, args.api_key)
    try:
        client.status()
    except Exception as exc:
        print(f"error: cannot reach {args.attach}/admin/status: {exc}", file=sys.stderr)
        return 1
    try:
        with _quiet_root_logging():
            ClawrlApp(client, keys=loaded.settings.ui.keys).run()
    finally:
        client.close()
    return 0


@contextlib.contextmanager
def _quiet_root_logging() -> Any:
    """Detach the root log handlers (they write to the terminal the UI draws on)."""
    root = logging.getLogger()
    saved = root.handlers[:]
    root.handlers = [logging.NullHandler()]
    try:
        yield
    finally:
        root.handlers = saved


def cmd_doctor(args: argparse.Namespace, loaded: LoadedSettings, paths: AppPaths) -> int:
    from clawrl_app.doctor import run_doctor

    if args.smoke:
        from clawrl_app.smoke import run_smoke

        return run_smoke(loaded.settings, paths, verbose=args.verbose)
    return run_doctor(loaded.settings, paths, resolve=not args.no_model)


def cmd_config(args: argparse.Namespace, loaded: LoadedSettings, paths: AppPaths) -> int:
    if args.config_command == "path":
        print(paths.config_file)
        return 0
    for key, value, source, doc in describe(loaded):
        print(f"{key} = {json.dumps(value)}    # {source}")
        if doc:  # a multi-line docstring keeps its lines under the key, joined
            print(f"    {' '.join(line.strip() for line in doc.splitlines())}")
    return 0


def cmd_openclaw_config(args: argparse.Namespace, loaded: LoadedSettings, paths: AppPaths) -> int:
    from clawrl_app.api_key import get_api_key, is_loopback

    s = loaded.settings
    needs_key = s.server.require_api_key or not is_loopback(s.server.host)
    key = get_api_key(paths) if needs_key else None
    ctx, max_tokens = 8192, s.server.default_max_tokens
    if s.model.path:
        from clawrl_app.models import resolve_model

        with contextlib.suppress(Exception):
            ctx = resolve_model(s.model.path, paths, progress=False).context_length
    host = "127.0.0.1" if s.server.host in ("0.0.0.0", "::") else s.server.host
    block = openclaw_block(
        host, s.server.port, s.server.model_alias, key.value if key else "local", ctx, max_tokens
    )
    if args.compact or ctx < 16384:
        block.update(COMPACT_OPENCLAW)
        print(
            "note: the model's context is small, so the block includes OpenClaw's compact "
            "settings (minimal tools, no bootstrap files): its prompt then fits (~2k tokens).",
            file=sys.stderr,
        )
    print(json.dumps(block, indent=2))
    print("Merge this into ~/.openclaw/openclaw.json.", file=sys.stderr)
    return 0


COMPACT_OPENCLAW: dict[str, Any] = {
    "tools": {"profile": "minimal"},
    "agents": {"defaults": {"skipBootstrap": True, "contextInjection": "never"}},
}


def openclaw_block(
    host: str, port: int, alias: str, api_key: str, context_window: int, max_tokens: int
) -> dict[str, Any]:
    """The `models.providers.clawrl` entry of ~/.openclaw/openclaw.json."""
    return {
        "models": {
            "providers": {
                "clawrl": {
                    "baseUrl": f"http://{host}:{port}/v1",
                    "apiKey": api_key,
                    "api": "openai-completions",
                    "models": [
                        {
                            "id": alias,
                            "name": f"clawrl-app ({alias})",
                            "reasoning": False,
                            "input": ["text"],
                            "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
                            "contextWindow": context_window,
                            "maxTokens": max_tokens,
                        }
                    ],
                }
            }
        }
    }


def cmd_sessions(args: argparse.Namespace, loaded: LoadedSettings, paths: AppPaths) -> int:
    from clawrl_app.engine.store import Store
    from clawrl_app.session_report import session_detail, session_list

    if args.sessions_command == "delete":
        return cmd_sessions_delete(args, loaded, paths)
    if not paths.store_file.exists():
        print("No store yet: start the app (`make run` or `clawrl-app serve`) and chat with it.")
        return 0
    with Store(paths.store_file) as store:
        if args.sessions_command == "show":
            text = session_detail(store, args.session_id)
            if text is None:
                print(
                    f"error: no session {args.session_id!r}; `clawrl-app sessions` lists them.",
                    file=sys.stderr,
                )
                return 1
            print(text)
            return 0
        print(session_list(store, args.limit))
    return 0


def cmd_rollback(args: argparse.Namespace, loaded: LoadedSettings, paths: AppPaths) -> int:
    import httpx

    from clawrl_app.api_key import get_api_key, is_loopback

    s = loaded.settings.server
    host = "127.0.0.1" if s.host in ("0.0.0.0", "::") else s.host
    key = get_api_key(paths) if (s.require_api_key or not is_loopback(s.host)) else None
    body = {"version": args.version, "before_session": args.before_session}
    try:
        r = httpx.post(
            f"http://{host}:{s.port}/admin/rollback",
            json=body,
            timeout=120,
            headers={"Authorization": f"Bearer {key.value}"} if key else {},
        )
    except httpx.ConnectError:
        return _rollback_offline(args, paths)
    if r.status_code != 200:
        print(f"error: {r.json().get('error', {}).get('message', r.text)}", file=sys.stderr)
        return 1
    out = r.json()
    print(
        f"now serving {out['to']} (was {out['from']}; {out['reason']}); the trainer continues from it."
    )
    return 0


def _rollback_offline(args: argparse.Namespace, paths: AppPaths) -> int:
    """No engine running: record the choice; the next start serves it and trains from it."""
    from clawrl_app.engine.publishing.rollback import (
        RollbackError,
        ServedState,
        choose_target,
        read_served,
        write_served,
    )
    from clawrl_app.engine.store import Store

    if not paths.store_file.exists():
        print("error: nothing to roll back: no store yet.", file=sys.stderr)
        return 1
    state_file = paths.data_dir / "served.json"
    with Store(paths.store_file) as store:
        current = read_served(state_file)
        served = (
            current.version
            if current
            else (row.version if (row := store.served_checkpoint()) else "base")
        )
        try:
            target = choose_target(
                store.list_checkpoints(), served, args.version, args.before_session
            )
        except RollbackError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        store.add_event("RolledBack", {"previous": served, "version": target, "reason": "offline"})
    write_served(state_file, ServedState(target, rolled_back=True))
    print(
        f"The app is not running: it will serve {target} (instead of {served}) and train from it "
        "at the next start."
    )
    return 0


def cmd_export(args: argparse.Namespace, loaded: LoadedSettings, paths: AppPaths) -> int:
    from pathlib import Path

    from clawrl_app.engine.store import Store
    from clawrl_app.export import export_merged
    from clawrl_app.models import resolve_model

    base = resolve_model(loaded.settings.model.path, paths).path
    print(f"merging {args.version} into {base.name} ...", file=sys.stderr)
    with Store(paths.store_file) as store:
        try:
            out = export_merged(store, args.version, base, Path(args.merged))
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    print(f"wrote {out}")
    return 0


def cmd_api_key(args: argparse.Namespace, loaded: LoadedSettings, paths: AppPaths) -> int:
    from clawrl_app.api_key import get_api_key

    key = get_api_key(paths)
    assert key is not None
    print(key.value)
    print(f"# stored in {key.stored_in}", file=sys.stderr)
    return 0


COMMANDS = {
    "env": cmd_env,
    "compare": cmd_compare,
    "launch": cmd_launch,
    "serve": cmd_serve,
    "tui": cmd_tui,
    "doctor": cmd_doctor,
    "config": cmd_config,
    "openclaw-config": cmd_openclaw_config,
    "sessions": cmd_sessions,
    "judge-eval": cmd_judge_eval,
    "rollback": cmd_rollback,
    "export": cmd_export,
    "api-key": cmd_api_key,
    "data": cmd_data,
}

if __name__ == "__main__":
    sys.exit(main())
