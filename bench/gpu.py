"""GPU benchmark: serving and training a random-initialised Llama model of a chosen size.

Nothing is downloaded. A Llama-architecture model of `--size` parameters (random weights,
the embedded SmolLM2 tokenizer and chat template) is saved into a work dir (bf16 on CUDA,
float32 on the CPU) and served by the real CLI, `clawrl-app serve`, with training on (LoRA
by default). The official `openai` client drives feedback sessions (the next user message
judges an answer; `POST /v1/feedback` rates the last one) so that the judge and the trainer
produce checkpoints and the publisher serves them. One table on stdout:

- first, with nothing else on the card: the backend's decode vs a bare transformers greedy
  loop in one process (bench/gpu_decode.py), base and a LoRA version, 1 and `--streams`
  streams (`--no-side-by-side` skips it);
- ms/token of the base model vs the newest LoRA version (pinned by model name), with 1 and
  `--streams` concurrent greedy streams, through the endpoint;
- chat latency (16-token greedy side turns) with the trainer idle vs during a training step
  (StepStarted -> StepFinished events of the engine);
- the app's trainer step (`time/step_s`) and `compare_step` of bench/train_step.py (our
  step vs a bare PEFT loop; "pending" while that module is missing);
- checkpoint registered -> published -> first answer whose `model` field names it;
- memory per process (GPU memory from nvidia-smi; RSS on the CPU) vs the plan's lines;
- `--qlora`: a second server with train.mode = qlora: is its checkpoint published, or
  refused (with the canary gap)? Needs CUDA and bitsandbytes.

Progress goes to stderr. Everything started is stopped on exit, also on Ctrl-C or an error.
The GPUs used are those CUDA_VISIBLE_DEVICES shows (the plan splits several between roles).
CPU figures (`--device cpu`) are a smoke check of the benchmark itself, not GPU numbers.

Run: `.venv/bin/python bench/gpu.py [--size 1.5b] [--device auto] [--turns 24] [--streams 4]`
(`CLAWRL_HOME` locates the converted embedded model whose tokenizer is used; `--tokenizer DIR`
or `CLAWRL_TOKENIZER_DIR` names another, e.g. on a machine without the package registry.)
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import math
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpu_decode import side_by_side  # noqa: E402
from gpu_drive import (  # noqa: E402
    CheckpointWatcher,
    FirstAnswer,
    Prober,
    client,
    feedback_session,
    in_step,
    probe,
    settle,
    step_windows,
    stream_stats,
)
from gpu_serve import Server, say  # noqa: E402

from clawrl_app.config import load_settings  # noqa: E402
from clawrl_app.hardware import ModelInfo, Plan, inventory, plan  # noqa: E402
from clawrl_app.models import read_model_config, resolve_model  # noqa: E402
from clawrl_app.paths import app_paths  # noqa: E402
from tests.random_model import parse_size, save_random_llama  # noqa: E402

Row = tuple[str, str, str]  # measure, value, notes


def fmt_ms(values: list[float]) -> str:
    return f"{statistics.median(values):.0f} ms" if values else "n/a"


def server_env(args: argparse.Namespace, model_dir: Path, mode: str) -> dict[str, str]:
    return {
        "CLAWRL_MODEL__PATH": str(model_dir),
        "CLAWRL_TRAIN__MODE": mode,
        "CLAWRL_TRAIN__BATCH_SIZE": str(args.batch),
        "CLAWRL_REVIEW__GRACE_S": "0",
        # a random model cannot judge: the heuristic judge reads the user's next message
        "CLAWRL_JUDGE__BACKEND": "heuristic",
        # the regression guard answers ~45 questions with each candidate before serving it
        "CLAWRL_GUARD__ENABLED": "true" if args.guard else "false",
    }


def the_plan(server: Server, model_dir: Path) -> Plan:
    """The plan the server makes (same settings, same visible devices)."""
    settings = load_settings(env=server.env, cli={"hardware.backend": server.backend}).settings
    inv = inventory()
    if not server.use_gpu:
        inv = replace(inv, gpus=())
    info = ModelInfo.from_hf_config(model_dir.name, read_model_config(model_dir))
    return plan(inv, info, settings)


def plan_row(p: Plan) -> Row:
    serve = ",".join(f"cuda:{i}" for i in p.serve_devices) or "cpu"
    train = ",".join(f"cuda:{i}" for i in p.train_devices) or "cpu"
    return ("plan", f"{p.backend} on {serve}; trainer {p.train_mode} on {train}", "")


def memory_rows(server: Server, p: Plan, label: str) -> list[Row]:
    """Peak memory per process (sampled every second) against the plan's memory lines."""
    kind = "GPU memory (nvidia-smi)" if server.use_gpu else "RSS"
    needs = {m.role: m for m in p.memory}
    rows = []
    for role, plan_role in (("serving", "serving"), ("trainer", "training")):
        peak = server.peak_mib.get(role)
        value = "n/a" if peak is None else f"{peak / 1024:.2f} GiB"
        if server.pids_unmatched:
            value = "n/a (nvidia-smi lists no process of ours: PID namespace?)"
        line = needs.get(plan_role)
        note = f"plan: {line.need_gib:.2f} GiB on {line.device}" if line else "not in the plan"
        rows.append((f"{label}: {role} peak {kind}", value, note))
    return rows


