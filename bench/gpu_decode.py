"""The torch backend's decode vs a bare transformers greedy loop: same process, same card,
no trainer, no HTTP (bench/gpu.py's side-by-side rows).

Both decode the same prompt greedily with a KV cache, 1 stream and `streams` streams (one
batch), on the base model and on a LoRA version (rank 16 over the trainer's target modules,
random non-zero weights): the bare loop runs peft's unmerged model, the backend serves the
adapter the way the app does (forward hooks on 16-bit weights, a merged copy in float32).
ms/token counts decode only (from each stream's first token to its last); repeats are
interleaved (bare, backend, bare, ...) and the medians reported. EOS is ignored on both sides
so that every stream decodes `tokens` tokens of the random model.
"""

from __future__ import annotations

import asyncio
import copy
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from clawrl_app.engine.backends.base import GenerationRequest, SamplingParams, TokenOut
from clawrl_app.engine.backends.pytorch.backend import TorchBackend
from clawrl_app.engine.training.trainer import LORA_TARGETS

Row = tuple[str, str, str]
PROMPT = "Write a long story about a lighthouse keeper and the sea."


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bare_ms_per_token(model: Any, prompt: list[int], streams: int, tokens: int) -> float:
    """A bare greedy loop: forward with the KV cache, argmax, one read per step."""
    from transformers import DynamicCache

    device = next(model.parameters()).device
    cache = DynamicCache()
    with torch.no_grad():
        ids = torch.tensor([prompt] * streams, device=device)
        out = model(input_ids=ids, past_key_values=cache, use_cache=True)
        next_B1 = out.logits[:, -1].argmax(-1, keepdim=True)
        next_B1.tolist()  # the first token reaches the host: decode starts here
        sync(device)
        t0 = time.perf_counter()
        for _ in range(tokens - 1):
            out = model(input_ids=next_B1, past_key_values=cache, use_cache=True)
            next_B1 = out.logits[:, -1].argmax(-1, keepdim=True)
            next_B1.tolist()
        sync(device)
    return (time.perf_counter() - t0) * 1000 / (tokens - 1)


async def _stream(be: TorchBackend, prompt: list[int], tokens: int, version: str) -> list[float]:
    stamps = []
    params = SamplingParams(tokens, temperature=0.0)
    async for ev in be.generate(GenerationRequest("b", prompt, params, version=version)):
        if isinstance(ev, TokenOut):
            stamps.append(time.perf_counter())
    return stamps


def backend_ms_per_token(
    loop: EventLoop, be: TorchBackend, prompt: list[int], streams: int, tokens: int, version: str
) -> float:
    """The backend's own worker (thread, continuous batching, sampling, hooks): decode time
    per token of one stream, from the last stream's first token to the last token."""

    async def go() -> list[list[float]]:
        return await asyncio.gather(*[_stream(be, prompt, tokens, version) for _ in range(streams)])

    stamps = loop.run(go())
    if any(len(s) != tokens for s in stamps):
        raise RuntimeError(f"a stream stopped early: {[len(s) for s in stamps]} of {tokens}")
    start = max(s[0] for s in stamps)  # all streams admitted: one batch decodes
    end = max(s[-1] for s in stamps)
    steps = min(len([t for t in s if t > start]) for s in stamps)
    return (end - start) * 1000 / max(steps, 1)


class EventLoop:
    """An event loop in a thread, so the backend's async API runs beside the timing code."""

    def __init__(self) -> None:
        import threading

        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)


def random_adapter(model: Any, out: Path) -> Path:
    """A rank-16 LoRA adapter over the trainer's target modules, random non-zero weights."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    targets = [t for t in LORA_TARGETS if any(n.endswith(t) for n, _ in model.named_modules())]
    cfg = LoraConfig(r=16, lora_alpha=32, target_modules=targets, init_lora_weights=False)
    peft_model = get_peft_model(copy.deepcopy(model), cfg)
    peft_model.save_pretrained(str(out))
    return out


def side_by_side(
    model_dir: Path,
    device: str,
    *,
    streams: int = 4,
    tokens: int = 128,
    repeats: int = 3,
    say: Callable[[str], None] = print,
) -> list[Row]:
    """Rows: bare loop vs the backend, ms/token at 1 and `streams` streams, base and LoRA."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from clawrl_app.engine.chat.formatter import ChatFormatter

    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    tok = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=dtype).to(device).eval()
    prompt = ChatFormatter(tok).render([{"role": "user", "content": PROMPT}])
    with tempfile.TemporaryDirectory() as tmp:
        adapter = random_adapter(model, Path(tmp) / "adapter")
        lora_bare = PeftModel.from_pretrained(copy.deepcopy(model), str(adapter)).eval()
        loop = EventLoop()
        be = TorchBackend(
            model,
            tok,
            model_name="m",
            context_length=8192,
            max_batch=streams,
            merge_lora=dtype == torch.float32,  # as the app serves: merged copies in float32
        )
        be._eos = frozenset()  # every stream decodes `tokens` tokens
        try:
            loop.run(be.start())
            loop.run(be.load_adapter("v1", adapter))
            rows: list[Row] = []
            rates: dict[tuple[str, int], float] = {}
            for n in sorted({1, streams}):
                for label, bare_model, version in (
                    ("base", model, "base"),
                    ("LoRA", lora_bare, "v1"),
                ):
                    backend_ms_per_token(loop, be, prompt, n, 8, version)  # warm-up of both paths
                    bare_ms_per_token(bare_model, prompt, n, 8)
                    bare, ours = [], []
                    for _ in range(repeats):
                        bare.append(bare_ms_per_token(bare_model, prompt, n, tokens))
                        ours.append(backend_ms_per_token(loop, be, prompt, n, tokens, version))
                    b, o = statistics.median(bare), statistics.median(ours)
                    rates[(label, n)] = n * 1000 / o
                    say(
                        f"side by side: {label}, {n} stream(s): bare {b:.2f}, backend {o:.2f} ms/token"
                    )
                    rows.append(
                        (
                            f"decode ms/token, {label}, {n} stream(s): bare loop vs backend",
                            f"{b:.2f} vs {o:.2f} ({o / b:.2f}x)",
                            f"{n * 1000 / b:.0f} vs {n * 1000 / o:.0f} tok/s; medians of {repeats},"
                            f" {tokens} tokens, same process, no trainer",
                        )
                    )
            if streams > 1:
                for label in ("base", "LoRA"):
                    gain = rates[(label, streams)] / rates[(label, 1)]
                    rows.append(
                        (
                            f"backend tokens/s, {label}: {streams} streams vs 1",
                            f"{gain:.2f}x",
                            f"{rates[(label, streams)]:.0f} vs {rates[(label, 1)]:.0f} tok/s",
                        )
                    )
        finally:
            loop.run(be.stop())
            loop.close()
    return rows
