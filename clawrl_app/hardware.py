"""How serving, judge and trainer share this machine's GPUs (or its CPU and RAM).

`plan()` is pure, so every GPU layout can be tested on a laptop: what the machine has comes
from `gpu_inventory.inventory()` (re-exported here). The memory estimates (memory_model.py)
are deliberately simple, and every number the plan relies on is shown by `clawrl-app doctor`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal, cast

from clawrl_app.config import HardwareSettings, Settings
from clawrl_app.gpu_inventory import GPU as GPU
from clawrl_app.gpu_inventory import Inventory as Inventory
from clawrl_app.gpu_inventory import inventory as inventory
from clawrl_app.gpu_inventory import parse_nvidia_smi as parse_nvidia_smi
from clawrl_app.gpu_inventory import visible_gpus as visible_gpus
from clawrl_app.memory_model import (
    GIB,
    MemoryLine,
    ModelInfo,
    PlanError,
    TrainMode,
    TrainSharding,
    launch_name,
    merged_lora_serving,
    prefix_cache_budget,
    serve_need,
    spare_gib,
    train_need,
    train_sharding,
)

OVERHEAD_GIB = 2.0  # per process per GPU: CUDA context, cuBLAS/NCCL workspace, CUDA graphs
CPU_RESERVE_GIB = 2.0  # RAM left to the OS and the Python/torch runtime
SMALL_POLICY_B = 1.0  # below this a policy is too weak to judge its own turns

Backend = Literal["torch", "sglang", "llamacpp"]
JudgeBackend = Literal["policy", "openai", "heuristic"]


@dataclass(frozen=True)
class Plan:
    """Where serving, judge and trainer run, how the trainer trains, and why."""

    backend: Backend
    serve_devices: tuple[int, ...]
    judge_devices: tuple[int, ...]
    train_devices: tuple[int, ...]
    train_mode: TrainMode
    judge_backend: JudgeBackend
    judge_shares_serving: bool
    colocated: bool
    sglang_mem_fraction: float | None
    default_batch_size: int
    memory: tuple[MemoryLine, ...]
    reasons: tuple[str, ...]
    default_lr: float = 1e-4
    """AdamW learning rate when train.lr is empty (see `default_lr`)."""
    lr: float | None = None
    """The learning rate set in train.lr (None: the trainer uses `default_lr`)."""
    batch_size: int | None = None
    """The batch size set in train.batch_size (None: `default_batch_size`)."""
    merge_lora: bool = False
    """Torch backend: serve each LoRA version as merged weights (base speed, more memory)."""
    gradient_checkpointing: bool = False
    """Whether the trainer recomputes layers in backward (see `checkpointing_choices`)."""
    train_sharding: TrainSharding = "none"
    token_budget: int | None = None
    """The trainer's micro-batch in tokens when the plan had to lower train.token_budget to
    fit (`lowered_budgets`); None: train.token_budget as set."""
    """How the trainer is launched on `train_devices` (`memory_model.train_sharding`): one
    device, DDP (LoRA/QLoRA: a full copy per GPU) or FSDP (full: weights, grads and AdamW
    sharded); the memory lines are computed for this launch."""
    prefix_cache_mb: int = 0
    """Torch backend: default bound (MiB) of the prefix KV cache (`prefix_cache_budget`)."""


_Check = tuple[MemoryLine, str]  # the line and the sentence that explains it
_Layout = tuple[tuple[GPU, ...], tuple[GPU, ...], tuple[GPU, ...]]  # serving, judge, training
_Counts = tuple[int, int, int]  # train, serve, judge GPU counts
_CPU = -1  # index of the pseudo-device that stands for RAM


def _devs(indices: Sequence[int]) -> str:
    if not indices or indices[0] == _CPU:
        return "cpu"
    return "cuda:" + ",".join(str(i) for i in indices)


def _fit(
    model: ModelInfo, mode: TrainMode, layout: _Layout, dtype: int, tokens: int, gc: bool
) -> list[_Check]:
    """Check each role; roles sharing a card (1 GPU, CPU) get what the earlier ones left.
    Serving holds `dtype` weights; the trainer loads its own with dtype auto (models.py:
    bf16 on CUDA, fp32 on the CPU), a micro-batch of `tokens` tokens, checkpointing `gc`."""
    cpu = layout[0][0].index == _CPU
    overhead = 0.0 if cpu else OVERHEAD_GIB
    used: dict[int, float] = {}
    checks = []
    for role, group in zip(("serving", "judge", "training"), layout, strict=True):
        if not group:
            continue
        if role == "training":
            need = train_need(model, mode, len(group), 4 if cpu else 2, overhead, gc, tokens)
        else:
            need = serve_need(model, len(group), dtype, overhead)
        have = max(0.0, min(g.memory_gib - used.get(g.index, 0.0) for g in group))
        for g in group:
            used[g.index] = used.get(g.index, 0.0) + need.gib
        line = MemoryLine(role, _devs([g.index for g in group]), round(need.gib, 2), round(have, 2))
        verdict = "fits" if line.fits else "does NOT fit"
        head = f"{role} on {line.device} needs {line.need_gib:.1f} GiB"
        if need.launch:  # the trainer: its launch, then one term per line
            terms = "".join(f"\n  {term}" for term in need.parts.splitlines())
            why = f"{head} of {have:.1f} ({need.launch}): {verdict}.{terms}"
        else:
            why = f"{head} ({need.parts}) of {have:.1f}: {verdict}."
        checks.append((line, why))
    return checks


def _judge_backend(model: ModelInfo, settings: Settings, reasons: list[str]) -> JudgeBackend:
    judge = settings.judge
    if judge.model_path:  # upstream's PRM_MODEL_PATH: say so rather than pretend to use it
        reasons.append(
            f"Judge: judge.model_path ({judge.model_path}) is not used: a separate judge or "
            "teacher model is not supported; they run on the served model. To judge with "
            "another model, serve it and set judge.backend = openai and judge.openai_url."
        )
    if judge.backend == "openai" and not judge.openai_url:
        raise PlanError("judge.backend = openai needs judge.openai_url (and judge.openai_model).")
    if judge.backend != "auto":
        reasons.append(f"Judge: {judge.backend}, as set in judge.backend.")
        return cast(JudgeBackend, judge.backend)
    if model.params_b < SMALL_POLICY_B:
        reasons.append(
            f"Judge: heuristic, because a {model.params_b:.2f}B policy is too weak to judge turns "
            "reliably (set judge.backend = openai to use an external judge)."
        )
        return "heuristic"
    reasons.append("Judge: the policy's base weights with the adapter off (upstream's default).")
    return "policy"


def sglang_python(inv: Inventory, hw: HardwareSettings) -> str | None:
    """The interpreter that runs SGLang: `hardware.sglang_python`, else the environment
    `make run` installed; None: the app's own (when sglang imports there)."""
    return hw.sglang_python or inv.sglang_installed


