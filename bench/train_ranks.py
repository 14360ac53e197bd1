"""The trainer's step with 1 and with N ranks on the same global batch (CPU: gloo).

`bench/train_step.py --ranks N` runs this: the real `Trainer` in N processes started by
`rank_launch.RankGroup` (the supervisor's launch path), each training on its share of one
global batch of `batch` items (`prompt_len` + `response_len` random tokens, the `combine`
objective, LoRA r16 on every linear), then the same with one process. Reported: median step
seconds and samples per second of each, and each rank's memory of model + gradients +
optimizer state counted from its tensors after a step, beside what the plan's memory model
says that layout holds per rank (`memory_model.model_state_bytes`). On a 2-core machine two
ranks share the cores, so samples/s shows the cost of the collectives, not a speed-up.

Run: `.venv/bin/python bench/train_step.py --ranks 2 [--model DIR] [--batch 8]`
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

GIB = 1024**3


def _live_bytes(model: Any, optimizer: Any) -> dict[str, int]:
    """Bytes of weights (+ buffers), gradients and optimizer state held by this process."""
    import torch

    def total(tensors: list[Any]) -> int:
        seen = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}
        return sum(seen.values())

    params = [*model.parameters(), *model.buffers()]
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    state = [v for st in optimizer.state.values() for v in st.values() if torch.is_tensor(v)]
    return {"weights": total(params), "grads": total(grads), "optimizer": total(state)}


def worker(args: dict[str, Any], out: Path) -> None:
    """One rank: set up the trainer, one warm-up step, `steps` timed steps (all ranks start
    each step together), then rank 0 writes every rank's figures to `out`."""
    import contextlib
    import io

    import torch

    from clawrl_app.engine.training.config import TrainerConfig
    from clawrl_app.engine.training.ranks import barrier
    from clawrl_app.engine.training.train_data import TrainItem
    from clawrl_app.engine.training.trainer import Trainer

    tmp = Path(args["tmp"])
    seqs, p = args["seqs"], args["prompt_len"]
    cfg = TrainerConfig(
        store_path=str(tmp / "store.sqlite3"),
        checkpoints_dir=str(tmp / "ckpt"),
        model_path=args["model_path"],
        batch_size=len(seqs),
        token_budget=len(seqs) * len(seqs[0]),
        resume_from="none",
    )
    trainer = Trainer(cfg)
    r = len(seqs[0]) - p
    items = [
        TrainItem(i, f"s{i}", s[:p], s[p:], [-2.0] * r, 1.0, (-1.0) ** i, True, [-1.0] * r, "")
        for i, s in enumerate(seqs)
    ]
    times = []
    with contextlib.redirect_stdout(io.StringIO()):
        for i in range(args["steps"] + 1):
            barrier(trainer.ranks)
            t0 = time.perf_counter()
            trainer.train_step(items)
            barrier(trainer.ranks)
            if i:  # the first is a warm-up
                times.append(time.perf_counter() - t0)
    mine = {"times": times, **_live_bytes(trainer.model, trainer.optimizer)}
    every: list[Any] = [mine]
    if trainer.ranks.world > 1:
        every = [None] * trainer.ranks.world
        torch.distributed.all_gather_object(every, mine)
    if trainer.ranks.main:
        trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
        total = sum(p.numel() for p in trainer.model.parameters())
        out.write_text(json.dumps({"ranks": every, "trainable": trainable, "total": total}))


def run_layout(args: dict[str, Any], world: int) -> dict[str, Any]:
    """The figures of one layout (`world` ranks) from a fresh set of processes."""
    from clawrl_app.engine.training.rank_launch import RankGroup

    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "args.json"
        spec.write_text(json.dumps({**args, "tmp": tmp}))
        out = Path(tmp) / "out.json"
        rc = RankGroup([sys.executable, __file__, str(spec), str(out)], world).wait()
        if rc != 0:
            raise SystemExit(f"{world} rank(s) exited with code {rc}")
        return json.loads(out.read_text())  # type: ignore[no-any-return]


def compare_ranks(model_path: Path, ranks: int, batch: int, prompt_len: int, response_len: int,
                  steps: int) -> list[dict[str, Any]]:  # fmt: skip
    """One row per layout (1 rank, then `ranks`): step time, samples/s, per-rank memory."""
    from bench.train_step import token_batch
    from clawrl_app.memory_model import model_state_bytes
    from clawrl_app.models import read_model_config

    vocab = int(read_model_config(model_path).get("vocab_size") or 32000)
    args = {
        "model_path": str(model_path),
        "prompt_len": prompt_len,
        "steps": steps,
        "seqs": token_batch(vocab, batch, prompt_len, response_len),
    }
    rows = []
    for world in (1, ranks):
        got = run_layout(args, world)
        step = statistics.median(t for r in got["ranks"] for t in r["times"])
        plan = model_state_bytes(
            got["total"], got["trainable"], 4, "ddp" if world > 1 else "none", world
        )
        counted = max(r["weights"] + r["grads"] + r["optimizer"] for r in got["ranks"])
        rows.append({"ranks": world, "step_s": step, "samples_per_s": batch / step,
                     "counted_gib": counted / GIB, "plan_gib": plan / GIB,
                     "plan_error": plan / counted - 1})  # fmt: skip
    return rows


def format_rows(rows: list[dict[str, Any]], batch: int) -> str:
    lines = [
        f"global batch {batch}; memory = weights + grads + AdamW state per rank (float32, CPU)",
        "| ranks | median step (s) | samples/s | counted per rank (GiB) | plan (GiB) | plan vs counted |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['ranks']} | {r['step_s']:.3f} | {r['samples_per_s']:.2f} | "
            f"{r['counted_gib']:.4f} | {r['plan_gib']:.4f} | {r['plan_error']:+.1%} |"
        )
    return "\n".join(lines)


if __name__ == "__main__" and os.environ.get("RANK") is not None:
    worker(json.loads(Path(sys.argv[1]).read_text()), Path(sys.argv[2]))
