"""The embedded serving backend: transformers + peft in-process, continuous batching.

The worker thread, lanes and request bookkeeping are `WorkerBackend`'s; this class runs the
model: prefill (reusing a stored prefix KV, prefix_cache.py), one decode step per lane over
a left-padded `DecodeBatch`, scoring, and LoRA / full versions: plain LoRA adapters as
merged copies of float32 weights (small CPU models) or through forward hooks on 16-bit
weights (lora_hooks.py: merging into bf16 rounds a fresh adapter away), others through peft.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import torch

from clawrl_app.engine.backends.base import BackendError
from clawrl_app.engine.backends.prefix_cache import MIN_REUSE_TOKENS, PrefixCache, PrefixHit
from clawrl_app.engine.backends.pytorch.heap import return_freed_memory
from clawrl_app.engine.backends.pytorch.kv_batch import DecodeBatch
from clawrl_app.engine.backends.pytorch.lora_hooks import LoraHooks, hookable
from clawrl_app.engine.backends.pytorch.lora_merge import merged_copy
from clawrl_app.engine.backends.sampling import continuation_logprobs
from clawrl_app.engine.backends.torch_rows import BASE_VERSION, Row
from clawrl_app.engine.backends.worker_backend import WorkerBackend

log = logging.getLogger("clawrl.torch_backend")


class TorchBackend(WorkerBackend):
    """In-process backend for the embedded model (CPU) or a small GPU."""

    thread_name = "torch-backend"

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        model_name: str,
        context_length: int,
        max_batch: int = 8,
        max_queue: int = 64,
        merge_lora: bool = False,
        qlora: bool = False,
        prefix_cache_bytes: int = 0,
        prefix_min_tokens: int = MIN_REUSE_TOKENS,
    ) -> None:
        super().__init__(
            tokenizer,
            model_name=model_name,
            context_length=context_length,
            max_batch=max_batch,
            max_queue=max_queue,
        )
        self._model = model
        self._merge_lora = merge_lora and next(model.parameters()).dtype == torch.float32
        """Serve each LoRA version as its own merged copy of the weights (float32 only: in
        16-bit weights the merge rounds a fresh adapter's update away)."""
        self._hooks = LoraHooks(model, round_delta=qlora)
        """LoRA versions through forward hooks; `qlora`: they were trained on a 4-bit base (the
        model is its dequantized copy) and are added in the order peft's 4-bit layers use."""
        self._full: dict[str, Any] = {}  # full fine-tuning versions: their own weights
        self._prefix = PrefixCache(prefix_cache_bytes, prefix_min_tokens)
        """KV of earlier prompts + answers, reused by prompts that repeat them (0 B = off)."""

    @property
    def device(self) -> torch.device:
        """Where the served weights live: every tensor the worker creates goes there."""
        return _device_of(self._model)

    def prefix_cache_stats(self) -> dict[str, int]:
        """Entries, bytes, hits, misses, tokens reused and evictions of the prefix cache."""
        return self._prefix.stats()

    async def load_adapter(self, version: str, path: Path) -> None:
        if version in self._versions:
            raise BackendError(f"version name {version!r} is already used; never reuse one")
        merged = None
        if self._merge_lora and (path / "adapter_config.json").exists():
            # built beside the worker thread (it only reads the base weights), then swapped in
            merged = await asyncio.to_thread(merged_copy, self._model, path)
        if merged is not None:
            await self._submit(self._commands, lambda: self._full.__setitem__(version, merged))
        elif hookable(path):
            await self._submit(self._commands, lambda: self._hooks.add(version, path))
        else:
            await self._submit(self._commands, lambda: self._load_now(version, path))
        self._versions[version] = path

    # -- model calls (worker thread) -----------------------------------------------------
    def _start_row(self, row: Row) -> tuple[DecodeBatch, torch.Tensor]:
        ids = row.request.prompt_ids
        out, _ = self._forward_reusing(row.version, ids, ids, use_cache=True, logits_to_keep=1)
        batch = DecodeBatch(
            cache=out.past_key_values,
            mask_BT=torch.ones(1, len(ids), dtype=torch.long, device=self.device),
        )
        batch.rows.append(row)
        return batch, out.logits[:, -1, :]

    def _decode_logits(self, key: tuple[str, bool], batch: DecodeBatch) -> torch.Tensor:
        inputs = batch.step_inputs([r.next_id for r in batch.rows])
        with self._adapter(key[0]):
            out = self._module(key[0])(**inputs, past_key_values=batch.cache, use_cache=True)
        batch.cache = out.past_key_values
        return out.logits[:, -1, :]  # type: ignore[no-any-return]

    def _row_done(self, batch: DecodeBatch, index: int, row: Row) -> None:
        # the last token was never fed: the stored KV covers the answer but its last token
        self._prefix.store_row(
            row.version, batch.cache, index, row.request.prompt_ids, row.out_ids[: row.produced - 1]
        )

    def _forward_reusing(
        self, version: str, ids: list[int], prefix_of: list[int], *, use_cache: bool, **kw: Any
    ) -> tuple[Any, int]:
        """A forward pass of `version` over `ids` from a copy of the stored KV of the longest
        prefix of `prefix_of` (prefix_cache.py), or from scratch (none, or using it failed).
        Returns the output and how many leading ids were reused (not in its logits)."""
        hit = self._prefix.lookup(version, prefix_of)
        try:
            return self._forward_from(version, ids, hit, use_cache, **kw)
        except Exception as exc:
            if hit is None:
                raise
            self._prefix.failed()
            log.warning("prefix cache: reuse failed (%s: %s); no reuse", type(exc).__name__, exc)
            return self._forward_from(version, ids, None, use_cache, **kw)

    def _forward_from(
        self, version: str, ids: list[int], hit: PrefixHit | None, use_cache: bool, **kw: Any
    ) -> tuple[Any, int]:
        from transformers import DynamicCache

        reused = hit.length if hit is not None else 0
        cache = hit.cache() if hit is not None else DynamicCache() if use_cache else None
        with self._adapter(version):
            out = self._module(version)(
                input_ids=torch.tensor([ids[reused:]], dtype=torch.long, device=self.device),
                past_key_values=cache,
                use_cache=cache is not None,
                **kw,
            )
        return out, reused

    def _module(self, version: str) -> Any:
        """The weights that serve `version`: its own (full or merged) model, or the shared
        base + adapters."""
        return self._full.get(version, self._model)

    def _adapter(self, version: str) -> AbstractContextManager[Any]:
        """Select `version` for the next forward pass (base = adapters disabled)."""
        self._hooks.select(version if version in self._hooks else None)
        if version in self._full:
            return nullcontext()
        if version in self._hooks or version == BASE_VERSION:  # peft's adapters (if any) off
            return self._peft_off()
        self._model.set_adapter(version)  # a peft version: the model is a PeftModel
        return nullcontext()

    def _peft_off(self) -> AbstractContextManager[Any]:
        if not hasattr(self._model, "disable_adapter") or not hasattr(self._model, "peft_config"):
            return nullcontext()
        return self._model.disable_adapter()  # type: ignore[no-any-return]

    def _load_now(self, version: str, path: Path) -> None:
        from peft import PeftModel

        if not (path / "adapter_config.json").exists():  # a full fine-tuning checkpoint
            from transformers import AutoModelForCausalLM

            dtype = next(self._model.parameters()).dtype
            full = AutoModelForCausalLM.from_pretrained(
                str(path), dtype=dtype, local_files_only=True
            )
            self._full[version] = full.to(next(self._model.parameters()).device).eval()
            return
        if isinstance(self._model, PeftModel):
            self._model.load_adapter(str(path), adapter_name=version)
        else:
            self._model = PeftModel.from_pretrained(self._model, str(path), adapter_name=version)
        self._model.eval()

    def _delete_now(self, version: str) -> None:
        self._prefix.drop_version(version)  # its KV must never serve anything again
        if version in self._hooks:
            self._hooks.remove(version)
        elif self._full.pop(version, None) is None:
            self._model.delete_adapter(version)
            if not self._model.peft_config:  # last adapter gone: back to the plain base model
                self._model = self._model.unload()
        if self.device.type == "cpu":  # else RSS grows by a copy per publish (heap.py)
            return_freed_memory()

    def _topk_now(
        self, prompt_ids: list[int], response_ids: list[int], k: int, version: str
    ) -> tuple[list[list[int]], list[list[float]]]:
        logits = self._response_logits(prompt_ids, response_ids, version)  # (T, V)
        logp_TV = torch.log_softmax(logits.float(), dim=-1)
        vals_TK, idx_TK = torch.topk(logp_TV, k, dim=-1)  # (T, K)
        return idx_TK.tolist(), vals_TK.tolist()

    def _score_now(
        self, prompt_ids: list[int], response_ids: list[int], version: str
    ) -> list[float]:
        logits = self._response_logits(prompt_ids, response_ids, version)  # (T, V)
        return continuation_logprobs(logits, response_ids)

    def _response_logits(
        self, prompt_ids: list[int], response_ids: list[int], version: str
    ) -> torch.Tensor:
        """The logits predicting each response token (T, V), reusing a stored prefix of the
        prompt (a teacher prompt repeats the turn's history)."""
        ids = prompt_ids + response_ids
        out, reused = self._forward_reusing(version, ids, prompt_ids, use_cache=False)
        start = len(prompt_ids) - 1 - reused  # the prompt's last token predicts the first
        return out.logits[0, start : start + len(response_ids)]


def _device_of(model: Any) -> torch.device:
    """The device of a model's weights (the first parameter's; one device per model here)."""
    try:
        return next(model.parameters()).device
    except StopIteration:
        return torch.device("cpu")
