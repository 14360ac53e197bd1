"""Reliability bench: a crash at any moment loses no recorded turn and no checkpoint, and
bad input never gets a 5xx. Three parts (`--parts kill,fuzz,load`):

kill  The real app (`clawrl-app serve`, embedded model, trainer on with batch 2 and no
      review grace) while clients chat through the `openai` SDK (multi-turn sessions, the
      next user message as feedback, explicit ratings). `--cycles` times, at a random
      moment, SIGKILL its process group (every other cycle also every descendant, the
      trainer included; now and then once more during the next start-up), start it again
      and continue. Then: every answer received in full is in the store, every
      acknowledged rating too, no sample is in two checkpoints (store rows, manifests and
      trained_in agree), no half-written or unregistered checkpoint folder is left, every
      version served (after a restart, in an answer's `model`) was published or is base,
      every restart reached /readyz 200, nothing outlived the app for long.
fuzz  `--fuzz-requests` Hypothesis cases (valid-ish and broken JSON bodies for
      /v1/chat/completions, /v1/feedback, /admin/*; every other route; random paths,
      methods and headers) against an in-process engine: answers by status, no 5xx but
      overload/timeouts, no traceback in the log, and a normal request still answered.
load  `--load-clients` streaming clients for `--load-s` seconds with the trainer stepping:
      errors by kind, app RSS growth, time to first token, tokens/s, steps/checkpoints.

Progress goes to stderr, one table to stdout; the exit code is 1 when a check fails.
Everything started here is stopped on exit, on errors and on SIGTERM/SIGINT.

Run: `CLAWRL_HOME=/tmp/clawrl-dev .venv/bin/python bench/chaos.py [--parts kill,fuzz,load]
      [--cycles 20] [--fuzz-requests 10000] [--load-s 300]`
(`CLAWRL_HOME` only locates the converted embedded model; each part gets a fresh home.)
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from chaos_fuzz import run_fuzz  # noqa: E402
from chaos_kill import run_kill  # noqa: E402
from chaos_load import run_load  # noqa: E402
from chaos_table import Row, render  # noqa: E402

from clawrl_app.models import resolve_model  # noqa: E402
from clawrl_app.paths import app_paths  # noqa: E402

PARTS = ("kill", "fuzz", "load")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--parts", default=",".join(PARTS), help="comma-separated: kill,fuzz,load")
    ap.add_argument("--seed", type=int, default=0, help="seed of every random choice")
    ap.add_argument(
        "--keep", action="store_true", help="keep each part's home (else kept on failure only)"
    )
    ap.add_argument(
        "--ready-timeout-s", type=float, default=300, help="longest wait for /readyz 200"
    )
    k = ap.add_argument_group("kill")
    k.add_argument("--cycles", type=int, default=20, help="kill -9 / restart cycles")
    k.add_argument("--kill-min-s", type=float, default=10, help="shortest run before a kill")
    k.add_argument("--kill-max-s", type=float, default=60, help="longest run before a kill")
    k.add_argument(
        "--kill-mode",
        choices=["mixed", "group", "tree"],
        default="mixed",
        help="group: the app's process group; tree: every descendant too; mixed: alternate",
    )
    k.add_argument("--kill-clients", type=int, default=2, help="concurrent chat clients")
    f = ap.add_argument_group("fuzz")
    f.add_argument("--fuzz-requests", type=int, default=10_000, help="generated requests")
    ld = ap.add_argument_group("load")
    ld.add_argument("--load-s", type=float, default=300, help="seconds of load")
    ld.add_argument("--load-clients", type=int, default=16, help="concurrent streaming clients")
    ld.add_argument("--load-tokens", type=int, default=32, help="max_tokens per answer")
    args = ap.parse_args(argv)
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    if not parts or set(parts) - set(PARTS):
        ap.error(f"--parts takes a comma-separated list of {', '.join(PARTS)}")
    args.parts = parts
    return args


def run_part(part: str, args: argparse.Namespace, model_dir: Path, home: Path) -> list[Row]:
    if part == "kill":
        return run_kill(
            model_dir, home, cycles=args.cycles, min_s=args.kill_min_s, max_s=args.kill_max_s,
            mode=args.kill_mode, clients=args.kill_clients, seed=args.seed,
            ready_timeout_s=args.ready_timeout_s,
        )  # fmt: skip
    if part == "fuzz":
        return run_fuzz(model_dir, home, requests=args.fuzz_requests, seed=args.seed)
    return run_load(
        model_dir, home, seconds=args.load_s, clients=args.load_clients,
        tokens=args.load_tokens, seed=args.seed, ready_timeout_s=args.ready_timeout_s,
    )  # fmt: skip


def _stop_on_sigterm(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # unwinds through every `finally`: apps, engines, clients stop


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    model = resolve_model(None, app_paths())  # the user's cache: converted once
    rows: list[Row] = []
    for part in args.parts:
        home = Path(tempfile.mkdtemp(prefix=f"clawrl-chaos-{part}-"))
        t0 = time.monotonic()
        try:
            got = run_part(part, args, model.path, home)
        except KeyboardInterrupt:
            print(f"[{part}] interrupted; home kept at {home}", file=sys.stderr)
            raise
        except Exception as exc:  # a part that breaks is a finding; the others still run
            traceback.print_exc()
            got = [
                Row(part, "the part ran to its end", f"{type(exc).__name__}: {exc}", "yes", False)
            ]
        failed = any(r.ok is False for r in got)
        print(
            f"[{part}] done in {time.monotonic() - t0:.0f} s"
            + (f"; home kept at {home}" if failed or args.keep else ""),
            file=sys.stderr,
        )
        if not (failed or args.keep):
            shutil.rmtree(home, ignore_errors=True)
        rows += got
    print(render(rows), flush=True)
    return 1 if any(r.ok is False for r in rows) else 0  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