def _choose_backend(inv: Inventory, hw: HardwareSettings, n: int, reasons: list[str]) -> Backend:
    have_sglang = inv.sglang_available or sglang_python(inv, hw) is not None
    install = "run `make run` (it installs SGLang on NVIDIA machines) or set hardware.sglang_python"
    if n == 0 and hw.backend == "sglang":
        raise PlanError("hardware.backend = sglang needs a GPU and none is in use; use torch/auto.")
    if n == 0:
        reasons.append("No GPU in use: the torch backend serves and trains on the CPU.")
        return "torch"
    if hw.backend == "sglang" and not have_sglang:
        raise PlanError(f"hardware.backend = sglang but the sglang package is missing: {install}.")
    if hw.backend == "torch":
        reasons.append("Backend: torch, as set in hardware.backend (in-process transformers).")
    elif have_sglang:
        where = (
            "hardware.sglang_python"
            if hw.sglang_python
            else "the environment `make run` installed"
            if inv.sglang_installed
            else "this environment"
        )
        reasons.append(f"Backend: SGLang serves on the GPU (installed in {where}; fastest).")
        return "sglang"
    else:
        reasons.append(f"Backend: torch, as SGLang is not installed; for faster serving {install}.")
    return "torch"


def _check_counts(hw: HardwareSettings, visible: int, judge: JudgeBackend) -> None:
    counts = {"ACTOR_GPUS": hw.actor_gpus, "ROLLOUT_GPUS": hw.rollout_gpus, "PRM_GPUS": hw.prm_gpus}
    for key, value in {"NUM_GPUS": hw.num_gpus, **counts}.items():
        if value is not None and value < 0:
            raise PlanError(f"{key}={value} is negative; give 0 or more GPUs.")
    if hw.num_gpus is not None and hw.num_gpus > visible:
        raise PlanError(f"NUM_GPUS={hw.num_gpus} > {visible} GPUs visible; lower NUM_GPUS.")
    n = visible if hw.num_gpus is None else hw.num_gpus
    asked = {k: v for k, v in counts.items() if v is not None}
    terms = " + ".join(f"{k}={v}" for k, v in asked.items())
    if n == 0 and any(asked.values()):
        raise PlanError(f"{terms} asks for GPUs but none is in use; unset it or raise NUM_GPUS.")
    if n == 1 and (hw.prm_gpus or any(v != 1 for k, v in asked.items() if k != "PRM_GPUS")):
        raise PlanError(
            f"{terms} on 1 GPU: serving and trainer share the card, the judge shares the serving "
            "engine; use ACTOR_GPUS=1, ROLLOUT_GPUS=1, PRM_GPUS=0 or unset them."
        )
    if n > 1 and sum(asked.values()) > n:
        raise PlanError(f"{terms} = {sum(asked.values())} > {n} GPUs available.")
    if hw.prm_gpus and judge != "policy":
        raise PlanError(
            f"PRM_GPUS={hw.prm_gpus} reserves cards for a judge model but the judge "
            f"is {judge}; set PRM_GPUS=0 or judge.backend = policy."
        )


