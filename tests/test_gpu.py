"""The GPU paths on a small random Llama model in bf16: serving, scoring, adapters, a step.

Everything here runs on `cuda:0` and is skipped where no GPU is visible. The model is random
(built by `tests/random_model.py` with the embedded model's tokenizer), so nothing is
downloaded; what is checked is device and dtype handling, not answer quality.

`CLAWRL_GPU_TEST_DEVICE=cpu` runs the same tests on the CPU (still bf16): every code path
apart from CUDA itself, for machines without a GPU.

Tolerance: 5e-2 on log-probs, the publisher's canary tolerance when serving on a GPU (bf16
logits from a cached decoding step and from a full forward pass differ by a few 1e-3).
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
from pathlib import Path
from typing import Any

import pytest
import torch

DEVICE = os.environ.get("CLAWRL_GPU_TEST_DEVICE", "cuda:0")
if DEVICE.startswith("cuda") and not torch.cuda.is_available():
    pytest.skip(
        "needs a CUDA GPU (none visible); CLAWRL_GPU_TEST_DEVICE=cpu runs these on the CPU",
        allow_module_level=True,
    )

from clawrl_app.engine.backends.base import (  # noqa: E402
    Finished,
    GenerationRequest,
    SamplingParams,
    TokenOut,
)
from clawrl_app.engine.backends.pytorch.backend import TorchBackend  # noqa: E402
from clawrl_app.engine.backends.pytorch.lora_merge import merged_copy  # noqa: E402
from clawrl_app.engine.chat.formatter import ChatFormatter  # noqa: E402
from clawrl_app.engine.training.advantages import rl_advantages  # noqa: E402
from clawrl_app.engine.training.losses import OBJECTIVES, LossConfig  # noqa: E402
from clawrl_app.engine.training.policy_forward import response_logprobs  # noqa: E402
from clawrl_app.engine.training.train_data import TrainItem  # noqa: E402
from clawrl_app.engine.training.trainer import LORA_TARGETS  # noqa: E402
from clawrl_app.models import ResolvedModel, load_model  # noqa: E402
from tests.conftest import start_engine  # noqa: E402
from tests.random_model import LlamaShape, save_random_llama  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.slow]
DTYPE = torch.bfloat16
TOL = 5e-2
QUESTIONS = ["What is 2+2?", "Write a long poem about the sea.", "Name three colours."]


# --- the model ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def model_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ~14M-parameter random Llama (4 layers, GQA 4/2 heads) saved as bf16 safetensors, with
    the embedded model's tokenizer (or that of the folder `CLAWRL_TOKENIZER_DIR` names: a GPU
    machine without the package registry has no embedded model to convert)."""
    named = os.environ.get("CLAWRL_TOKENIZER_DIR")
    tokenizer_dir = Path(named) if named else request.getfixturevalue("embedded_model").path
    out = tmp_path_factory.mktemp("random-llama")
    shape = LlamaShape(
        hidden=256, layers=4, heads=4, kv_heads=2, head_dim=64, intermediate=704, vocab=49152
    )
    save_random_llama(out, shape.params, tokenizer_dir, device=DEVICE, dtype=DTYPE, shape=shape)
    return out


def fresh(model_dir: Path) -> tuple[Any, Any]:
    """A new copy on the device through the app's own loader (adapters wrap it in place)."""
    model, tok = load_model(
        ResolvedModel(model_dir, "local", model_dir.name, 8192), dtype="bfloat16", device=DEVICE
    )
    assert next(model.parameters()).device == torch.device(DEVICE)
    return model, tok


