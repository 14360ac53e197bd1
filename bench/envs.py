"""Agentic-environment benchmark on the embedded model (CPU): does env training move it?

For each env (`--envs terminal,toolcall`), on a fresh engine home with training on
(method `rl`, batch `--batch-size`, no review grace, the heuristic step judge):

1. Held-out success rate before training: one greedy episode per held-out task, through
   the app's own endpoint (recorded, never trained on).
2. `--steps` env-training steps: rollout groups of `--group-size` episodes on train tasks
   at temperature 1 until the trainer has made that many new checkpoints; episodes per
   minute, and the share of episodes dropped as infrastructure failures (goal 0).
3. Held-out success again with the same seeds, once the newest checkpoint is served.
4. Sandbox launch overhead per command (bubblewrap vs a plain subprocess; goal <= 30 ms),
   the oracle's success on every shipped task (the packs themselves are sound), and for
   the browser env the episode start-up time (`reset`: cold = a new env, as each rollout
   episode is, which launches Chromium; warm = a fresh context in a running browser;
   goal <= 3 s).

`--learn` runs the learning benchmark instead (`bench/envs_learn.py`: held-out success
before and after each training round, the general score before and after, wall time).

Prints one markdown table. Run: `CLAWRL_HOME=/tmp/clawrl-test-cache .venv/bin/python
bench/envs.py [--envs toolcall,terminal,swe,browser] [--steps 4] [--heldout-limit 0]`
(`CLAWRL_HOME` only locates the converted embedded model; each env gets a fresh home.)
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from envs_learn import add_learn_flags, learn_main  # noqa: E402

from clawrl_app.config import load_settings  # noqa: E402
from clawrl_app.engine.engine_thread import EngineThread  # noqa: E402
from clawrl_app.envs import make_env  # noqa: E402
from clawrl_app.envs.endpoint_policy import EndpointPolicy  # noqa: E402
from clawrl_app.envs.engine_client import EngineClient  # noqa: E402
from clawrl_app.envs.training import RolloutSettings, evaluate_env, train_env  # noqa: E402
from clawrl_app.models import resolve_model  # noqa: E402
from clawrl_app.paths import app_paths  # noqa: E402


def progress(msg: str) -> None:
    print(f"[envs] {msg}", file=sys.stderr, flush=True)


def oracle_rate(env_name: str) -> tuple[int, int]:
    from clawrl_app.envs.policies import oracle_policy
    from clawrl_app.envs.runner import run_episode

    env = make_env(env_name)
    ok = 0
    tasks = env.tasks()
    try:
        for task in tasks:
            ep = run_episode(make_env(env_name), task, oracle_policy(env, task))
            ok += bool(ep.verdict and ep.verdict.success)
    finally:
        env.close()  # the browser env replays its oracle in a browser of its own
    return ok, len(tasks)


def browser_startup(cold_runs: int = 3, warm_runs: int = 10) -> tuple[float, float]:
    """Median episode start-up of the browser env, in seconds: (cold, warm)."""
    import statistics

    task = make_env("browser").tasks()[0]
    cold = []
    for _ in range(cold_runs):
        env = make_env("browser")
        t0 = time.monotonic()
        first = env.reset(task)
        cold.append(time.monotonic() - t0)
        env.close()
        if first.infra_error:
            raise RuntimeError(first.infra_error)
    env = make_env("browser", keep_browser=True)
    try:
        env.reset(task)  # launches the browser
        for _ in range(warm_runs):
            env.reset(task)
        warm = env.reset_seconds[1:]  # type: ignore[attr-defined]
    finally:
        env.shutdown()  # type: ignore[attr-defined]
    return statistics.median(cold), statistics.median(warm)


def wait_served(client: EngineClient, timeout_s: float = 300) -> str:
    """Wait until the newest checkpoint is served (or refused); returns the served version."""
    deadline = time.monotonic() + timeout_s
    while True:
        cps = client.checkpoints()
        rows = cps.get("data", [])
        newest = rows[0] if rows else None
        if newest is None or newest["status"] in ("published", "refused", "pruned"):
            return str(cps.get("served"))
        if time.monotonic() > deadline:
            return str(cps.get("served"))
        time.sleep(1.0)


def bench_env(name: str, args: argparse.Namespace, model_dir: Path) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix=f"clawrl-envs-{name}-"))
    env = {
        "CLAWRL_MODEL__PATH": str(model_dir),
        "CLAWRL_SERVER__PORT": "0",
        "CLAWRL_TRAIN__ENABLED": "true",
        "CLAWRL_TRAIN__METHOD": "rl",
        "CLAWRL_TRAIN__BATCH_SIZE": str(args.batch_size),
        "CLAWRL_REVIEW__GRACE_S": "0",
        "CLAWRL_JUDGE__BACKEND": "heuristic",
    }
    if args.lr:
        env["CLAWRL_TRAIN__LR"] = str(args.lr)
    settings = load_settings(env=env).settings
    thread = EngineThread(settings, app_paths(home)).start()
    client = EngineClient(thread.base, thread.engine.api_key, timeout_s=120)
    cfg = RolloutSettings(
        group_size=args.group_size, tasks_per_round=args.tasks_per_round,
        max_tokens=args.max_tokens, seed=args.seed, max_steps=args.max_steps,
    )  # fmt: skip

    def policy_for(temp: float) -> Any:
        return lambda seed: EndpointPolicy(
            base_url=thread.url, env_name=name, model=settings.server.model_alias,
            api_key=thread.engine.api_key, temperature=temp, max_tokens=args.max_tokens,
            seed=seed if temp == 0 else None,  # a group's episodes must differ
        )  # fmt: skip

    out: dict[str, Any] = {"env": name}
    try:
        before, rep0 = evaluate_env(
            name, client, policy_for(0.0), cfg, split="heldout", limit=args.heldout_limit
        )
        progress(f"{name}: held-out before {rep0.successes}/{rep0.episodes}")
        t0 = time.monotonic()

        def on_round(r: int, rep: Any, made: int) -> None:
            progress(
                f"{name}: round {r + 1}: {rep.episodes} episodes, {rep.successes} solved, "
                f"{rep.trainable} samples ({rep.signal} with a non-zero advantage), "
                f"{rep.boxed} boxed answers, {made} checkpoints"
            )

        total = train_env(
            name, client, policy_for(cfg.temperature), args.steps, cfg, on_round=on_round,
            max_rounds=args.max_rounds, wait_s=1e9,
        )  # fmt: skip
        train_s = time.monotonic() - t0
        served = wait_served(client)
        after, rep1 = evaluate_env(
            name, client, policy_for(0.0), cfg, split="heldout", limit=args.heldout_limit
        )
        progress(f"{name}: held-out after ({served}) {rep1.successes}/{rep1.episodes}")
        out.update(
            before=f"{rep0.successes}/{rep0.episodes} ({before:.0%})",
            after=f"{rep1.successes}/{rep1.episodes} ({after:.0%}, {served})",
            train=f"{total.checkpoints} checkpoints, {total.episodes} episodes, "
            f"{total.successes} solved, {total.boxed} boxed",
            per_min=f"{total.episodes / (train_s / 60):.1f}",
            dropped=f"{total.aborted}/{total.episodes}",
            samples=f"{total.trainable} ({total.signal} non-zero)",
        )
    finally:
        client.close()
        thread.stop()
        shutil.rmtree(home, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--envs", default="toolcall,terminal,swe,browser")
    ap.add_argument("--steps", type=int, default=4, help="env-training checkpoints per env")
    ap.add_argument("--max-rounds", type=int, default=20, help="give up after this many rounds")
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--tasks-per-round", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--lr", type=float, default=None)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--heldout-limit", type=int, default=0, help="0 = every held-out task")
    ap.add_argument(
        "--max-steps", type=int, default=None, help="turns per episode (default: task's)"
    )
    ap.add_argument("--seed", type=int, default=0)
    add_learn_flags(ap)
    args = ap.parse_args(argv)
    model = resolve_model(None, app_paths())
    if args.learn:
        return learn_main(args, model.path)
    rows = []
    from clawrl_app.envs.sandbox.probe import launch_overhead_ms

    overhead = launch_overhead_ms(20)
    startup = None
    for name in [n.strip() for n in args.envs.split(",") if n.strip()]:
        ok, n = oracle_rate(name)
        progress(f"{name}: oracle {ok}/{n}")
        if name == "browser":
            startup = browser_startup()
            progress(f"browser episode start-up: cold {startup[0]:.2f} s, warm {startup[1]:.2f} s")
        row = bench_env(name, args, model.path)
        row["oracle"] = f"{ok}/{n}"
        rows.append(row)
    print(f"sandbox launch overhead per command (bubblewrap - plain): {overhead:.1f} ms")
    if startup is not None:
        print(
            f"browser episode start-up (median): cold {startup[0]:.2f} s (new env: Chromium "
            f"launch), warm {startup[1]:.2f} s (fresh context in a running browser)"
        )
    print()
    print("| env | oracle solves | held-out before | env training | held-out after | "
          "episodes/min | dropped (infra) | samples (non-zero advantage) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['env']} | {r['oracle']} | {r.get('before', '-')} | {r.get('train', '-')} | "
            f"{r.get('after', '-')} | {r.get('per_min', '-')} | {r.get('dropped', '-')} | "
            f"{r.get('samples', '-')} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
