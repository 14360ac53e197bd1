"""The training process's configuration (torch-free, so the engine can build it cheaply)."""

from __future__ import annotations

from dataclasses import dataclass

TOPK_METHODS = frozenset({"topk-opd", "combine-topk", "combine-stop"})
"""Methods that train on the teacher's top-k distribution (the judge records it)."""
STOP_METHODS = frozenset({"combine-stop"})
"""Methods whose teacher term is the stop bin alone (`policy_forward.stop_bins`)."""


@dataclass
class TrainerConfig:
    """Everything the training process needs; written to JSON by the engine."""

    store_path: str
    checkpoints_dir: str
    model_path: str
    method: str = "combine"
    mode: str = "lora"
    batch_size: int = 4
    lr: float = 1e-4
    updates_per_batch: int = 1
    lora_rank: int = 16
    lora_alpha: int = 32
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    signal_norm: float = 0.0
    """> 0: each step at lr * min(1, gradient norm / this) (step_size.signal_lr); 0 = off."""
    token_budget: int = 4096
    max_staleness: int = 8
    baseline: str = "batch_mean"
    credit_accepted: bool = False
    replay_demos: int = 0
    replay_uses: int = 2
    """Each step also trains up to replay_demos teacher answers of earlier steps again,
    each at most replay_uses more times (replay.py)."""
    """A batch of acceptances only, after worse answers, is credited (advantages.accepted_baseline)."""
    w_rl: float = 1.0
    w_opd: float = 1.0
    """Weights of the reward and teacher terms (combine, combine-topk; LossConfig)."""
    opd_center: bool = False
    """Center the teacher gap on the batch's mean (LossConfig.opd_center)."""
    kl_coef: float = 0.0
    """Weight of the k3 KL to the base model (adapter off) on the sampled tokens; LoRA and
    QLoRA only (full fine-tuning keeps no base copy)."""
    anchor_coef: float = 0.0
    """> 0: each step also holds KL(base || policy) on the base's answers to the anchor
    prompts, times this (anchor.py); LoRA and QLoRA only."""
    anchor_items: int = 8
    anchor_tokens: int = 128
    anchor_free_stop: bool = True
    """The anchor leaves the end-of-turn tokens out of its KL (anchor.forward_kl)."""
    """Anchor sequences per step; the length of the base's answers to them."""
    repeat_ngram: int = 0
    """> 0: tokens repeating an earlier phrase of this many tokens in their answer are never
    pushed up (repeats.py); 0 = off."""
    repeat_penalty: float = 0.0
    """... and get the advantage min(A, 0) - this."""
    tis_cap: float = 0.0
    """> 0: truncated importance sampling against the served log-probs (losses.tis_weights)."""
    approved_only: bool = False
    resume_from: str = "latest"
    control_file: str | None = None
    poll_s: float = 1.0
    max_steps: int = 0
    seed: int = 0
    device: str = "cpu"
    gradient_checkpointing: bool = False
    """Recompute each decoder layer in backward instead of keeping its activations (the
    plan's choice, `Plan.gradient_checkpointing`): less memory, about one more forward."""
    custom_loss_path: str | None = None
    serving_flag_file: str | None = None
    """Shared flag raised while the endpoint answers (CPU-only: the step pauses then)."""
    yield_max_s: float = 0.0
    """Most seconds a step may pause for serving (0 = never)."""
    owner_lease: str | None = None
    """The engine's lease file (engine/trainer_lease.py): the trainer stops when it is free
    or names another engine; None = no owner check (a trainer run by hand or a test)."""
    owner_token: str | None = None
    """The token of the engine start that launched this trainer."""
    sharding: str = "auto"
    """How several ranks hold the model: ddp (a copy each), fsdp (full fine-tuning sharded),
    none (one process); auto picks by mode and rank count (`sharding.choose_sharding`). The
    plan's `train_sharding` is written here."""
    lock_file: str | None = None
    """Held by the trainer process while it lives: a new trainer waits for an old one."""


def tis_cap(correction: str, cap: float, backend: str) -> float:
    """The trainer's importance-weight cap: `cap` where the served log-probs come from
    other kernels than the trainer's (llama.cpp; or when asked), else 0 (off)."""
    on = correction == "tis" or (correction == "auto" and backend == "llamacpp")
    return max(cap, 1.0) if on else 0.0