def first_answer_rows(results: list[FirstAnswer], label: str) -> list[Row]:
    served = [r for r in results if r.outcome == "served" and r.first_answer_at is not None]
    outcomes = ", ".join(f"{r.version} {r.outcome}" for r in results) or "no checkpoint"
    if not served:
        return [(f"{label}: checkpoint registered -> first answer naming it", "n/a", outcomes)]
    first = [r.first_answer_at - r.created for r in served]  # type: ignore[operator]
    pub = [r.published_at - r.created for r in served if r.published_at is not None]
    return [
        (
            f"{label}: checkpoint registered -> published",
            fmt_s(pub),
            f"{len(pub)} checkpoint(s)",
        ),
        (
            f"{label}: checkpoint registered -> first answer naming it",
            fmt_s(first),
            outcomes,
        ),
    ]


def fmt_s(values: list[float]) -> str:
    if not values:
        return "n/a"
    return (
        f"median {statistics.median(values):.2f} s (min {min(values):.2f}, max {max(values):.2f})"
    )


def drive(server: Server, args: argparse.Namespace, sessions: int) -> tuple[Any, list[FirstAnswer]]:
    """Feedback sessions with latency probes and the checkpoint watcher running."""
    c = client(server.url, args.timeout)
    watcher = CheckpointWatcher(server, c, args.timeout)
    prober = Prober(c, args.probe_every)
    watcher.start()
    prober.start()
    try:
        for k in range(sessions):
            feedback_session(c, server, k, args.answer_tokens)
            say(f"{server.name}: session {k + 1}/{sessions} answered and rated")
        say(f"{server.name}: waiting for judging, training and publishing to finish")
        if not settle(server, args.batch, args.timeout):
            say(f"{server.name}: still busy after {args.timeout:.0f} s; measuring anyway")
    finally:
        prober.stop()
        results = watcher.finish()
    return prober, results


def lora_run(
    args: argparse.Namespace, model_dir: Path, work: Path, started: list[Server], rows: list[Row]
) -> None:
    """The LoRA server: every figure but QLoRA and compare_step (appended to `rows` as it
    goes, so an interrupted run still shows what it measured)."""
    s = Server("lora", work, server_env(args, model_dir, "lora"), args.backend, args.use_gpu)
    started.append(s)
    p = the_plan(s, model_dir)
    rows.append(plan_row(p))
    rows.append(("serve start -> /readyz", f"{s.start(args.timeout):.1f} s", ""))
    c = client(s.url, args.timeout)
    probe(c, 0)  # warm-up
    idle = [probe(c, k) for k in range(args.idle_probes)]
    say(f"lora: idle latency {fmt_ms([(q.t1 - q.t0) * 1000 for q in idle])}")
    sessions = math.ceil(args.turns / 3)
    prober, firsts = drive(s, args, sessions)
    windows = step_windows(s.events())
    stepping = [q for q in prober.probes if in_step(windows, q.t0, q.t1) >= 0.5]
    idle_ms = [(q.t1 - q.t0) * 1000 for q in idle]
    step_ms = [(q.t1 - q.t0) * 1000 for q in stepping]
    ratio = ""
    if step_ms and idle_ms:
        ratio = f" ({statistics.median(step_ms) / statistics.median(idle_ms):.2f}x)"
    rows += [
        ("chat latency, 16-token answer, trainer idle", fmt_ms(idle_ms), f"n={len(idle)}"),
        (
            "chat latency, 16-token answer, during a trainer step",
            fmt_ms(step_ms) + ratio,
            f"n={len(stepping)} of {len(prober.probes)} probes; {len(windows)} step(s)",
        ),
    ]
    step_s = s.metric("time/step_s")
    rows.append(
        ("trainer step in the app (time/step_s)", fmt_s(step_s), f"batch {args.batch}, LoRA")
    )
    rows += first_answer_rows(firsts, "LoRA")
    refusal = (s.status().get("publishing") or {}).get("last_error")
    if refusal:  # "vN refused: canary log-probs differ by X": why nothing is served
        rows.append(("LoRA: last publish refusal", str(refusal), ""))
    version = s.status()["serving"]["version"]
    names = ["clawrl-base"] + ([f"clawrl-{version}"] if version != "base" else [])
    for name in names:  # warm-up of each version's path
        stream_stats(c, name, 1, 8)
    for n in sorted({1, args.streams}):
        stats = {name: stream_stats(c, name, n, args.tokens) for name in names}
        base = stats["clawrl-base"]
        value = f"base {base.ms_per_token:.1f}"
        note = f"{base.tokens_per_s:.0f} tok/s base"
        if len(names) == 2:
            lora = stats[names[1]]
            value += f" / {version} {lora.ms_per_token:.1f} ({lora.ms_per_token / base.ms_per_token:.2f}x)"
            note += (
                f", {lora.tokens_per_s:.0f} tok/s {version}; answered by {', '.join(lora.models)}"
            )
        else:
            value += " / no LoRA version published"
        rows.append((f"ms/token, {n} stream(s), {args.tokens} tokens each", value, note))
    rows += memory_rows(s, p, "LoRA")
    s.stop()
    started.remove(s)


