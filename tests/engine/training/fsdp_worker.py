"""One rank of the sharding check (run by tests/engine/training/test_sharding.py): a tiny
random Llama takes optimizer steps on fixed global batches through `sharding.py`; rank 0
saves what the test compares. Run under torchrun for 2 ranks, or as a plain process for 1.

    fsdp_worker.py train SHARDING OUT          step 1, checkpoint, step 2
    fsdp_worker.py resume SHARDING OUT CKPT    from CKPT's model + optimizer.pt, step 2

Files in OUT (rank 0): step1.pt / step2.pt (full state dicts), bytes_RANK.json (every
rank), and for `train` the checkpoint: model/ (HF folder) and optimizer.pt."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch

from clawrl_app.engine.training.ranks import Ranks, end_rank, loss_scale, rank_share
from clawrl_app.engine.training.sharding import (
    Sharding,
    clip_grad_norm,
    full_state_dict,
    load_optimizer_state,
    make_accelerator,
    optimizer_state_for_save,
    prepare_model,
    save_full_model,
    shard_bytes,
)

GLOBAL_BATCH, SEQ, VOCAB = 4, 12, 128


def tiny_llama(seed: int) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        intermediate_size=128,
        vocab_size=VOCAB,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(cfg).float()


def global_batch(step: int) -> torch.Tensor:
    """The same (GLOBAL_BATCH, SEQ) token ids on every rank, different for each step."""
    g = torch.Generator().manual_seed(100 + step)
    return torch.randint(0, VOCAB, (GLOBAL_BATCH, SEQ), generator=g)


def step(model: Any, optimizer: Any, number: int, ranks: Ranks, device: Any) -> None:
    """One optimizer update on this rank's half of the global batch: each sample's mean
    token loss, scaled so the ranks' averaged gradient is the global batch's mean."""
    ids = global_batch(number)
    mine = torch.stack(rank_share(list(ids), ranks.rank, ranks.world)).to(device)  # (B, T)
    optimizer.zero_grad(set_to_none=True)
    logits = model(input_ids=mine).logits[:, :-1]  # (B, T-1, V)
    per_token = torch.nn.functional.cross_entropy(
        logits.reshape(-1, VOCAB), mine[:, 1:].reshape(-1), reduction="none"
    ).view(mine.shape[0], -1)  # (B, T-1)
    loss = per_token.mean(dim=1).mean()
    (loss * loss_scale(mine.shape[0], GLOBAL_BATCH, ranks.world)).backward()
    clip_grad_norm(model.parameters(), 1.0)  # random weights: the norm is above 1, it clips
    optimizer.step()


def main(phase: str, sharding: Sharding, out: Path, ckpt: Path | None) -> int:
    ranks = Ranks.from_env()
    accelerator = make_accelerator(sharding, cpu=True)
    if phase == "resume" and ranks.main:
        from transformers import AutoModelForCausalLM

        assert ckpt is not None
        model = AutoModelForCausalLM.from_pretrained(str(ckpt / "model")).float()
    else:  # rank 1 starts from other weights: rank 0's must reach it
        model = tiny_llama(seed=ranks.rank)
    model.to(accelerator.device).train()

    def adamw(params: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
        return torch.optim.AdamW(params, lr=1e-3, betas=(0.9, 0.98), weight_decay=0.01)

    model, optimizer = prepare_model(accelerator, sharding, model, adamw)
    if phase == "train":
        step(model, optimizer, 1, ranks, accelerator.device)
        mine = shard_bytes(model, optimizer)
        (out / f"bytes_{ranks.rank}.json").write_text(json.dumps(mine.__dict__))
        state = full_state_dict(model)
        opt_state = optimizer_state_for_save(model, optimizer)
        if ranks.main:
            assert state is not None and opt_state is not None
            torch.save(state, out / "step1.pt")
            save_full_model(model, state, str(out / "model"))
            torch.save(opt_state, out / "optimizer.pt")
        else:
            assert state is None and opt_state is None
        # rank 1 waits here, not inside step 2's first all-gather, while rank 0 writes: once
        # (a fresh-clone `make test` beside two benchmarks, 2026-11-28) rank 1 aborted there
        # ("terminate called without an active exception") as rank 0 finished writing
        accelerator.wait_for_everyone()
    else:
        assert ckpt is not None
        saved = torch.load(ckpt / "optimizer.pt", weights_only=False) if ranks.main else None
        load_optimizer_state(model, optimizer, saved)
    step(model, optimizer, 2, ranks, accelerator.device)
    state = full_state_dict(model)
    if ranks.main:
        torch.save(state, out / "step2.pt")
    accelerator.wait_for_everyone()
    return end_rank(0)


if __name__ == "__main__":
    args = sys.argv[1:]
    sys.exit(main(args[0], args[1], Path(args[2]), Path(args[3]) if len(args) > 3 else None))  # type: ignore[arg-type]