@pytest.fixture(scope="module")
def adapter_dir(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A saved PEFT LoRA adapter with non-zero B (init_lora_weights=False): it changes answers."""
    from peft import LoraConfig, get_peft_model

    model, _ = fresh(model_dir)
    torch.manual_seed(1)
    cfg = LoraConfig(r=8, lora_alpha=16, target_modules=LORA_TARGETS, init_lora_weights=False)
    out = tmp_path_factory.mktemp("adapter")
    get_peft_model(model, cfg).save_pretrained(str(out))
    return out


def prompts(tok: Any) -> list[list[int]]:
    fmt = ChatFormatter(tok)
    return [fmt.render([{"role": "user", "content": q}]) for q in QUESTIONS]


def forward_logprobs(model: Any, prompt: list[int], response: list[int]) -> torch.Tensor:
    """(T, V) float32 log-probs at the positions that predict `response` (one plain forward)."""
    ids = torch.tensor(
        [prompt + response], dtype=torch.long, device=next(model.parameters()).device
    )
    with torch.no_grad():
        logits = model(input_ids=ids, use_cache=False).logits[0]  # (L, V)
    start = len(prompt) - 1
    return torch.log_softmax(logits[start : start + len(response)].float(), dim=-1).cpu()


def picked(logp_TV: torch.Tensor, ids: list[int]) -> list[float]:
    return logp_TV.gather(-1, torch.tensor(ids).unsqueeze(-1)).squeeze(-1).tolist()


# --- the torch backend ----------------------------------------------------------------------
def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def collect(
    be: TorchBackend, ids: list[int], n: int, temperature: float = 0.0, **kw: Any
) -> tuple[list[TokenOut], Finished]:
    params = SamplingParams(n, temperature=temperature, seed=kw.pop("seed", None))
    toks: list[TokenOut] = []
    async for ev in be.generate(GenerationRequest("t", ids, params, **kw)):
        if isinstance(ev, TokenOut):
            toks.append(ev)
        else:
            return toks, ev
    raise AssertionError("stream ended without Finished")


def backend(model: Any, tok: Any, merge_lora: bool = False) -> TorchBackend:
    return TorchBackend(model, tok, model_name="rand", context_length=8192, merge_lora=merge_lora)


def test_greedy_answer_takes_the_top_token_each_step(model_dir: Path) -> None:
    model, tok = fresh(model_dir)
    p = prompts(tok)[0]

    async def go() -> tuple[list[TokenOut], Finished, list[TokenOut]]:
        be = backend(model, tok)
        await be.start()
        try:
            toks, fin = await collect(be, p, 16)
            again, _ = await collect(be, p, 16)
        finally:
            await be.stop()
        return toks, fin, again

    toks, fin, again = run(go())
    assert fin.policy_version == "base" and fin.reason in ("length", "stop")
    assert 0 < len(toks) == fin.completion_tokens <= 16
    assert [t.token_id for t in again] == [t.token_id for t in toks]
    logp = forward_logprobs(model, p, [t.token_id for t in toks])
    for step, t in enumerate(toks):  # argmax, up to bf16 near-ties of a random model
        assert float(logp[step].max()) - float(logp[step, t.token_id]) <= TOL, step


def test_seeded_sampling_repeats_and_the_seed_matters(model_dir: Path) -> None:
    model, tok = fresh(model_dir)
    p = prompts(tok)[1]

    async def go() -> list[list[int]]:
        be = backend(model, tok)
        await be.start()
        try:
            out = []
            for seed in (7, 7, 8):
                toks, _ = await collect(be, p, 12, temperature=1.0, seed=seed)
                out.append([t.token_id for t in toks])
        finally:
            await be.stop()
        return out

    first, second, other = run(go())
    assert len(first) == 12 and first == second
    assert other != first


def test_score_reproduces_behaviour_logprobs(model_dir: Path) -> None:
    model, tok = fresh(model_dir)
    p = prompts(tok)[2]

    async def go() -> tuple[list[TokenOut], list[float]]:
        be = backend(model, tok)
        await be.start()
        try:
            toks, _ = await collect(be, p, 12, temperature=1.0, seed=3)
            scored = await be.score(p, [t.token_id for t in toks])
        finally:
            await be.stop()
        return toks, scored

    toks, scored = run(go())
    assert len(scored) == len(toks) == 12
    assert scored == pytest.approx([t.logprob for t in toks], abs=TOL)
    assert picked(
        forward_logprobs(model, p, [t.token_id for t in toks]), [t.token_id for t in toks]
    ) == pytest.approx(scored, abs=TOL)


def test_score_topk_returns_the_models_top_tokens(model_dir: Path) -> None:
    model, tok = fresh(model_dir)
    p, response = prompts(tok)[0], prompts(tok)[1][-10:]

    async def go() -> tuple[list[list[int]], list[list[float]]]:
        be = backend(model, tok)
        await be.start()
        try:
            return await be.score_topk(p, response, 5)  # type: ignore[no-any-return]
        finally:
            await be.stop()

    ids_TK, vals_TK = run(go())
    assert len(ids_TK) == len(vals_TK) == len(response)
    assert all(len(r) == 5 for r in ids_TK)
    assert all(r == sorted(r, reverse=True) for r in vals_TK)
    ref = forward_logprobs(model, p, response)
    for t in range(len(response)):
        assert picked(ref[t : t + 1].expand(5, -1), ids_TK[t]) == pytest.approx(vals_TK[t], abs=TOL)
        assert vals_TK[t][0] == pytest.approx(float(ref[t].max()), abs=TOL)


# --- LoRA versions --------------------------------------------------------------------------
def peft_reference(model_dir: Path, adapter_dir: Path) -> Any:
    from peft import PeftModel

    base, _ = fresh(model_dir)
    return PeftModel.from_pretrained(base, str(adapter_dir)).eval()


@pytest.mark.parametrize("merge_lora", [False, True], ids=["peft", "merged"])
def test_lora_version_served_pinned_matches_peft(
    model_dir: Path, adapter_dir: Path, merge_lora: bool
) -> None:
    """An adapter loaded as v1 answers pinned requests; its scores match peft's; base is intact."""
    model, tok = fresh(model_dir)
    p = prompts(tok)[0]

    async def go() -> dict[str, Any]:
        be = backend(model, tok, merge_lora=merge_lora)
        await be.start()
        try:
            await be.load_adapter("v1", adapter_dir)
            v1, v1_fin = await collect(be, p, 10, version="v1")
            base, base_fin = await collect(be, p, 10, version="base")
            ids = [t.token_id for t in v1]
            return dict(
                v1=v1,
                v1_fin=v1_fin,
                base_fin=base_fin,
                v1_score=await be.score(p, ids, "v1"),
                base_score=await be.score(p, ids),
            )
        finally:
            await be.stop()

    r = run(go())
    assert r["v1_fin"].policy_version == "v1" and r["base_fin"].policy_version == "base"
    ids = [t.token_id for t in r["v1"]]
    assert r["v1_score"] == pytest.approx([t.logprob for t in r["v1"]], abs=TOL)
    ref = picked(forward_logprobs(peft_reference(model_dir, adapter_dir), p, ids), ids)
    assert r["v1_score"] == pytest.approx(ref, abs=TOL)
    assert r["base_score"] != pytest.approx(r["v1_score"], abs=TOL), "the adapter must matter"


def test_merged_copy_lives_on_the_device_and_matches_peft(
    model_dir: Path, adapter_dir: Path
) -> None:
    model, tok = fresh(model_dir)
    merged = merged_copy(model, adapter_dir)
    assert merged is not None
    for name, t in [*merged.named_parameters(), *merged.named_buffers()]:
        assert t.device == torch.device(DEVICE), name
    assert {t.dtype for t in merged.parameters()} == {DTYPE}
    p, response = prompts(tok)[0], prompts(tok)[2][-12:]
    got = picked(forward_logprobs(merged, p, response), response)
    ref = picked(forward_logprobs(peft_reference(model_dir, adapter_dir), p, response), response)
    base = picked(forward_logprobs(model, p, response), response)
    assert got == pytest.approx(ref, abs=TOL)
    assert base != pytest.approx(ref, abs=TOL), "the merge must change the weights"


# --- a trainer step -------------------------------------------------------------------------
def train_items(tok: Any) -> list[TrainItem]:
    """Two samples, rewarded -1 and +1, the first with a teacher (combine uses both signals)."""
    items = []
    for k, (prompt, answer) in enumerate(
        [(QUESTIONS[0], "Four, of course, it is four."), (QUESTIONS[2], "Red, green, blue.")]
    ):
        p = ChatFormatter(tok).render([{"role": "user", "content": prompt}])
        r = list(tok(answer, add_special_tokens=False)["input_ids"])
        old = [-10.0 + 0.1 * i for i in range(len(r))]
        teacher = [x + 0.5 for x in old] if k == 0 else None
        items.append(TrainItem(k, "s", p, r, old, 1.0, (-1.0, 1.0)[k], True, teacher, "base"))
    return items


def two_steps(model: Any, tok: Any, method: str = "combine") -> dict[str, float]:
    """Two optimizer steps the way the trainer takes them; returns the last loss stats."""
    items = train_items(tok)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.0)
    stats: dict[str, float] = {}
    for _ in range(2):
        opt.zero_grad(set_to_none=True)
        out = response_logprobs(model, items, DEVICE)
        assert out.logprobs_BT.device == torch.device(DEVICE)
        adv_B = rl_advantages(out.rewards_B, out.has_reward_B, "ema", None)
        result = OBJECTIVES[method](out.loss_batch(), LossConfig(), adv_B)
        assert torch.isfinite(result.loss)
        result.loss.backward()
        opt.step()
        stats = result.stats
    return stats


