"""Our trainer step vs a bare PEFT loop: same model, LoRA, batch of token sequences and AdamW.

- ours: `Trainer.train_step` (the training process's step: left-padded forward that projects
  only response positions, the `combine` objective, clip, AdamW) on `batch` items of
  `prompt_len` + `response_len` random tokens, one micro-batch.
- bare: `model(input_ids, attention_mask, labels).loss` (HF's loss: logits at every
  position; prompt labels -100), `backward()`, `AdamW.step()` on the same sequences.

Both load the model the way the trainer does (bf16 on CUDA, float32 on the CPU) with LoRA
r=16, alpha 32 on every linear layer, AdamW(lr 1e-4, betas 0.9/0.98). Each side runs in its
own process (clean memory accounting); their steps alternate, so a machine whose load drifts
(2 CPU cores shared with other jobs) slows both alike. Reported: median step seconds (and the
spread), the ratio ours/bare (goal <= 1.2), and peak memory vs the plan's estimate for the
same token count (`memory_model.train_need`, no per-process overhead): on CUDA
`torch.cuda.max_memory_allocated`, on the CPU torch's own allocation events (profiler with
`profile_memory`) over one extra step, plus the bytes live at its start.

Run: `.venv/bin/python bench/train_step.py [--device cpu|cuda] [--model DIR] [--batch 4]
[--prompt-len 192] [--response-len 64] [--steps 5] [--warmup 1] [--gradient-checkpointing]
[--threads N]`; with `--ranks N`: 1 vs N trainer ranks on one global batch (`bench/train_ranks.py`)
"""

from __future__ import annotations

import argparse
import contextlib
import io
import multiprocessing as mp
import os
import random
import statistics
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from clawrl_app.memory_model import GIB, ModelInfo, train_need  # noqa: E402
from clawrl_app.models import read_model_config, resolve_model  # noqa: E402
from clawrl_app.paths import app_paths  # noqa: E402

LORA_RANK, LORA_ALPHA, LR, BETAS = 16, 32, 1e-4, (0.9, 0.98)


def token_batch(vocab: int, batch: int, prompt_len: int, response_len: int) -> list[list[int]]:
    """`batch` sequences of random token ids (seeded: both sides see the same batch)."""
    rng = random.Random(0)
    return [[rng.randrange(vocab) for _ in range(prompt_len + response_len)] for _ in range(batch)]


# --- the two sides (each in its own process) --------------------------------------------
class Ours:
    """The trainer process's step on one micro-batch."""

    def __init__(self, args: dict[str, Any], tmp: Path) -> None:
        from clawrl_app.engine.training.config import TrainerConfig
        from clawrl_app.engine.training.train_data import TrainItem
        from clawrl_app.engine.training.trainer import Trainer

        seqs, p = args["seqs"], args["prompt_len"]
        cfg = TrainerConfig(
            store_path=str(tmp / "store.sqlite3"),
            checkpoints_dir=str(tmp / "ckpt"),
            model_path=str(args["model_path"]),
            method="combine",
            batch_size=len(seqs),
            lr=LR,
            lora_rank=LORA_RANK,
            lora_alpha=LORA_ALPHA,
            token_budget=len(seqs) * len(seqs[0]),  # one micro-batch, as the bare loop
            resume_from="none",
            device=args["device"],
            gradient_checkpointing=args["gradient_checkpointing"],
        )
        self.trainer = Trainer(cfg)
        r = len(seqs[0]) - p
        self.items = [
            TrainItem(i, f"s{i}", s[:p], s[p:], [-2.0] * r, 1.0, (-1.0) ** i, True, [-1.0] * r, "")
            for i, s in enumerate(seqs)
        ]
        self.model, self.optimizer = self.trainer.model, self.trainer.optimizer

    def step(self) -> None:
        with contextlib.redirect_stdout(io.StringIO()):  # its "step_started" event line
            self.trainer.train_step(self.items)


class Bare:
    """A plain PEFT LoRA loop: HF loss, backward, AdamW."""

    def __init__(self, args: dict[str, Any], tmp: Path) -> None:
        import torch
        from peft import LoraConfig, get_peft_model

        from clawrl_app.engine.training.trainer import LORA_TARGETS
        from clawrl_app.models import ResolvedModel, load_model

        path = Path(args["model_path"])
        dev = args["device"]
        model, _ = load_model(ResolvedModel(path, "local", path.name, 0), device=dev)
        if args["gradient_checkpointing"]:  # the same HF calls as the trainer's
            from clawrl_app.engine.training.trainer import enable_checkpointing

            enable_checkpointing(model, adapter=True)
        cfg = LoraConfig(
            r=LORA_RANK, lora_alpha=LORA_ALPHA, lora_dropout=0.0, target_modules=LORA_TARGETS
        )
        self.model = get_peft_model(model, cfg)
        self.model.train()
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=LR, betas=BETAS, weight_decay=0.0)
        self.ids = torch.tensor(args["seqs"], dtype=torch.long, device=dev)
        self.attn = torch.ones_like(self.ids)
        self.labels = self.ids.clone()
        self.labels[:, : args["prompt_len"]] = -100  # train on the responses, as ours does

    def step(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        out = self.model(input_ids=self.ids, attention_mask=self.attn, labels=self.labels)
        out.loss.backward()
        self.optimizer.step()


def _live_bytes(model: Any, optimizer: Any) -> int:
    """Bytes of the tensors that outlive a step: weights, buffers, grads, optimizer state."""
    import torch

    tensors = [*model.parameters(), *model.buffers()]
    tensors += [p.grad for p in model.parameters() if p.grad is not None]
    tensors += [v for st in optimizer.state.values() for v in st.values() if torch.is_tensor(v)]
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}
    return sum(storages.values())


