"""What the torch backend's decode step costs beyond a bare transformers loop, counted on the
CPU so that a GPU regression shows without a GPU.

On a GPU a decode step is Python-bound when the model is small enough to serve: every torch
operation is a kernel launch, and every read back to the host (`.item()`, `.tolist()`,
`bool(t)`, a library's `mask.all()`) waits for the whole queue. Here the aten operations
dispatched per step (a `TorchDispatchMode` counter), the host reads (our code: the
`HostSyncGuard`; any code: `aten._local_scalar_dense`) and the forward hooks run per step are
counted for the backend's own worker round against a bare forward + greedy pick + one read,
on a tiny random Llama with the embedded tokenizer. Bounds: at most 1.15x the bare loop's
operations, exactly one host read per batch step, and per-step work that does not grow with
the number of LoRA versions loaded.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from clawrl_app.engine.backends.base import GenerationRequest, SamplingParams
from clawrl_app.engine.backends.pytorch.backend import TorchBackend
from clawrl_app.engine.backends.pytorch.lora_hooks import hookable
from clawrl_app.engine.backends.torch_rows import Row
from tests.host_sync_guard import HostSyncGuard
from tests.random_model import LlamaShape, llama_config, random_llama

STEPS = 6
PROMPT = list(range(100, 124))
MAX_OPS_RATIO = 1.15
GREEDY = SamplingParams(100_000, temperature=0.0)


class OpCounter(TorchDispatchMode):
    """Counts every aten operation dispatched (each one a kernel launch on a GPU)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        self.ops[str(func)] += 1
        return func(*args, **(kwargs or {}))

    @property
    def total(self) -> int:
        return sum(self.ops.values())

    @property
    def scalar_reads(self) -> int:
        """Host reads of one value made by any code (`.item()`, `bool(t)`, `float(t)`)."""
        return self.ops["aten._local_scalar_dense.default"]


class HookCounter:
    """Wraps every forward hook of a model so that each call is counted."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.calls = 0
        for module in model.modules():
            for key, hook in list(module._forward_hooks.items()):
                module._forward_hooks[key] = self._counted(hook)

    def _counted(self, hook: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return hook(*args, **kwargs)

        return call


@pytest.fixture(scope="module")
def tiny(embedded_model: Any) -> tuple[Any, Any]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(embedded_model.path), local_files_only=True)
    shape = LlamaShape(
        hidden=64, layers=4, heads=4, kv_heads=2, head_dim=16, intermediate=128, vocab=len(tok)
    )
    return random_llama(llama_config(shape, tok), "cpu", torch.float32), tok


@pytest.fixture(scope="module")
def adapters(tiny: tuple[Any, Any], tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Three plain LoRA adapters (served through forward hooks), random non-zero weights."""
    from peft import LoraConfig, get_peft_model

    model, _ = tiny
    out = []
    for seed in range(3):
        torch.manual_seed(seed)
        cfg = LoraConfig(
            r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False
        )
        folder = tmp_path_factory.mktemp(f"adapter{seed}")
        get_peft_model(copy.deepcopy(model), cfg).save_pretrained(str(folder))
        out.append(folder)
    return out


def bare_ops(model: Any, rows: int) -> OpCounter:
    """A bare greedy loop: forward with the KV cache, log-softmax, argmax, one read."""
    from transformers import DynamicCache

    cache = DynamicCache()
    with torch.no_grad():
        out = model(input_ids=torch.tensor([PROMPT] * rows), past_key_values=cache, use_cache=True)
        next_B1 = out.logits[:, -1].argmax(-1, keepdim=True)
        with OpCounter() as counter:
            for _ in range(STEPS):
                out = model(input_ids=next_B1, past_key_values=cache, use_cache=True)
                logp_BV = torch.log_softmax(out.logits[:, -1].float(), dim=-1)
                next_B1 = logp_BV.argmax(-1, keepdim=True)
                host = torch.cat([next_B1.double(), logp_BV.gather(1, next_B1).double()], 1)
                host.tolist()
    return counter