def lora(model: Any) -> Any:
    from peft import LoraConfig, get_peft_model

    cfg = LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=LORA_TARGETS)
    return get_peft_model(model, cfg)


def test_lora_trainer_step_changes_every_lora_parameter(model_dir: Path) -> None:
    model, tok = fresh(model_dir)
    peft_model = lora(model)
    peft_model.train()
    before = {n: p.detach().clone() for n, p in peft_model.named_parameters() if p.requires_grad}
    assert before and all("lora_" in n for n in before)
    stats = two_steps(peft_model, tok)
    after = dict(peft_model.named_parameters())
    unchanged = [n for n, p in before.items() if torch.equal(p, after[n].detach())]
    assert unchanged == [], f"{len(unchanged)} LoRA tensors did not change"
    assert all(p.device == torch.device(DEVICE) for p in after.values())
    assert stats["tokens"] > 0


@pytest.mark.skipif(
    importlib.util.find_spec("bitsandbytes") is None, reason="bitsandbytes is not installed"
)
@pytest.mark.skipif(
    not DEVICE.startswith("cuda"), reason="4-bit QLoRA needs CUDA (the trainer refuses it on CPU)"
)
def test_qlora_loads_in_4bit_and_steps(model_dir: Path) -> None:
    import bitsandbytes as bnb

    from clawrl_app.engine.training.trainer import load_4bit

    base, tok = load_4bit(model_dir)
    four_bit = [m for m in base.modules() if isinstance(m, bnb.nn.Linear4bit)]
    assert four_bit, "the base model's linear layers are 4-bit"
    peft_model = lora(base)
    peft_model.train()
    before = {n: p.detach().clone() for n, p in peft_model.named_parameters() if p.requires_grad}
    two_steps(peft_model, tok)
    after = dict(peft_model.named_parameters())
    assert all(not torch.equal(p, after[n].detach()) for n, p in before.items())