@contextlib.contextmanager
def _quiet_stderr() -> Any:
    """Silence the profiler's C++ start/stop lines (file descriptor 2) for a moment."""
    saved = os.dup(2)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def _cpu_step_peak(side: Any) -> int:
    """Peak bytes allocated during one step, from torch's allocation events, plus the live."""
    from torch.profiler import ProfilerActivity, profile

    # Free the last step's grads first (the step does it anyway): the profiler sees no free
    # of a block allocated before it started, so they would count twice.
    side.optimizer.zero_grad(set_to_none=True)
    live = _live_bytes(side.model, side.optimizer)
    with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        side.step()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    current = peak = 0
    for e in sorted(events, key=lambda e: e.start_ns()):
        current += e.nbytes()
        peak = max(peak, current)
    return live + peak


def _worker(kind: str, args: dict[str, Any], conn: Connection) -> None:
    """Set up one side, then answer "step" (wall and process CPU seconds), "memory" (peak
    bytes) and "stop"."""
    import torch

    cuda = args["device"].startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    with tempfile.TemporaryDirectory() as tmp:
        side = (Ours if kind == "ours" else Bare)(args, Path(tmp))
        conn.send("ready")
        while (msg := conn.recv()) != "stop":
            if msg == "reset_peak" and cuda:
                torch.cuda.reset_peak_memory_stats()
            if msg == "step":
                sync()
                t0, c0 = time.perf_counter(), time.process_time()
                side.step()
                sync()
                conn.send((time.perf_counter() - t0, time.process_time() - c0))
            elif msg == "memory":
                conn.send(torch.cuda.max_memory_allocated() if cuda else _cpu_step_peak(side))
            else:
                conn.send(None)


# --- the comparison -----------------------------------------------------------------------
def compare_step(
    model_path: Path,
    device: str,
    *,
    batch: int = 4,
    prompt_len: int = 192,
    response_len: int = 64,
    steps: int = 5,
    warmup: int = 1,
    gradient_checkpointing: bool = False,
) -> dict[str, float]:
    """Median step seconds of ours and of a bare PEFT loop, their ratio, peak memory of each
    (GiB) and the plan's estimate for the same tokens (keys `ours_s`, `bare_s`, `ratio`,
    `ours_peak_gib`, `bare_peak_gib`, `plan_gib`, plus the spread `ours_min_s` ...
    `bare_max_s`, `paired_ratio` (median of ours/bare over back-to-back pairs), the process
    CPU seconds `ours_cpu_s`, `bare_cpu_s`, `cpu_ratio` (less sensitive than wall time to
    other jobs on a shared CPU) and `tokens`)."""
    config = read_model_config(Path(model_path))
    info = ModelInfo.from_hf_config(Path(model_path).name, config)
    args = {
        "model_path": str(model_path),
        "device": device,
        "prompt_len": prompt_len,
        "gradient_checkpointing": gradient_checkpointing,
        "seqs": token_batch(info.vocab_size, batch, prompt_len, response_len),
    }
    ctx = mp.get_context("spawn")  # fresh interpreters: no memory carried over between sides
    conns: dict[str, Connection] = {}
    procs = []
    for kind in ("ours", "bare"):
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_worker, args=(kind, args, child), daemon=True)
        proc.start()
        child.close()  # so that a side that dies gives EOFError here instead of a hang
        conns[kind] = parent
        procs.append(proc)
    try:
        for conn in conns.values():
            assert conn.recv() == "ready"

        def ask(kind: str, msg: str) -> Any:
            conns[kind].send(msg)
            return conns[kind].recv()

        for _ in range(warmup):
            for kind in conns:
                ask(kind, "step")
        for kind in conns:
            ask(kind, "reset_peak")
        times: dict[str, list[tuple[float, float]]] = {"ours": [], "bare": []}
        for i in range(steps):  # alternate who goes first, so drift in load hits both
            for kind in ("ours", "bare") if i % 2 == 0 else ("bare", "ours"):
                times[kind].append(ask(kind, "step"))
        peaks = {kind: ask(kind, "memory") / GIB for kind in conns}
        for conn in conns.values():
            conn.send("stop")
    finally:
        for proc in procs:
            proc.join(timeout=60)
            if proc.is_alive():
                proc.kill()
    dtype = 2 if device.startswith("cuda") else 4
    tokens = batch * (prompt_len + response_len)
    plan = train_need(info, "lora", 1, dtype, 0.0, gradient_checkpointing, tokens=tokens)
    wall = {k: [w for w, _ in v] for k, v in times.items()}
    cpu = {k: [c for _, c in v] for k, v in times.items()}
    ours, bare = statistics.median(wall["ours"]), statistics.median(wall["bare"])
    pairs = [o / b for o, b in zip(wall["ours"], wall["bare"], strict=True)]
    return {
        "ours_s": ours,
        "bare_s": bare,
        "ratio": ours / bare,
        "ours_peak_gib": peaks["ours"],
        "bare_peak_gib": peaks["bare"],
        "plan_gib": plan.gib,
        "ours_min_s": min(wall["ours"]),
        "ours_max_s": max(wall["ours"]),
        "bare_min_s": min(wall["bare"]),
        "bare_max_s": max(wall["bare"]),
        "paired_ratio": statistics.median(pairs),  # steps run back to back: same load
        "ours_cpu_s": statistics.median(cpu["ours"]),
        "bare_cpu_s": statistics.median(cpu["bare"]),
        "cpu_ratio": statistics.median(cpu["ours"]) / statistics.median(cpu["bare"]),
        "tokens": float(tokens),
    }


