"""The README's Environments screenshot, from a real engine on the embedded model (CPU).

Starts an engine with training on, starts an env-training job on `--env` from the
Environments screen's own client call (`start_env_job`, what the `t` key sends), waits
for it to end, and saves `docs/screenshots/environments.svg`. Prints the job's figures.

Run: `CLAWRL_HOME=<home with the converted model> .venv/bin/python bench/screenshot_envs.py`
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from clawrl_app.config import load_settings  # noqa: E402
from clawrl_app.engine.engine_thread import EngineThread  # noqa: E402
from clawrl_app.models import resolve_model  # noqa: E402
from clawrl_app.paths import app_paths  # noqa: E402
from clawrl_app.tui.app import ClawrlApp  # noqa: E402
from clawrl_app.tui.client import LocalClient  # noqa: E402


async def shoot(client: LocalClient, args: argparse.Namespace) -> dict:
    client.start_env_job(
        {"kind": "train", "env": args.env, "steps": args.steps, "group_size": args.group_size,
         "tasks_per_round": 1, "max_rounds": args.rounds, "max_tokens": args.max_tokens}
    )  # fmt: skip
    app = ClawrlApp(client, capture_logs=False)
    async with app.run_test(size=(140, 42)) as pilot:
        await pilot.press("6")
        deadline = time.monotonic() + args.timeout
        while time.monotonic() < deadline:
            job = client.env_job() or {}
            print(f"[shot] {job.get('state')} episodes {job.get('episodes')}", file=sys.stderr)
            if job.get("state") in ("finished", "failed", "stopped"):
                break
            await pilot.pause(5.0)
        else:
            client.stop_env_job()
        await pilot.pause(4.0)  # the screen reloads every 2 s
        out = ROOT / "docs" / "screenshots"
        out.mkdir(parents=True, exist_ok=True)
        app.save_screenshot("environments.svg", str(out))
    return client.env_job() or {}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--env", default="toolcall")
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--timeout", type=float, default=1200)
    args = ap.parse_args()
    model = resolve_model(None, app_paths())
    env = {
        "CLAWRL_MODEL__PATH": str(model.path),
        "CLAWRL_SERVER__PORT": "0",
        "CLAWRL_TRAIN__BATCH_SIZE": "4",
        "CLAWRL_REVIEW__GRACE_S": "0",
    }
    home = tempfile.mkdtemp(prefix="clawrl-shot-envs-")
    thread = EngineThread(load_settings(env=env).settings, app_paths(home)).start()
    try:
        job = asyncio.run(shoot(LocalClient(thread), args))
    finally:
        thread.stop()
    print(f"job: {job.get('state')}, {job.get('episodes')} episodes, {job.get('successes')} "
          f"solved, {job.get('checkpoints')} checkpoints, rounds {job.get('rounds')}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