def backend_step(
    model: Any,
    tok: Any,
    params: list[SamplingParams],
    *,
    adapters: Sequence[Path] = (),
    version: str = "base",
) -> tuple[OpCounter, HostSyncGuard, HookCounter]:
    """The backend's own worker rounds, run in this thread: the rows are admitted and
    prefilled by two rounds, then STEPS pure decode rounds of one batch are counted."""
    be = TorchBackend(copy.deepcopy(model), tok, model_name="m", context_length=8192)
    be._eos = frozenset()  # a random model may pick EOS: every row must keep decoding
    for k, path in enumerate(adapters):  # what load_adapter runs on the worker thread
        assert hookable(path)
        be._hooks.add(f"v{k + 1}", path)
        be._versions[f"v{k + 1}"] = path
    events: list[Any] = []
    for k, p in enumerate(params):
        row = Row(GenerationRequest(f"r{k}", list(PROMPT), p), emit=events.append)
        row.version, row.counted = version, True
        be._pending.put(row)
    with torch.no_grad():
        be._serve_round()
        be._serve_round()
        assert list(be._batches) == [(version, False)] and be._batches[
            (version, False)
        ].size == len(params)
        hooks = HookCounter(be._module(version))
        with OpCounter() as ops, HostSyncGuard() as reads:
            for _ in range(STEPS):
                be._serve_round()
    assert not any(isinstance(e, BaseException) for e in events), events
    return ops, reads, hooks


@pytest.mark.parametrize("rows", [1, 4])
def test_a_greedy_decode_step_costs_what_a_bare_loop_costs(
    tiny: tuple[Any, Any], rows: int
) -> None:
    model, tok = tiny
    bare = bare_ops(model, rows)
    ops, reads, _ = backend_step(model, tok, [GREEDY] * rows)
    ratio = ops.total / bare.total
    assert ratio <= MAX_OPS_RATIO, (ratio, ops.ops - bare.ops)
    assert len(reads.reads) == STEPS, reads.reads  # one read per batch step, not per row
    assert ops.scalar_reads == 0, ops.ops  # no `.item()` anywhere, libraries included


def test_sampled_rows_with_logprobs_read_the_batch_back_once(tiny: tuple[Any, Any]) -> None:
    """Seeded and unseeded temperature rows beside a greedy one, with top-k log-probs: still
    one read per step (top_p = 1: the CPU's nucleus search reads its mass, see sampling.py)."""
    model, tok = tiny
    params = [
        SamplingParams(100_000, temperature=0.0, top_logprobs=3),
        SamplingParams(100_000, temperature=0.8, seed=7),
        SamplingParams(100_000, temperature=1.2),
    ]
    ops, reads, _ = backend_step(model, tok, params)
    assert len(reads.reads) == STEPS, reads.reads
    assert ops.scalar_reads == 0, ops.ops


def test_step_work_does_not_grow_with_the_versions_loaded(
    tiny: tuple[Any, Any], adapters: list[Path]
) -> None:
    """A hooked LoRA version costs its hooks' work per step whatever else is loaded: the
    operations, reads and hook calls of a step of v1 are the same with one version loaded
    as with three, and the base served beside loaded versions stays near the bare loop."""
    model, tok = tiny
    one = backend_step(model, tok, [GREEDY], adapters=adapters[:1], version="v1")
    three = backend_step(model, tok, [GREEDY], adapters=adapters, version="v1")
    assert one[0].ops == three[0].ops
    assert len(one[1].reads) == len(three[1].reads) == STEPS
    layers = 4 * 2  # q_proj and v_proj of 4 layers carry the adapters
    assert one[2].calls == three[2].calls == layers * STEPS
    base_ops, _, base_hooks = backend_step(model, tok, [GREEDY], adapters=adapters)
    assert base_ops.total / bare_ops(model, 1).total <= MAX_OPS_RATIO
    assert base_hooks.calls == layers * STEPS  # they run, and return at once


def test_a_batch_passes_the_mask_only_while_some_row_is_padded() -> None:
    """Rows of different lengths need the mask; once the padded row has left, none is passed
    (transformers reads a passed mask back to the host on every step)."""
    from transformers import DynamicCache

    from clawrl_app.engine.backends.pytorch.kv_batch import DecodeBatch

    def one_row(length: int) -> DecodeBatch:
        cache = DynamicCache()
        cache.update(torch.ones(1, 2, length, 4), torch.ones(1, 2, length, 4), 0)
        batch = DecodeBatch(cache=cache, mask_BT=torch.ones(1, length, dtype=torch.long))
        batch.rows.append(object())
        return batch

    batch = one_row(5)
    assert "attention_mask" not in batch.step_inputs([1])
    batch.merge(one_row(3))  # the second row is left-padded by three columns
    inputs = batch.step_inputs([1, 2])
    assert batch.padded and inputs["attention_mask"].tolist() == [[1] * 7, [0, 0, 0, 1, 1, 1, 1]]
    assert inputs["position_ids"].tolist() == [[6], [3]]
    batch.keep([0])  # the padded row leaves: no padding column remains
    assert not batch.padded and "attention_mask" not in batch.step_inputs([1])
    batch.merge(one_row(9))
    batch.keep([1])  # the longer row stays: the padding columns are trimmed away
    assert not batch.padded and batch.mask_BT.shape[1] == 9