@pytest.mark.skipif(
    importlib.util.find_spec("bitsandbytes") is None, reason="bitsandbytes is not installed"
)
@pytest.mark.skipif(
    not DEVICE.startswith("cuda"), reason="4-bit QLoRA needs CUDA (the trainer refuses it on CPU)"
)
def test_qlora_trainer_computes_what_the_served_nf4_base_computes(model_dir: Path) -> None:
    """The publisher's canary on CUDA: the 4-bit trainer's log-probs and the served
    dequantized-NF4 base's differ by less than the GPU tolerance (0.05). peft's fp32 upcast
    of the unquantized weights made them 0.109 apart on an H200: every checkpoint refused."""
    from clawrl_app.engine.backends.pytorch.nf4_base import dequantize_linears, load_nf4
    from clawrl_app.engine.training.trainer import load_4bit

    ids = torch.arange(100, 164, device=DEVICE).unsqueeze(0)

    def lps(model: Any) -> torch.Tensor:
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, :-1].float()
        return torch.log_softmax(logits, -1).gather(-1, ids[0, 1:, None])[:, 0]

    trainer, _ = load_4bit(model_dir)
    served = load_nf4(model_dir, DEVICE, torch.bfloat16)
    dequantize_linears(served, torch.bfloat16)
    gap = (lps(trainer) - lps(served)).abs().max().item()
    print(f"QLoRA trainer vs served NF4 base on {DEVICE}: max log-prob gap {gap:.2e}")
    assert gap <= 0.05


# --- the whole engine -----------------------------------------------------------------------
def test_engine_answers_the_openai_client(model_dir: Path, tmp_path: Path) -> None:
    """The whole engine (endpoint, torch backend, trainer process on) as `clawrl-app serve`
    builds it, on the random model: the first chat request must answer (on an H100 it
    hung), streamed and not."""
    import openai

    env = {
        "CLAWRL_MODEL__PATH": str(model_dir),
        "CLAWRL_SERVER__PORT": "0",
        "CLAWRL_HARDWARE__BACKEND": "torch",
        "CLAWRL_JUDGE__BACKEND": "heuristic",
    }
    running = start_engine(tmp_path / "home", env)
    try:
        client = openai.OpenAI(base_url=running.url, api_key="x", max_retries=0, timeout=120)
        msgs: Any = [{"role": "user", "content": "Hello!"}]
        r = client.chat.completions.create(model="clawrl", messages=msgs, max_tokens=8)
        assert r.usage is not None and r.usage.completion_tokens > 0
        assert r.model == "clawrl-base" and r.choices[0].message.content is not None
        stream = client.chat.completions.create(
            model="clawrl",
            messages=msgs,
            max_tokens=8,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = list(stream)
        usage = [c.usage for c in chunks if c.usage is not None]
        assert usage and usage[0].completion_tokens > 0
        plan = running.engine.plan
        if DEVICE.startswith("cuda"):  # the plan put serving on the GPU
            assert plan.serve_devices and plan.backend == "torch"
    finally:
        running.stop()