def qlora_run(
    args: argparse.Namespace, model_dir: Path, work: Path, started: list[Server]
) -> list[Row]:
    label = "QLoRA (4-bit base) checkpoint"
    if not args.qlora:
        return [(label, "skipped (--no-qlora)", "")]
    if not args.use_gpu:
        return [(label, "skipped: needs CUDA", "bitsandbytes 4-bit; the trainer refuses it on CPU")]
    if importlib.util.find_spec("bitsandbytes") is None:
        return [(label, "skipped: bitsandbytes is not installed", "")]
    s = Server("qlora", work, server_env(args, model_dir, "qlora"), args.backend, True)
    started.append(s)
    p = the_plan(s, model_dir)
    s.start(args.timeout)
    # two batches' worth of answers: the judge may leave some untrainable (score 0)
    _, firsts = drive(s, args, math.ceil(2 * args.batch / 3))
    rows = {r["version"]: r for r in s.checkpoints()}
    st = s.status().get("publishing") or {}
    if not rows:
        outcome, note = "no checkpoint", f"trainer: {s.status().get('training')}"
    elif any(r["status"] == "published" for r in rows.values()):
        outcome = "published " + ", ".join(v for v, r in rows.items() if r["status"] == "published")
        note = f"tolerance {'5e-2' if p.serve_devices else '1e-3'} (canary gap within it)"
    else:
        outcome = "refused " + ", ".join(v for v, r in rows.items() if r["status"] == "refused")
        note = str(st.get("last_error") or "")  # "vN refused: canary log-probs differ by X"
    out = [(label, outcome, note), *first_answer_rows(firsts, "QLoRA")]
    out += memory_rows(s, p, "QLoRA")
    s.stop()
    started.remove(s)
    return out


def step_compare_row(args: argparse.Namespace, model_dir: Path) -> Row:
    label = "trainer step: ours vs a bare PEFT loop (bench/train_step.py)"
    try:
        from train_step import compare_step  # type: ignore[import-not-found]
    except ImportError:
        return (label, "pending", "bench/train_step.py is not there yet")
    device = "cuda" if args.use_gpu else "cpu"
    say(f"compare_step on {device}")
    try:
        r = compare_step(model_dir, device, batch=args.batch)
    except Exception as exc:
        return (label, "failed", f"{type(exc).__name__}: {exc}")
    return (
        label,
        f"ours {r['ours_s']:.3f} s vs bare {r['bare_s']:.3f} s ({r['ratio']:.2f}x)",
        f"peak ours {r['ours_peak_gib']:.2f} / bare {r['bare_peak_gib']:.2f} GiB, plan {r['plan_gib']:.2f} GiB",
    )