def format_table(r: dict[str, float], device: str, gc: bool) -> str:
    """The comparison as a plain-text table."""
    ckpt = "on" if gc else "off"

    def spread(side: str) -> str:
        return f"{r[side + '_min_s']:.2f}-{r[side + '_max_s']:.2f}"

    lines = [
        f"device {device}, {int(r['tokens'])} tokens per step, gradient checkpointing {ckpt}",
        f"{'':<22}{'ours':>10}{'bare':>10}{'ours/bare':>11}",
        f"{'median step (s)':<22}{r['ours_s']:>10.3f}{r['bare_s']:>10.3f}{r['ratio']:>11.2f}",
        f"{'  min-max (s)':<22}{spread('ours'):>10}{spread('bare'):>10}",
        f"{'  back-to-back pairs':<22}{'':>20}{r['paired_ratio']:>11.2f}",
        f"{'median CPU time (s)':<22}{r['ours_cpu_s']:>10.3f}{r['bare_cpu_s']:>10.3f}"
        f"{r['cpu_ratio']:>11.2f}",
        f"{'peak memory (GiB)':<22}{r['ours_peak_gib']:>10.2f}{r['bare_peak_gib']:>10.2f}"
        f"{r['ours_peak_gib'] / r['bare_peak_gib']:>11.2f}",
        f"{'plan estimate (GiB)':<22}{r['plan_gib']:>10.2f}",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    ap.add_argument("--model", type=Path, help="model folder (default: the embedded model)")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--prompt-len", type=int, default=192)
    ap.add_argument("--response-len", type=int, default=64)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--gradient-checkpointing", action="store_true")
    ap.add_argument(
        "--threads",
        type=int,
        help="torch threads per side (OMP_NUM_THREADS); 1 on a shared CPU: its time is then "
        "compute, not waiting for a descheduled sibling thread",
    )
    ap.add_argument(
        "--ranks",
        type=int,
        default=0,
        help="compare 1 and N trainer ranks (gloo) on the same global batch (bench/train_ranks.py)",
    )
    a = ap.parse_args()
    if a.ranks > 1:
        from bench.train_ranks import compare_ranks, format_rows

        path = a.model or resolve_model(None, app_paths(os.environ.get("CLAWRL_TEST_CACHE"))).path
        rows = compare_ranks(path, a.ranks, a.batch, a.prompt_len, a.response_len, a.steps)
        print(f"model {path}")
        print(format_rows(rows, a.batch))
        return
    if a.threads:
        os.environ["OMP_NUM_THREADS"] = str(a.threads)  # read by torch in the spawned sides
    path = a.model or resolve_model(None, app_paths(os.environ.get("CLAWRL_TEST_CACHE"))).path
    result = compare_step(
        path,
        a.device,
        batch=a.batch,
        prompt_len=a.prompt_len,
        response_len=a.response_len,
        steps=a.steps,
        warmup=a.warmup,
        gradient_checkpointing=a.gradient_checkpointing,
    )
    threads = os.environ.get("OMP_NUM_THREADS", "torch's default")
    print(f"model {path}, torch threads per side: {threads}")
    print(format_table(result, a.device, a.gradient_checkpointing))


if __name__ == "__main__":
    main()
