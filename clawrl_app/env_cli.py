"""`clawrl-app env ...`: list the agentic environments, run one episode, train on rollouts,
evaluate on held-out tasks. Rollouts by the model go through the app's own endpoint: a
running `clawrl-app serve` when there is one, else an engine started in this process."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from clawrl_app.config import EnvsSettings, LoadedSettings, load_settings
from clawrl_app.paths import AppPaths


def add_env_parser(sub: Any) -> None:
    p = sub.add_parser(
        "env",
        help="agentic environments: list, run an episode, train on rollouts, evaluate",
        description="Agentic environments (terminal, tool calls, code repair, browser): the app "
        "learns from rollouts "
        "the way it learns from conversations.",
    )
    esub = p.add_subparsers(dest="env_command", metavar="SUBCOMMAND", required=True)
    esub.add_parser("list", help="envs, task families and counts, and the sandbox status")
    r = esub.add_parser("run", help="run one episode and print it turn by turn")
    r.add_argument("name", help="env name (see `clawrl-app env list`)")
    r.add_argument("--task", help="task id (default: the first task of the env)")
    r.add_argument(
        "--policy", choices=["oracle", "model"], default="model",
        help="oracle: the task's shipped solution; model: the served model (default)",
    )  # fmt: skip
    r.add_argument("--json", action="store_true", help="print the episode as JSON")
    _rollout_flags(r)
    t = esub.add_parser("train", help="roll out train tasks until the trainer made N checkpoints")
    t.add_argument("name", help="env name")
    t.add_argument("--steps", type=int, required=True, help="new checkpoints to train")
    t.add_argument(
        "--group-size", type=int, help="episodes per task (default: [envs] group_size, 8)"
    )
    t.add_argument(
        "--tasks-per-round", type=int, help="tasks per round (default: [envs] tasks_per_round, 6)"
    )
    t.add_argument(
        "--reward-mode", choices=["step", "sequence"], default="step",
        help="step: per-turn outcome + judge score; sequence: one value per episode",
    )  # fmt: skip
    t.add_argument(
        "--judge", choices=["heuristic", "none"],
        help="per-turn scores besides the outcome (default: [envs] step_judge, none)",
    )  # fmt: skip
    t.add_argument(
        "--validation", type=int, metavar="N",
        help="train tasks per family set aside to keep the best version, 0: serve the last "
        "(default: [envs] validation_per_family, 3)",
    )  # fmt: skip
    _rollout_flags(t)
    i = esub.add_parser("import", help="copy a task pack (folder or .tar.gz) into your packs")
    i.add_argument("source", help="pack folder or .tar.gz (see docs/task-packs.md)")
    tr = esub.add_parser("trust", help="trust a task pack after reading it (its code runs here)")
    tr.add_argument("pack", help="pack name (from `env import`) or folder")
    e = esub.add_parser("eval", help="success rate on tasks (held-out by default), greedy")
    e.add_argument("name", help="env name")
    e.add_argument("--split", choices=["heldout", "train"], default="heldout")
    e.add_argument("--limit", type=int, default=0, help="only the first N tasks (0 = all)")
    _rollout_flags(e)


def _rollout_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--pack", help="one of your task packs (`env import`) instead of the shipped one"
    )
    p.add_argument(
        "--family", action="append", default=[],
        help="only tasks of this family (repeat for several; `env list` names them)",
    )  # fmt: skip
    p.add_argument(
        "--tool-choice", choices=["required", "auto", "none"],
        help="what each turn asks for (default: [envs] tool_choice, `required`: a tool "
        "call decoded under a grammar)",
    )  # fmt: skip
    p.add_argument(
        "-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
        help="also print the engine's log lines (default: only to the log file)",
    )  # fmt: skip
    p.add_argument("--seed", type=int, default=0, help="seed of task choice and sampling")
    p.add_argument("--max-tokens", type=int, default=256, help="per model turn (default 256)")
    p.add_argument(
        "--allow-unsafe", action="store_true",
        help="run shell envs without an isolating sandbox (NOT recommended: the model's "
        "commands then run as you, with your files and network)",
    )  # fmt: skip


def cmd_env(args: argparse.Namespace, loaded: LoadedSettings, paths: AppPaths) -> int:
    from clawrl_app.envs.engine_client import EngineClientError

    try:
        handlers = {"list": _list, "run": _run, "train": _train, "eval": _eval,
                    "import": _import, "trust": _trust}  # fmt: skip
        with log_to_file(paths, getattr(args, "verbose", False)):
            return handlers[args.env_command](args, loaded, paths)
    except (ValueError, EngineClientError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


@contextlib.contextmanager
def log_to_file(paths: AppPaths, verbose: bool) -> Iterator[None]:
    """The engine's per-request INFO lines and the HTTP client's go to `env.log` in the log
    folder, not the terminal (where progress is printed); `-v` keeps them on the terminal."""
    import logging

    if verbose:
        yield
        return
    root = logging.getLogger()
    saved, level = root.handlers[:], root.level
    paths.log_dir.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(paths.log_dir / "env.log", encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.handlers = [handler]
    root.setLevel(logging.INFO)
    try:
        yield
    finally:
        root.handlers, root.level = saved, level
        handler.close()


def _env_settings(args: argparse.Namespace, paths: AppPaths | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"allow_unsafe": True} if getattr(args, "allow_unsafe", False) else {}
    if getattr(args, "pack", None) and paths is not None:
        from clawrl_app.envs.packs import PackError, usable_pack, user_packs

        found = [p for p in user_packs(paths.data_dir) if p.name == args.pack]
        if not found:
            raise PackError(f"no pack {args.pack!r}; see `clawrl-app env import --help`")
        pack = usable_pack(found[0], paths.data_dir)
        if pack.env != args.name:
            raise PackError(f"pack {pack.name!r} is for the {pack.env} env, not {args.name}")
        out["data_dir"] = pack.path
    return out


def _import(args: argparse.Namespace, loaded: LoadedSettings, paths: AppPaths) -> int:
    from pathlib import Path

    from clawrl_app.envs.packs import import_pack

    pack = import_pack(Path(args.source), paths.data_dir)
    print(f"imported pack {pack.name!r} ({pack.env}) to {pack.path}.")
    print(f"Read its tests and solutions, then trust it: clawrl-app env trust {pack.name}")
    return 0


def _trust(args: argparse.Namespace, loaded: LoadedSettings, paths: AppPaths) -> int:
    from pathlib import Path

    from clawrl_app.envs.packs import read_pack, trust_pack, user_packs

    named = [p for p in user_packs(paths.data_dir) if p.name == args.pack]
    pack = named[0] if named else read_pack(Path(args.pack))
    trust_pack(pack, paths.data_dir)
    print(f"trusted pack {pack.name!r} at {pack.path} (a later change untrusts it)")
    return 0


def _list(args: argparse.Namespace, loaded: LoadedSettings, paths: AppPaths) -> int:
    from collections import Counter

    from clawrl_app.envs import env_names, make_env

    try:
        from clawrl_app.envs.sandbox.probe import probe

        status = probe()
        sandbox = f"{status.name}: {'ok' if status.ok else 'unavailable'} ({status.detail})"
    except Exception as exc:  # the listing still helps without a sandbox
        sandbox = f"unavailable ({exc})"
    print(f"sandbox: {sandbox}")
    from clawrl_app.engine.environments.jobs import browser_status

    browser = browser_status()
    print(f"browser: {'ok' if browser['ok'] else 'unavailable'} ({browser['detail']})")
    print(f"{'env':<10} {'tasks':>5} {'train':>5} {'heldout':>7}  families")
    for name in env_names():
        try:
            tasks = make_env(name, allow_unsafe=True).tasks()
        except Exception as exc:
            print(f"{name:<10} unavailable: {exc}")
            continue
        fam = Counter(t.family for t in tasks)
        split = Counter(t.split for t in tasks)
        families = ", ".join(f"{f} {n}" for f, n in sorted(fam.items()))
        print(f"{name:<10} {len(tasks):>5} {split['train']:>5} {split['heldout']:>7}  {families}")
    return 0


@dataclass
class _Endpoint:
    base: str  # http://host:port
    api_key: str | None
    alias: str


@contextlib.contextmanager
def _engine(loaded: LoadedSettings, paths: AppPaths) -> Iterator[_Endpoint]:
    """The running engine on the configured port, else one started in this process (on a
    free port, with the user's settings and store) for the length of the command."""
    from clawrl_app.api_key import get_api_key, is_loopback
    from clawrl_app.envs.engine_client import EngineClient

    s = loaded.settings.server
    host = "127.0.0.1" if s.host in ("0.0.0.0", "::") else s.host
    stored = get_api_key(paths) if (s.require_api_key or not is_loopback(s.host)) else None
    key = stored.value if stored is not None else None
    base = f"http://{host}:{s.port}"
    probe = EngineClient(base, key, timeout_s=5)
    try:
        running = probe.ready()
    finally:
        probe.close()
    if running:
        print(f"using the engine at {base}", file=sys.stderr)
        yield _Endpoint(base, key, s.model_alias)
        return
    from clawrl_app.engine.engine_thread import EngineThread

    print("no engine running: starting one in this process ...", file=sys.stderr)
    settings = load_settings(paths.config_file, cli={"server.port": 0}).settings
    thread = EngineThread(settings, paths).start()
    try:
        yield _Endpoint(thread.base, thread.engine.api_key, settings.server.model_alias)
    finally:
        print("stopping the engine ...", file=sys.stderr)
        thread.stop()


def _policy_factory(
    ep: _Endpoint, env_name: str, args: argparse.Namespace, temp: float, loaded: LoadedSettings
) -> Any:
    from clawrl_app.envs.endpoint_policy import EndpointPolicy

    choice = getattr(args, "tool_choice", None) or loaded.settings.envs.tool_choice_for(env_name)

    def make(seed: int) -> EndpointPolicy:
        return EndpointPolicy(
            base_url=f"{ep.base}/v1", env_name=env_name, model=ep.alias, api_key=ep.api_key,
            temperature=temp, max_tokens=args.max_tokens,
            seed=seed if temp == 0 else None,  # a group's episodes must differ
            tool_choice=choice,
        )  # fmt: skip

    return make


def _print_turn(turn: Any) -> None:
    print(f"--- turn {turn.index + 1}")
    print(f"model: {turn.response_text.strip()[:2000]}")
    for a in turn.actions:
        print(f"action: {a.tool or 'text'} {json.dumps(a.arguments)[:500]}")
    for o in turn.observations:
        print(f"observation: {o.text.strip()[:1500]}")
    if turn.parse_error:
        print(f"parse error: {turn.parse_error}")
    if turn.judge_score is not None:
        print(f"step score: {turn.judge_score:+g}")


def _run(args: argparse.Namespace, loaded: LoadedSettings, paths: AppPaths) -> int:
    from clawrl_app.envs import make_env
    from clawrl_app.envs.policies import oracle_policy
    from clawrl_app.envs.runner import run_episode

    env = make_env(args.name, **_env_settings(args, paths))
    tasks = env.tasks()
    task = next((t for t in tasks if t.id == args.task), None) if args.task else tasks[0]
    if task is None:
        raise ValueError(f"no task {args.task!r} in {args.name}; see `clawrl-app env list`")
    on_turn = None if args.json else _print_turn
    if not args.json:
        print(f"task {task.id} ({task.family}, {task.split}): {task.instruction}")
    if args.policy == "oracle":
        episode = run_episode(env, task, oracle_policy(env, task), on_turn=on_turn, seed=args.seed)
    else:
        with _engine(loaded, paths) as ep:
            policy = _policy_factory(ep, args.name, args, 1.0, loaded)(args.seed)
            sid = f"env-{args.name}-{uuid.uuid4().hex[:12]}"
            episode = run_episode(
                env, task, policy, session_id=sid, on_turn=on_turn, seed=args.seed
            )
            from clawrl_app.envs.engine_client import EngineClient
            from clawrl_app.envs.recording import group_payload

            client = EngineClient(ep.base, ep.api_key)
            try:  # recorded (closing its session), never trained: it was not a group
                client.record_group(
                    group_payload(task, f"run-{sid}", [episode], [None], train=False)
                )
            finally:
                client.close()
    if args.json:
        print(json.dumps(episode.to_dict(), indent=2, default=str))
        return 0
    v = episode.verdict
    print(
        f"=== {episode.status.value} ({episode.reason}); verifier score "
        f"{v.score if v else '-'}; reward {episode.outcome_reward}; {episode.duration_s:.1f} s"
    )
    return 0


def train_settings(
    args: argparse.Namespace, envs: EnvsSettings, env_settings: dict[str, Any]
) -> Any:
    """`env train`'s rollout settings: the flags given, else `[envs]`."""
    from clawrl_app.envs.training import RolloutSettings

    return RolloutSettings(
        group_size=args.group_size or envs.group_size,
        tasks_per_round=args.tasks_per_round or envs.tasks_per_round,
        max_tokens=args.max_tokens, judge=args.judge or envs.step_judge,
        reward_mode=args.reward_mode, seed=args.seed, env_settings=env_settings,
        families=tuple(args.family),
        validation_per_family=envs.validation_per_family
        if args.validation is None else args.validation,
    )  # fmt: skip


def _train(args: argparse.Namespace, loaded: LoadedSettings, paths: AppPaths) -> int:
    from clawrl_app.envs.engine_client import EngineClient
    from clawrl_app.envs.training import NO_SIGNAL, train_env

    if args.steps < 1:
        raise ValueError("--steps must be 1 or more")
    cfg = train_settings(args, loaded.settings.envs, _env_settings(args, paths))
    print(f"env train {args.name}: until {args.steps} new checkpoints, "
          f"{cfg.tasks_per_round} tasks x {cfg.group_size} episodes a round "
          f"(log: {paths.log_dir / 'env.log'})", flush=True)  # fmt: skip
    with _engine(loaded, paths) as ep:
        client = EngineClient(ep.base, ep.api_key)
        try:
            total = train_env(
                args.name, client, _policy_factory(ep, args.name, args, cfg.temperature, loaded),
                args.steps, cfg, on_round=lambda r, rep, made: print(round_line(r, rep, made),
                                                                     flush=True),
                greedy_for=_policy_factory(ep, args.name, args, 0.0, loaded),
            )  # fmt: skip
        finally:
            client.close()
    print(
        f"{total.checkpoints} new checkpoints from {total.episodes} episodes "
        f"({total.successes} solved, {total.aborted} not trainable), {total.signal} of "
        f"{total.trainable} samples with a signal, {total.varied}/{total.groups} groups varied"
    )
    if total.kept:
        print(f"serving {total.kept}: it solved the most validation tasks (the trainer goes on "
              "from it)")  # fmt: skip
    if total.groups and not total.varied:
        print(NO_SIGNAL)
    return 0


def round_line(r: int, rep: Any, made: int) -> str:
    """One training round as one line (`env train`)."""
    from clawrl_app.envs.training import NO_SIGNAL

    share = rep.varied_share
    line = (
        f"round {r + 1}: {rep.successes}/{rep.episodes} solved, groups with variance "
        f"{rep.varied}/{rep.groups} ({rep.outcome_varied} in outcome), "
        f"{rep.signal} samples with a signal, "
        f"checkpoints {made}, {rep.seconds:.0f} s"
    )
    if rep.validated:
        line += f", validation {rep.validated[0]} {rep.validated[1]:.2f}"
    return line + (f"  ({NO_SIGNAL})" if share == 0 else "")


def _eval(args: argparse.Namespace, loaded: LoadedSettings, paths: AppPaths) -> int:
    from tqdm import tqdm

    from clawrl_app.envs import make_env
    from clawrl_app.envs.engine_client import EngineClient
    from clawrl_app.envs.training import RolloutHooks, RolloutSettings, evaluate_env, split_tasks

    cfg = RolloutSettings(
        max_tokens=args.max_tokens, seed=args.seed, temperature=0.0,
        env_settings=_env_settings(args, paths), families=tuple(args.family),
    )  # fmt: skip
    tasks = split_tasks(make_env(args.name, **cfg.env_settings).tasks(), args.split, cfg.families)
    n = min(len(tasks), args.limit) if args.limit else len(tasks)
    with _engine(loaded, paths) as ep:
        client = EngineClient(ep.base, ep.api_key)
        bar = tqdm(total=n, unit="episode", desc=f"env eval {args.name} {args.split}")
        solved = {"n": 0}

        def on_episode(task: Any, episode: Any) -> None:
            v = episode.verdict
            solved["n"] += bool(episode.trainable and v and v.success)
            bar.update(1)
            bar.set_postfix(solved=solved["n"])

        try:
            rate, rep = evaluate_env(
                args.name, client, _policy_factory(ep, args.name, args, 0.0, loaded), cfg,
                split=args.split, limit=args.limit, hooks=RolloutHooks(on_episode=on_episode),
            )  # fmt: skip
        finally:
            bar.close()
            client.close()
    print(
        f"{args.name} {args.split}: {rep.successes}/{rep.episodes} solved ({rate:.0%}), "
        f"{rep.aborted} not scorable, {rep.seconds:.0f} s"
    )
    return 0