def _splits(n: int, mode: TrainMode, judge_own: bool, hw: HardwareSettings) -> list[_Counts]:
    """(train, serve, judge) GPU counts, preferred first; explicit counts are kept."""
    default_serve = 2 if mode == "full" and n >= 8 else 1  # upstream 8 GPUs: 4/2/2
    tp_sizes = [default_serve] + [p for p in (1, 2, 4, 8, 16) if p < n and p != default_serve]
    out = []
    for s in [hw.rollout_gpus] if hw.rollout_gpus is not None else tp_sizes:
        for j in [hw.prm_gpus] if hw.prm_gpus is not None else ([s, 0] if judge_own else [0]):
            # Full fine-tuning shards over every card left; LoRA needs none (upstream: 2/1/1).
            t = n - s - j if mode == "full" else min(2, n - s - j)
            t = hw.actor_gpus if hw.actor_gpus is not None else t
            if t >= 1 and s >= 1 and t + s + j <= n:
                out.append((t, s, j))
    return out


def _layouts(
    gpus: Sequence[GPU], mode: TrainMode, judge: JudgeBackend, hw: HardwareSettings, ram_gib: float
) -> list[_Layout]:
    """Candidate placements, preferred first: RAM, one shared card, or disjoint card groups."""
    if not gpus:
        cpu = GPU(_CPU, "cpu", ram_gib - CPU_RESERVE_GIB)
        return [((cpu,), (), (cpu,))]
    if len(gpus) == 1:
        return [((gpus[0],), (), (gpus[0],))]
    out = []
    for t, s, j in _splits(len(gpus), mode, judge == "policy", hw):
        out.append((tuple(gpus[t : t + s]), tuple(gpus[t + s : t + s + j]), tuple(gpus[:t])))
    if not out:
        raise PlanError(
            f"The GPU counts asked for leave no GPU for serving or for training out of {len(gpus)}."
        )
    return out


def checkpointing_choices(asked: str) -> tuple[bool, ...]:
    """Gradient-checkpointing settings the plan tries, preferred first.

    `auto` tries without first: recomputing every layer costs about one more forward per
    step, worth paying only where the activations of a micro-batch do not fit otherwise
    (a CPU with ample RAM never needs it); `on` / `off` are taken as asked.
    """
    choices = {"auto": (False, True), "on": (True,), "off": (False,)}
    if asked not in choices:
        raise PlanError(f"train.gradient_checkpointing = {asked!r}: use auto, on or off.")
    return choices[asked]


MIN_TOKEN_BUDGET = 1024
"""The smallest micro-batch (tokens) the plan lowers train.token_budget to; a sample longer
than the budget is still trained, alone in its micro-batch."""


