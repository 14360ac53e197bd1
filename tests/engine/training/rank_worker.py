"""One rank of the equivalence check (run by tests/engine/training/test_ranks.py, one or two
processes): the trainer takes one step on the store's global batch; rank 0 saves the step's
metrics, the trainable gradients and the updated trainable weights to `out`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch

from clawrl_app.engine.training import trainer as trainer_module
from clawrl_app.engine.training.config import TrainerConfig
from clawrl_app.engine.training.ranks import barrier, broadcast, end_rank
from clawrl_app.engine.training.trainer import Trainer

forwarded: list[int] = []  # the sample ids this rank ran forward/backward on
_forward = trainer_module.response_logprobs


def counting_forward(model: Any, items: Any, device: Any, *args: Any, **kwargs: Any) -> Any:
    forwarded.extend(it.sample_id for it in items)
    return _forward(model, items, device, *args, **kwargs)


def main(config: str, out: str) -> int:
    trainer = Trainer(TrainerConfig(**json.loads(Path(config).read_text())))
    what, items = broadcast(trainer.decide() if trainer.ranks.main else ("", []), trainer.ranks)
    assert what == "train", what
    trainer_module.response_logprobs = counting_forward  # type: ignore[assignment]
    metrics = trainer.train_step(items)
    per_rank: list[Any] = [forwarded]
    if trainer.ranks.world > 1:
        per_rank = [None] * trainer.ranks.world
        torch.distributed.all_gather_object(per_rank, forwarded)
    if trainer.ranks.main:
        named = [(n, p) for n, p in trainer.model.named_parameters() if p.requires_grad]
        torch.save(
            {
                "metrics": metrics,
                "grads": {n.removeprefix("module."): p.grad.detach().clone() for n, p in named},
                "weights": {n.removeprefix("module."): p.detach().clone() for n, p in named},
                "samples": [it.sample_id for it in items],
                "processes": trainer.accelerator.num_processes,
                "forwarded": per_rank,
                "distributed": str(trainer.accelerator.distributed_type),
            },
            out,
        )
    barrier(trainer.ranks)
    return end_rank(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
