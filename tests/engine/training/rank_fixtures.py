"""A tiny random Llama and a store of judged samples for the multi-rank trainer tests
(no downloads: the tokenizer is the embedded model's)."""

from __future__ import annotations

import random
from pathlib import Path

from clawrl_app.engine.store import NewTurn, Store
from tests.random_model import LlamaShape, save_random_llama


def tiny_llama(out: Path, tokenizer_dir: Path) -> Path:
    """A 2-layer, 64-wide random Llama (about 3M parameters, mostly embeddings)."""
    if not (out / "config.json").exists():
        from transformers import AutoTokenizer

        vocab = len(AutoTokenizer.from_pretrained(str(tokenizer_dir), local_files_only=True))
        shape = LlamaShape(
            hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16, intermediate=128, vocab=vocab
        )
        save_random_llama(out, shape.params, tokenizer_dir, shape=shape, seed=3)
    return out


def judged_store(
    path: Path,
    n: int,
    seed: int = 0,
    rewards: list[float] | None = None,
    teacher_every: int = 3,
) -> list[int]:
    """`n` one-turn sessions, each turn's sample judged (rewards `rewards`, else +1/-1
    alternating; every `teacher_every`-th with a teacher, none at 0) and eligible now;
    returns the sample ids."""
    rng = random.Random(seed)
    ids = []
    with Store(path) as store:
        for k in range(n):
            sid = f"rank-{k}"
            store.ensure_session(sid, "test")
            resp = [rng.randrange(100, 4000) for _ in range(5 + k % 3)]
            turn = store.record_turn(
                NewTurn(
                    session_id=sid,
                    type="main",
                    request={"messages": [{"role": "user", "content": f"q {k}"}]},
                    response_text="a",
                    prompt_ids=[rng.randrange(100, 4000) for _ in range(6 + k % 4)],
                    response_ids=resp,
                    logprobs=[-rng.uniform(0.5, 3.0) for _ in resp],
                    policy_version="base",
                    response={"finish_reason": "stop", "tool_calls": []},
                    latency_ms=1.0,
                    prompt_tokens=6,
                    completion_tokens=len(resp),
                    finish_reason="stop",
                )
            )
            sample = store.create_sample(turn.id, sid, "user", "reply", None)
            assert sample is not None
            with_teacher = teacher_every > 0 and k % teacher_every == 0
            teacher = [-rng.uniform(0.2, 2.0) for _ in resp] if with_teacher else None
            reward = rewards[k] if rewards is not None else (1.0 if k % 2 else -1.0)
            store.record_judgment(
                sample, "test", [1], reward, "hint" if teacher else None,
                [], None, teacher, eligible_at=0.0,
            )  # fmt: skip
            ids.append(sample)
    return ids