def lowered_budgets(tokens: int) -> list[int]:
    """The asked micro-batch, then halves of it down to MIN_TOKEN_BUDGET: the plan's last
    resort before refusing (activations shrink with it; the global batch does not)."""
    out = [tokens]
    while out[-1] // 2 >= MIN_TOKEN_BUDGET:
        out.append(out[-1] // 2)
    return out


def _fit_lowering(
    model: ModelInfo,
    layouts: Mapping[TrainMode, list[_Layout]],
    dtype: int,
    tokens: int,
    gcs: Sequence[bool],
) -> tuple[TrainMode, _Layout, bool, list[_Check], dict[str, list[str]], int]:
    """`_first_fit` mode by mode, each at the asked micro-batch and then at each lower budget
    (a smaller micro-batch costs a little speed; the next mode, QLoRA, costs precision);
    the refusal of the asked budget, naming every mode, when nothing fits."""
    tried: dict[str, list[str]] = {}
    for mode, candidates in layouts.items():
        for budget in lowered_budgets(tokens):
            try:
                found = _first_fit(model, {mode: candidates}, dtype, budget, gcs)
            except PlanError:
                continue
            return (*found[:4], tried, budget)
        # why it failed: its preferred layout at the asked budget, least memory-hungry choice
        tried[mode] = [why for _, why in _fit(model, mode, candidates[0], dtype, tokens, gcs[-1])]
    _first_fit(model, layouts, dtype, tokens, gcs)  # raises the refusal with the way out
    raise AssertionError("a layout fits at the asked budget but was not found")


def _first_fit(
    model: ModelInfo,
    layouts: Mapping[TrainMode, list[_Layout]],
    dtype: int,
    tokens: int,
    gcs: Sequence[bool],
) -> tuple[TrainMode, _Layout, bool, list[_Check], dict[str, list[str]]]:
    """The first mode, layout and checkpointing choice (in order of preference: a layout is
    worth more than skipping checkpointing) where every role fits.

    Also returns, per mode tried, the checks of its preferred layout with the last
    checkpointing choice (the smallest need), to explain a fallback.
    """
    tried: dict[str, list[str]] = {}
    for mode, candidates in layouts.items():
        for layout in candidates:
            for gc in gcs:
                checks = _fit(model, mode, layout, dtype, tokens, gc)
                if all(line.fits for line, _ in checks):
                    return mode, layout, gc, checks, tried
            tried.setdefault(mode, [why for _, why in checks])
    first = next(iter(layouts.values()))[0][0]  # the serving devices of the preferred layout
    if first[0].index == _CPU:
        ram = first[0].memory_gib + CPU_RESERVE_GIB
        where = f"{ram:.1f} GiB RAM ({CPU_RESERVE_GIB:.0f} kept for the system)"
        way_out = ["a smaller model (the embedded SmolLM2-135M runs anywhere) or a GPU"]
    else:
        where, way_out = f"the GPUs ({first[0].memory_gib:.1f} GiB each)", ["a smaller model"]
        # FSDP shards full fine-tuning over more GPUs; DDP keeps a full copy on each
        way_out.append("more GPUs" if "full" in layouts else "GPUs with more memory")
        if "full" in layouts or "qlora" not in layouts:
            way_out.append("train.mode = " + ("lora or qlora" if "full" in layouts else "qlora"))
    if True not in gcs:
        way_out.append("train.gradient_checkpointing = auto")
    way_out.append(f"a lower train.token_budget (activations grow with its {tokens} tokens)")
    why = "\n".join(dict.fromkeys(w for ws in tried.values() for w in ws))
    raise PlanError(
        f"{model.name} ({model.params_b:.2f}B) does not fit {where} for {'/'.join(layouts)}. "
        f"Use {', '.join(way_out[:-1])}, or {way_out[-1]}.\n{why}"
    )


def _mem_fraction(checks: Sequence[_Check], have: float, asked: float | None) -> tuple[float, str]:
    """SGLang's --mem-fraction-static when it shares its card with the trainer."""
    serve, train = checks[0][0].need_gib, checks[-1][0].need_gib
    static = serve - OVERHEAD_GIB  # weights + KV live in SGLang's static pool
    low = math.ceil(static / have * 1000) / 1000  # SGLang takes any float; keep 3 decimals
    high = math.floor((have - OVERHEAD_GIB - train) / have * 1000) / 1000
    # Half of the spare memory buys more KV cache, half stays as trainer headroom.
    fraction = asked or min(high, max(low, math.floor((low + high) * 500) / 1000))
    if not low <= fraction <= high:
        raise PlanError(
            f"--mem-fraction-static {fraction} gives SGLang {fraction * have:.1f} GiB (needs "
            f"{static:.1f}) and the trainer {have * (1 - fraction) - OVERHEAD_GIB:.1f} (needs "
            f"{train:.1f}); it must lie in [{low}, {high}] (unset hardware.sglang_mem_fraction)."
        )
    # SGLang sizes its KV pool from the memory free when it starts: start it before the trainer.
    why = f"SGLang --mem-fraction-static {fraction:g}: weights + KV get {fraction * have:.1f}"
    return (
        fraction,
        f"{why} GiB, the trainer {have * (1 - fraction) - OVERHEAD_GIB:.1f} (start SGLang first).",
    )


def _mode_reason(mode: TrainMode, asked: str, tried: Mapping[str, list[str]], gpu: bool) -> str:
    if asked != "auto":
        return f"Training: {mode}, as set in train.mode."
    if not gpu:
        return "Training: LoRA (train.mode = auto; full only when asked; QLoRA needs CUDA)."
    if mode == "lora":
        return "Training: LoRA on a bf16 base (train.mode = auto; QLoRA only when it does not fit)."
    lora = "\n".join(w for w in tried["lora"] if "NOT" in w)
    return f"Training: QLoRA (4-bit base): no layout fits bf16 LoRA, e.g. {lora}"


def _placement_reasons(p: Plan, gpus: Sequence[GPU], cpu_count: int) -> list[str]:
    if not gpus:  # load_model's dtype auto: float32 on the CPU, whatever serving uses
        return [f"Trainer on the CPU ({cpu_count} cores), fp32 weights."]
    if len(gpus) == 1:
        return [f"1 GPU ({gpus[0].name}): serving and trainer colocated on cuda:{gpus[0].index}."]
    shared = "the serving engine" if p.judge_shares_serving else f"no GPU ({p.judge_backend})"
    judge = _devs(p.judge_devices) if p.judge_devices else shared
    reasons = [
        f"Split: trainer {_devs(p.train_devices)}, serving {_devs(p.serve_devices)} (tensor "
        f"parallel {len(p.serve_devices)}), judge on {judge}; disjoint cards.",
        _launch_reason(p),
    ]
    used = set(p.train_devices + p.serve_devices + p.judge_devices)
    if idle := [g.index for g in gpus if g.index not in used]:
        lora = (
            " (LoRA needs no sharding; upstream runs it on 2/1/1)" if p.train_mode != "full" else ""
        )
        reasons.append(
            f"{_devs(idle)} stay idle{lora}: set ACTOR_GPUS / ROLLOUT_GPUS / PRM_GPUS to use them."
        )
    if p.backend == "sglang" and p.sglang_mem_fraction is None:
        reasons.append("SGLang has its cards to itself: its default --mem-fraction-static.")
    return reasons


def _launch_reason(p: Plan) -> str:
    n = len(p.train_devices)
    if p.train_sharding == "fsdp":
        return (
            f"Trainer launch: FSDP over {n} GPUs: each holds 1/{n} of the weights, grads and "
            "AdamW and gathers whole only the embeddings and head and one layer at a time."
        )
    if p.train_sharding == "ddp":
        return (
            f"Trainer launch: DDP over {n} GPUs: each holds a full copy of the model and the "
            "adapter's optimizer state, and they average the adapter's gradients."
        )
    return "Trainer launch: one GPU, no DDP or FSDP."


def plan(inv: Inventory, model: ModelInfo, settings: Settings) -> Plan:
    """Decide backend, device split, train mode and judge for this hardware; pure, no I/O.

    Raises PlanError with the numbers and a way out when nothing fits.
    """
    hw, asked, reasons = settings.hardware, settings.train.mode, list[str]()
    if hw.sglang_mem_fraction is not None and not 0 < hw.sglang_mem_fraction < 1:
        raise PlanError(f"hardware.sglang_mem_fraction = {hw.sglang_mem_fraction}: use (0, 1).")
    judge = _judge_backend(model, settings, reasons)
    _check_counts(hw, len(inv.gpus), judge)
    gpus = sorted(inv.gpus, key=lambda g: g.index)[: hw.num_gpus]
    cap = f" (NUM_GPUS={hw.num_gpus})" if hw.num_gpus is not None else ""
    reasons.insert(0, f"{len(inv.gpus)} GPU(s) visible, {len(gpus)} used{cap}.")
    backend = _choose_backend(inv, hw, len(gpus), reasons)
    if not gpus and asked == "qlora":
        raise PlanError(
            "train.mode = qlora needs CUDA (bitsandbytes 4-bit) and no GPU is in use; "
            "use train.mode = lora or full."
        )
    # auto = LoRA, falling back to QLoRA (CUDA only); full only when asked for.
    auto: tuple[TrainMode, ...] = ("lora", "qlora") if gpus else ("lora",)
    modes = (asked,) if asked != "auto" else auto
    dtype = 2 if gpus or settings.model.dtype in ("bfloat16", "float16") else 4
    layouts = {m: _layouts(gpus, m, judge, hw, inv.ram_gib) for m in modes}
    tokens, gc_asked = settings.train.token_budget, settings.train.gradient_checkpointing
    gcs = checkpointing_choices(gc_asked)
    mode, layout, gc, checks, tried, tokens = _fit_lowering(model, layouts, dtype, tokens, gcs)
    if tokens != settings.train.token_budget:
        reasons.append(
            f"Trainer micro-batch lowered to {tokens} tokens: nothing fits with "
            f"train.token_budget = {settings.train.token_budget} (the global batch is the "
            "same; it takes more micro-batches)."
        )
    reasons.append(_mode_reason(mode, asked, tried, bool(gpus)))
    fraction = hw.sglang_mem_fraction if backend == "sglang" else None
    if len(gpus) == 1 and backend == "sglang":
        have = gpus[0].memory_gib
        if (
            fraction
            and True in gcs
            and have * (1 - fraction) - OVERHEAD_GIB < checks[-1][0].need_gib
        ):
            # the asked SGLang pool leaves the trainer less than it needs: checkpoint
            gc, checks = True, _fit(model, mode, layout, dtype, tokens, True)
        fraction, why = _mem_fraction(checks, have, fraction)
        reasons.append(why)
    without = _fit(model, mode, layout, dtype, tokens, False)
    reasons.append(_checkpointing_reason(gc, gc_asked, without))
    serve, judges, train = (tuple(g.index for g in grp if g.index != _CPU) for grp in layout)
    sharding = train_sharding(mode, len(layout[2]))
    batch = 16 if gpus else 4
    lr, lr_why = default_lr(mode, bool(gpus))
    result = Plan(
        backend,
        serve,
        judges,
        train,
        mode,
        judge,
        judge_shares_serving=judge == "policy" and not judges,
        colocated=len(gpus) == 1,
        sglang_mem_fraction=fraction,
        default_batch_size=batch,
        memory=tuple(line for line, _ in checks),
        reasons=(),
        default_lr=lr,
        gradient_checkpointing=gc,
        train_sharding=sharding,
        token_budget=tokens if tokens != settings.train.token_budget else None,
    )
    merge, merge_line, merge_why = merged_lora_serving(
        backend, mode, [line for line, _ in checks], model.params_b * 1e9 * dtype / GIB, dtype
    )
    if merge and merge_line is not None:  # the copies are memory the plan must count
        result = replace(result, merge_lora=True, memory=(*result.memory, merge_line))
    reasons += _placement_reasons(result, gpus, inv.cpu_count)
    if not gpus and model.params_b >= SMALL_POLICY_B:
        reasons.append(f"A {model.params_b:.1f}B model on a CPU is slow: minutes per step.")
    reasons += [why for _, why in checks]
    if merge_why:
        reasons.append(merge_why)
    if backend == "torch":  # SGLang has its own prefix cache (radix tree) in its KV pool
        cache_mb, cache_why = prefix_cache_budget(model, spare_gib(result.memory), dtype)
        result = replace(result, prefix_cache_mb=cache_mb)
        reasons.append(cache_why)
    batch_why = "" if gpus else ": a CPU LoRA step on 8x256 tokens takes 19-70 s on 2 cores"
    batch_why = f"Default batch size {batch}{batch_why}."
    t = settings.train
    if t.batch_size is not None:
        batch_why = f"Batch size {t.batch_size}, as set in train.batch_size (default {batch})."
    if t.lr is not None:
        lr_why = f"Learning rate {t.lr:g}, as set in train.lr (default {lr:g})."
    return replace(result, lr=t.lr, batch_size=t.batch_size, reasons=(*reasons, batch_why, lr_why))


def effective_lr(plan: Plan) -> float:
    """The learning rate the trainer uses: train.lr when set, else the plan's default."""
    return plan.lr if plan.lr is not None else plan.default_lr


def effective_batch_size(plan: Plan) -> int:
    """The batch size the trainer uses: train.batch_size when set, else the plan's default."""
    return plan.batch_size if plan.batch_size is not None else plan.default_batch_size


def _checkpointing_reason(on: bool, asked: str, without: Sequence[_Check]) -> str:
    """Why the trainer does (not) recompute its layers; `without`: the checks with it off."""
    if asked != "auto":
        return f"Gradient checkpointing {asked}, as set in train.gradient_checkpointing."
    if not on:
        return (
            "Gradient checkpointing off: the trainer fits without it (it would cost about "
            "one more forward per step)."
        )
    why = " ".join(w for line, w in without if not line.fits)
    if not why:  # it fitted the card; the asked hardware.sglang_mem_fraction did not leave room
        return (
            "Gradient checkpointing on: hardware.sglang_mem_fraction leaves the trainer too little."
        )
    return f"Gradient checkpointing on, because without it {why}"


def default_lr(mode: TrainMode, gpus: bool) -> tuple[float, str]:
    """The learning rate used when train.lr is empty, and why (CPU LoRA: bench/learn.py saw
    no change after 8 steps at 1e-4, compliance 0.08 -> 0.92 at 5e-4)."""
    if mode == "full":
        return 1e-5, "Default learning rate 1e-5 (full fine-tuning)."
    if gpus:
        return 1e-4, "Default learning rate 1e-4 (LoRA)."
    return 5e-4, (
        "Default learning rate 5e-4: LoRA on a CPU takes few, small steps, and at 1e-4 "
        "32 feedback turns did not change the embedded model's behaviour (bench/learn.py)."
    )


def prefix_cache_mib(settings: Settings, plan: Plan) -> int:
    """The torch backend's prefix KV cache bound: server.prefix_cache_mb, else the plan's."""
    asked = settings.server.prefix_cache_mb
    return plan.prefix_cache_mb if asked is None else asked


def format_plan(plan: Plan) -> str:
    """Multi-line, human-readable plan for `clawrl-app doctor`."""
    judge: str = plan.judge_backend
    if plan.judge_devices or plan.judge_shares_serving:
        judge += f" on {_devs(plan.judge_devices)}" if plan.judge_devices else " (shares serving)"
    fraction, n_train = plan.sglang_mem_fraction, len(plan.train_devices)
    lines = [
        f"Backend:  {plan.backend}"
        + (f" (--mem-fraction-static {fraction:g})" if fraction else ""),
        f"Serving:  {_devs(plan.serve_devices)}",
        f"Judge:    {judge}",
        f"Trainer:  {plan.train_mode} on {_devs(plan.train_devices)}"
        + (" (colocated with serving)" if plan.colocated else "")
        + (f" ({launch_name(plan.train_sharding, n_train)})" if n_train > 1 else "")
        + f", gradient checkpointing {'on' if plan.gradient_checkpointing else 'off'}",
        f"Batch:    {effective_batch_size(plan)} samples per step "
        f"({'train.batch_size' if plan.batch_size is not None else 'default'}), "
        f"lr {effective_lr(plan):g} ({'train.lr' if plan.lr is not None else 'default'})",
        "Memory (GiB):",
        *(
            f"  {m.role:<9} {m.device:<16} need {m.need_gib:6.1f} of {m.have_gib:6.1f}"
            f"  {'ok' if m.fits else 'TOO BIG'}"
            for m in plan.memory
        ),
        "Why:",
        *(f"  - {r}".replace("\n", "\n    ") for r in plan.reasons),
    ]
    return "\n".join(lines)