def print_table(rows: list[Row], header: str) -> None:
    print(f"\n{header}\n")
    print("| measure | value | notes |")
    print("|---|---|---|")
    for measure, value, notes in rows:
        print(f"| {measure} | {value} | {notes} |")
    sys.stdout.flush()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--size", default="1.5b", help="parameters: e.g. 50m, 0.5b, 1.5b (default)")
    ap.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    ap.add_argument(
        "--backend",
        choices=["torch", "sglang"],
        default="torch",
        help="sglang only when it is importable (else torch)",
    )
    ap.add_argument("--turns", type=int, default=24, help="answers with feedback (3 per session)")
    ap.add_argument("--batch", type=int, default=4, help="trainer batch size (samples per step)")
    ap.add_argument("--streams", type=int, default=4, help="concurrent streams for ms/token")
    ap.add_argument("--tokens", type=int, default=128, help="tokens per ms/token stream")
    ap.add_argument("--answer-tokens", type=int, default=32, help="tokens per feedback answer")
    ap.add_argument("--idle-probes", type=int, default=5, help="latency probes before training")
    ap.add_argument(
        "--probe-every", type=float, default=0.5, help="probe spacing while training (s)"
    )
    ap.add_argument(
        "--qlora",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run a QLoRA server (CUDA + bitsandbytes)",
    )
    ap.add_argument(
        "--guard",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the regression guard checks each checkpoint before it is served (app default)",
    )
    ap.add_argument(
        "--side-by-side",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the backend's decode vs a bare transformers loop, in-process (bench/gpu_decode.py)",
    )
    ap.add_argument(
        "--decode-tokens",
        type=int,
        default=64,
        help="tokens per stream in the side-by-side rows (default 64)",
    )
    ap.add_argument(
        "--decode-repeats",
        type=int,
        default=5,
        help="interleaved repeats of each side-by-side row, the median reported (default 5: "
        "3 repeats of 32 tokens moved the base row from 0.81x to 1.85x between two H200 runs)",
    )
    ap.add_argument(
        "--tokenizer",
        type=Path,
        default=os.environ.get("CLAWRL_TOKENIZER_DIR") or None,
        help="a HF folder whose tokenizer and chat template the random model takes (default: "
        "the embedded model's, converted into CLAWRL_HOME; env CLAWRL_TOKENIZER_DIR)",
    )
    ap.add_argument("--timeout", type=float, default=600, help="longest wait for any one stage (s)")
    ap.add_argument("--keep", action="store_true", help="keep the work dir (model, homes, logs)")
    args = ap.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: torch sees no CUDA device")
    args.use_gpu = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    if args.backend == "sglang" and importlib.util.find_spec("sglang") is None:
        say("sglang is not importable here: using --backend torch")
        args.backend = "torch"
    args.params = parse_size(args.size)
    return args


def main(argv: list[str] | None = None) -> int:
    # SIGTERM -> SystemExit and SIGINT -> KeyboardInterrupt (even where a shell started us
    # with SIGINT ignored), so the `finally` below stops every server and their trainers
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    args = parse_args(argv)
    device = "cuda" if args.use_gpu else "cpu"
    work = Path(tempfile.mkdtemp(prefix="clawrl-gpu-bench-"))
    started: list[Server] = []
    rows: list[Row] = []
    rc = 0
    try:
        tokenizer_dir = args.tokenizer or resolve_model(None, app_paths()).path
        model_dir = work / f"random-llama-{args.size}"
        t0 = time.monotonic()
        shape = save_random_llama(
            model_dir, args.params, tokenizer_dir, device=device, progress=True
        )
        rows.append(
            (
                "model",
                f"random Llama {shape.params / 1e9:.3f}B ({shape.hidden} hidden, {shape.layers} "
                f"layers, {shape.heads}/{shape.kv_heads} heads)",
                f"{'bf16' if args.use_gpu else 'float32'}, built and saved in "
                f"{time.monotonic() - t0:.1f} s",
            )
        )
        if args.side_by_side:  # first: nothing else on the card yet
            rows += side_by_side(
                model_dir,
                device,
                streams=args.streams,
                tokens=args.decode_tokens,
                repeats=args.decode_repeats,
                say=say,
            )
        lora_run(args, model_dir, work, started, rows)
        rows += qlora_run(args, model_dir, work, started)
        rows.append(step_compare_row(args, model_dir))
    except (KeyboardInterrupt, SystemExit) as exc:
        name = "Ctrl-C" if isinstance(exc, KeyboardInterrupt) else f"exit {exc.code}"
        rows.append(("interrupted", name, "the figures above are partial"))
        rc = 130 if isinstance(exc, KeyboardInterrupt) else 143
    except Exception as exc:
        rows.append(
            ("error", f"{type(exc).__name__}", str(exc).splitlines()[0] if str(exc) else "")
        )
        say(f"failed: {exc}")
        rc = 1
    finally:
        for s in reversed(started):
            with contextlib.suppress(Exception):
                s.stop()
        if args.keep:
            say(f"work dir kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    gpu = torch.cuda.get_device_name(0) if args.use_gpu else "no GPU (CPU smoke check only)"
    print_table(rows, f"bench/gpu.py --size {args.size} on {device}: {gpu}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
