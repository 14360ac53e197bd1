"""The training process: eligible samples -> optimizer step -> checkpoint, in a loop.

Runs as its own OS process (`accelerate launch -m clawrl_app.engine.training.trainer --config F`,
started and supervised by the engine), so a crash or OOM never takes the endpoint down.
The store is the only contract: it reads eligible samples, writes metrics, registers each
checkpoint and marks the samples it consumed in one transaction. Resuming picks the last
registered checkpoint (weights, optimizer, RNG, step, baseline): no sample is trained twice.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch

from clawrl_app.engine.chat.formatter import eos_token_ids
from clawrl_app.engine.core.checkpoints import (
    STATE,
    Manifest,
    clean_temp,
    clean_unregistered,
    next_version,
    write_checkpoint,
)
from clawrl_app.engine.core.cpu_share import BusyFlag, PauseBudget, wait_while_busy
from clawrl_app.engine.store import Store
from clawrl_app.engine.training.advantages import (
    advantages_from,
    batch_baseline,
    carries_contrast,
    ema_baseline_update,
)
from clawrl_app.engine.training.anchor import Anchor, anchor_backward, base_response_logprobs
from clawrl_app.engine.training.canary import canary_logprobs
from clawrl_app.engine.training.config import STOP_METHODS, TrainerConfig
from clawrl_app.engine.training.grammar_replay import GrammarReplay
from clawrl_app.engine.training.lease import hold_trainer_lock, owner_alive
from clawrl_app.engine.training.losses import OBJECTIVES, LossConfig, needs_reward
from clawrl_app.engine.training.model_setup import LORA_TARGETS, enable_checkpointing, load_4bit
from clawrl_app.engine.training.pause_points import install_pause_points
from clawrl_app.engine.training.policy_forward import response_logprobs
from clawrl_app.engine.training.ranks import (
    Ranks,
    broadcast,
    end_rank,
    loss_scale,
    rank_share,
    sum_over_ranks,
)
from clawrl_app.engine.training.replay import DemoReplay
from clawrl_app.engine.training.sharding import (
    clip_grad_norm,
    full_state_dict,
    load_optimizer_state,
    make_accelerator,
    optimizer_state_for_save,
    prepare_model,
    resolve_sharding,
    save_full_model,
    unwrapped,
)
from clawrl_app.engine.training.step_metrics import step_metrics, weighted_totals
from clawrl_app.engine.training.step_size import set_lr, signal_lr
from clawrl_app.engine.training.train_data import (
    Skip,
    TrainItem,
    build_item,
    micro_batches,
    policy_age,
    teaches,
    with_demonstration,
)

log = logging.getLogger("clawrl.trainer")


class EngineGone(Exception):
    """The engine that started this trainer is gone (killed, or replaced by a newer one)."""


class Trainer:
    """Owns the model, the optimizer and the step counter of one training run."""

    def __init__(self, cfg: TrainerConfig) -> None:
        from clawrl_app.models import ResolvedModel, load_model

        if cfg.mode == "qlora" and not torch.cuda.is_available():
            # bitsandbytes 4-bit runs on a CPU too (the QLoRA tests use it), but slower
            # than plain LoRA there: the plan refuses it on CPU machines, and so do we
            raise SystemExit(
                "train.mode = qlora needs CUDA (bitsandbytes 4-bit); use lora or full."
            )
        self.cfg = cfg
        self.ranks = Ranks.from_env()
        main = self.ranks.main
        # Rank 0 alone holds the lock, before the store and the checkpoint folder (an old
        # trainer may still finish a step); the other ranks wait for it in the first
        # broadcast below, never on the lock (two ranks on one lock wait for each other).
        self._lock_fd = hold_trainer_lock(Path(cfg.lock_file)) if cfg.lock_file and main else None
        self.sharding = resolve_sharding(cfg.sharding, cfg.mode, self.ranks.world)
        self.accelerator = make_accelerator(self.sharding, cpu=cfg.device == "cpu")
        self.store: Store | None = Store(Path(cfg.store_path)) if main else None
        self.root = Path(cfg.checkpoints_dir)
        if self.store is not None:
            clean_temp(self.root)
        if self._lock_fd is not None and self.store is not None:  # the only trainer:
            registered = [Path(c.path) for c in self.store.list_checkpoints()]  # a leftover
            for name in clean_unregistered(self.root, registered):
                log.info("removed %s: written by a trainer killed before registering it", name)
        torch.manual_seed(cfg.seed + self.ranks.rank)
        self.step = 0
        self.baseline: float | None = None
        self.earlier: float | None = None
        """The moving mean of the rewards before this step's batch (`train.credit_accepted`)."""
        found, error = broadcast(self._resume_choice() if main else (None, None), self.ranks)
        if error:
            raise SystemExit(error)
        parent_dir = Path(found) if found is not None else None
        # Full fine-tuning resumes from the checkpoint's own weights, LoRA from the base.
        # Only rank 0 reads the checkpoint: DDP (and FSDP's sync) copy rank 0's weights to
        # every rank when the model is prepared, and its optimizer state is broadcast.
        mine = parent_dir if main else None
        weights = mine if cfg.mode == "full" and mine is not None else Path(cfg.model_path)
        device = str(self.accelerator.device)  # this rank's own device (cuda:LOCAL_RANK)
        if cfg.mode == "qlora":
            base, self.tokenizer = load_4bit(weights, device, cfg.gradient_checkpointing)
        else:
            resolved = ResolvedModel(weights, "local", weights.name, 0)
            base, self.tokenizer = load_model(resolved, device=device)
            if cfg.gradient_checkpointing:
                enable_checkpointing(base, adapter=cfg.mode != "full")
        model = self._wrap(base, parent_dir)
        model.train()
        self.grammar = GrammarReplay(self.tokenizer)  # forced tool calls' masks
        self.stop_ids = eos_token_ids(self.tokenizer) if cfg.method in STOP_METHODS else ()

        def adamw(params: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
            return torch.optim.AdamW(
                params, lr=cfg.lr, betas=(0.9, 0.98), weight_decay=cfg.weight_decay
            )

        # DDP (or FSDP's own sync) copies rank 0's weights to every rank here
        self.model, self.optimizer = prepare_model(self.accelerator, self.sharding, model, adamw)
        self.device = self.accelerator.device
        log.info("rank %d of %d on %s, sharding %s", self.ranks.rank, self.ranks.world,
                 self.device, self.sharding)  # fmt: skip
        self.parent: str | None = None
        if parent_dir is not None:
            self._load_state(parent_dir)
        self.loss_cfg = LossConfig(
            tis_cap=cfg.tis_cap,
            w_rl=cfg.w_rl,
            w_opd=cfg.w_opd,
            kl_coef=self._kl_coef(cfg),
            opd_center=cfg.opd_center,
            repeat_penalty=cfg.repeat_penalty,
        )
        self.objective = self._objective()
        adapter = cfg.mode != "full" and cfg.anchor_coef > 0
        self.anchor = Anchor.of(cfg) if adapter else None
        self.anchor_kl: float | None = None
        self.pause_budget = PauseBudget(cfg.yield_max_s)
        self.replay = DemoReplay(cfg.replay_demos, cfg.replay_uses)  # rank 0 uses it
        self._owner_checked = 0.0
        self.serving: BusyFlag | None = None
        # Pausing for a CPU endpoint is a single-process matter: a rank that paused alone
        # would stall the others' collectives.
        if cfg.serving_flag_file and cfg.yield_max_s > 0 and self.ranks.world == 1:
            try:
                self.serving = BusyFlag(cfg.serving_flag_file)
            except OSError as exc:  # no flag: train without pausing rather than not at all
                log.warning("cannot open the serving flag (%s); steps will not pause", exc)
            else:
                install_pause_points(self.model, self.yield_to_serving)

    def yield_to_serving(self) -> float:
        """Sleep while the endpoint is answering (within this step's pause budget); raise
        EngineGone at once if our engine died meanwhile (a new one may raise the flag)."""
        if self.serving is None:
            return 0.0
        serving = self.serving

        def busy() -> bool:
            self.check_owner(every_s=1.0)
            return serving.busy()

        return wait_while_busy(busy, self.pause_budget)

    # -- set-up ------------------------------------------------------------------------
    @staticmethod
    def _kl_coef(cfg: TrainerConfig) -> float:
        """The KL anchor's weight: the base model is the adapter turned off, so full
        fine-tuning (which keeps no base copy) trains without it, and says so."""
        if cfg.kl_coef > 0 and cfg.mode == "full":
            log.warning("train.kl_coef needs an adapter (lora, qlora): full fine-tuning "
                        "trains without the KL anchor")  # fmt: skip
            return 0.0
        return cfg.kl_coef

    def _objective(self) -> Any:
        """The loss, chosen once: a user's custom loss file, or the method's objective."""
        if self.cfg.custom_loss_path:
            from clawrl_app.engine.core.plugins import load_function

            return load_function(self.cfg.custom_loss_path, "loss")
        return OBJECTIVES[self.cfg.method]

    def _main_store(self) -> Store:
        """The store, which only rank 0 opens."""
        if self.store is None:
            raise RuntimeError(f"rank {self.ranks.rank} touched the store; only rank 0 may")
        return self.store

    def _resume_choice(self) -> tuple[str | None, str | None]:
        """Rank 0: (the checkpoint folder to resume from or None, an error or None)."""
        if self.cfg.resume_from == "none":
            return None, None
        rows = [
            c
            for c in self._main_store().list_checkpoints()
            if c.status != "pruned" and Path(c.path).exists()
        ]
        if self.cfg.resume_from != "latest":
            rows = [c for c in rows if c.version == self.cfg.resume_from]
            if not rows:
                return None, f"checkpoint {self.cfg.resume_from} not found"
        return (max(rows, key=lambda c: c.created).path if rows else None), None

    def _wrap(self, base: Any, resume: Path | None) -> Any:
        if self.cfg.mode == "full":
            for p in base.parameters():
                p.requires_grad_(True)
            return base
        from peft import LoraConfig, PeftModel, get_peft_model

        if resume is not None and self.ranks.main:
            model = PeftModel.from_pretrained(base, str(resume), is_trainable=True)
            broadcast(model.peft_config["default"], self.ranks)  # its shape, for the others
            return model
        if resume is not None:  # rank 0's adapter config; its weights come with DDP's sync
            shape: LoraConfig = broadcast(LoraConfig(), self.ranks)
            return get_peft_model(base, shape)
        cfg = LoraConfig(
            r=self.cfg.lora_rank,
            lora_alpha=self.cfg.lora_alpha,
            lora_dropout=0.0,
            target_modules=LORA_TARGETS,
            task_type="CAUSAL_LM",
        )
        return get_peft_model(base, cfg)

    def _load_state(self, path: Path) -> None:
        """Step, baseline and optimizer state of the checkpoint: read by rank 0 and sent to
        the others (the optimizer's cut into each rank's shards under FSDP)."""
        state: dict[str, Any] | None = None
        opt: dict[str, Any] | None = None
        if self.ranks.main:
            state = json.loads((path / STATE).read_text())
            opt = torch.load(path / "optimizer.pt", weights_only=False, map_location="cpu")
            rng = torch.load(path / "rng.pt", weights_only=False)
            torch.set_rng_state(rng["torch"])
        state = broadcast(state, self.ranks)
        assert state is not None
        self.step, self.baseline, self.parent = state["step"], state["baseline"], state["version"]
        load_optimizer_state(self.model, self.optimizer, opt)
        log.info("resumed from %s (step %d)", path.name, self.step)

    # -- data --------------------------------------------------------------------------
    def next_batch(self) -> list[TrainItem]:
        """Up to batch_size usable samples' items, then the teacher's answers to their
        prompts (`demonstration_item`); unusable samples are skipped with their reason."""
        items: list[TrainItem] = []
        shown: list[TrainItem] = []  # the teacher's answers to the same prompts
        store, method = self._main_store(), self.cfg.method
        steps = {c.version: c.step for c in store.list_checkpoints()}
        cap, approved = self.cfg.batch_size * 4, self.cfg.approved_only
        for sample in store.trainable_samples(cap, approved_only=approved):
            turn, judgment = store.get_turn(sample.turn_id), store.get_judgment(sample.id)
            if turn is None or judgment is None:
                continue
            age = policy_age(self.step, turn.policy_version, steps)
            got = build_item(sample, turn, judgment, method, age, self.cfg.max_staleness)
            if isinstance(got, Skip):
                store.set_sample_state(got.sample_id, "skipped", got.reason)
                continue
            got, demo = with_demonstration(got, judgment, method)
            items.append(got)
            shown += [demo] if demo is not None else []
            if len(items) == self.cfg.batch_size:
                break
        return items + shown

    def still_allowed(self, items: list[TrainItem]) -> list[TrainItem]:
        """Re-check review states right before the optimizer sees the batch."""
        return [it for it in items if self.session_allowed(it)]

    def session_allowed(self, item: TrainItem) -> bool:
        """Whether `item`'s session may train now (not excluded; approved where required)."""
        sess = self._main_store().get_session(item.session_id)
        if sess is None or sess.review_state == "excluded":
            return False
        return not self.cfg.approved_only or sess.review_state == "approved"

    # -- one step ----------------------------------------------------------------------
    def train_step(self, items: list[TrainItem]) -> dict[str, float]:
        """`updates_per_batch` optimizer updates on one batch (the ratio to the behaviour
        log-probs, and so the PPO clip, takes effect from the second); returns the step's
        metrics (losses and statistics of the last update)."""
        t0 = time.monotonic()
        self.pause_budget.reset()
        self.earlier = self.baseline if self.cfg.credit_accepted else None
        self.baseline = (
            ema_baseline_update(self.baseline, [it.reward for it in plain])
            if (plain := [it for it in items if it.has_reward and not it.centred])
            else self.baseline
        )
        if not self.carries_contrast(items):  # no step: the caller makes no version of it
            return {
                "optim/skipped": 1.0,
                "reward/mean": sum(it.reward for it in items) / len(items),
            }
        if self.ranks.main:
            print(json.dumps({"event": "step_started", "step": self.step + 1}), flush=True)
        parts, grad_norm = self._update(items)
        for _ in range(self.cfg.updates_per_batch - 1):  # more PPO-style passes, same batch
            parts, grad_norm = self._update(items)
        self.step += 1
        # The step's read-back; each rank's share-weighted sums add up to the global batch's.
        totals = sum_over_ranks(weighted_totals(parts), self.ranks, self.device)
        metrics = step_metrics(
            items, totals, float(grad_norm), self.optimizer.param_groups[0]["lr"],
            self.cfg.updates_per_batch, time.monotonic() - t0, self.pause_budget.paused_s,
        )  # fmt: skip
        return metrics | ({} if self.anchor_kl is None else {"loss/anchor_kl": self.anchor_kl})

    def carries_contrast(self, items: list[TrainItem]) -> bool:
        """Whether the batch has anything to teach this method (`advantages.carries_contrast`,
        `train_data.teaches`); a step on one that has not would move the weights by momentum."""
        m = self.cfg.method
        return carries_contrast(
            self.cfg.baseline,  # type: ignore[arg-type]
            [it.reward for it in items],
            [it.has_reward and needs_reward(m) for it in items],
            [it.centred for it in items],
            [teaches(it, m, self.stop_ids) for it in items],
            self.baseline,
            self.earlier,
        )

    def _update(self, items: list[TrainItem]) -> tuple[list[Any], torch.Tensor]:
        """One optimizer update over the global batch `items`: this rank's share of it,
        forward/backward per micro-batch (gradients synchronised across ranks on the last
        one only), clip, AdamW step. Returns each micro-batch's (share of the global
        batch, loss, stats) and the gradient norm."""
        self.optimizer.zero_grad(set_to_none=True)
        if self.anchor is not None:  # the base's distributions on general prompts (anchor.py)
            self.anchor_kl = anchor_backward(self.anchor, self.accelerator, self.model,
                                             self.tokenizer, self.cfg.anchor_coef)  # fmt: skip
        allowed = self.grammar.allowed_BTV
        plain = [it for it in items if not it.centred]  # env rewards are advantages already
        baseline = batch_baseline(
            self.cfg.baseline,  # type: ignore[arg-type]
            [it.reward for it in plain],
            [it.has_reward for it in plain],
            self.baseline,
            self.earlier,
        )  # over the global batch, before it is split
        world = self.ranks.world
        mbs = micro_batches(rank_share(items, self.ranks.rank, world), self.cfg.token_budget)
        # Losses and statistics stay on the device until the optimizer step is queued: a
        # read-back inside the loop would make the host wait for the GPU before each backward.
        parts: list[tuple[float, torch.Tensor, Mapping[str, float]]] = []
        for i, mb in enumerate(mbs):
            last = i == len(mbs) - 1
            with contextlib.nullcontext() if last else self.accelerator.no_sync(self.model):
                out = response_logprobs(
                    self.model,
                    mb,
                    self.device,
                    self.cfg.repeat_ngram,
                    allowed=allowed,
                    stop_ids=self.stop_ids,
                )
                base_B = torch.tensor(
                    [0.0 if it.centred else baseline for it in mb], device=self.device
                )  # (B,)
                adv_B = advantages_from(out.rewards_B, out.has_reward_B, base_B)
                batch = out.loss_batch()
                if self.loss_cfg.kl_coef > 0:
                    ref_BT = base_response_logprobs(self.accelerator, self.model, mb, allowed)
                    batch = replace(batch, ref_logprobs_BT=ref_BT)
                result = self.objective(batch, self.loss_cfg, adv_B)
                self.accelerator.backward(result.loss * loss_scale(len(mb), len(items), world))
            parts.append((len(mb) / len(items), result.loss.detach(), result.stats))
        params = [p for p in self.model.parameters() if p.requires_grad]
        grad_norm = clip_grad_norm(params, self.cfg.grad_clip)
        if self.cfg.signal_norm > 0:  # a batch that says little moves little (step_size.py)
            set_lr(self.optimizer, signal_lr(self.cfg.lr, float(grad_norm), self.cfg.signal_norm))
        self.optimizer.step()
        return parts, grad_norm

    def canary(self) -> list[dict[str, Any]]:
        """Log-probs of a fixed response to fixed prompts under the new weights."""
        return canary_logprobs(self.model, self.tokenizer, self.device)

    def save(self, items: list[TrainItem], metrics: dict[str, float]) -> str:
        """Write the checkpoint, then register it and mark its samples in one transaction
        (rank 0; every rank takes part in the canary's forward passes and gets the version)."""
        canary = self.canary()
        # gathered to rank 0 from every rank's shards under FSDP (collectives)
        weights = full_state_dict(self.model) if self.cfg.mode == "full" else None
        optimizer = optimizer_state_for_save(self.model, self.optimizer)
        version = ""
        if self.ranks.main:
            version = self._write_and_register(items, metrics, canary, weights, optimizer)
        version = broadcast(version, self.ranks)
        self.parent = version
        return version

    def _write_and_register(
        self,
        items: list[TrainItem],
        metrics: dict[str, float],
        canary: list[dict[str, Any]],
        weights: dict[str, Any] | None,
        optimizer: dict[str, Any] | None,
    ) -> str:
        store = self._main_store()
        version = next_version([c.version for c in store.list_checkpoints()])
        sessions = sorted({it.session_id for it in items})  # replayed answers' too
        manifest = Manifest(
            version,
            self.step,
            self.parent,
            self.cfg.mode,
            self.cfg.method,
            metrics,
            sessions,
            list(dict.fromkeys(it.sample_id for it in items if not it.replayed)),
            canary,
        )
        state = {
            "step": self.step,
            "baseline": self.baseline,
            "version": version,
            "config": asdict(self.cfg),
        }

        def save_weights(d: Path) -> None:
            if weights is not None:  # a full checkpoint is a complete model folder
                save_full_model(self.model, weights, str(d))
                self.tokenizer.save_pretrained(str(d))
            else:  # the adapter
                unwrapped(self.model).save_pretrained(str(d))  # type: ignore[operator]
            (d / STATE).write_text(json.dumps(state, indent=1))

        path = write_checkpoint(
            self.root,
            self.step,
            self.cfg.mode,
            save_weights,
            {
                "optimizer.pt": optimizer,
                "rng.pt": {"torch": torch.get_rng_state()},
            },
            manifest,
        )
        with store.atomic():
            store.register_checkpoint(
                version, path, self.parent, self.step, metrics, sessions, manifest.samples
            )
            store.mark_trained(manifest.samples, version)
            store.add_metrics(self.step, metrics, version=version)
        return version

    # -- loop --------------------------------------------------------------------------
    def allowed(self) -> bool:
        """The engine's gate (schedule, idle time); a missing file means allowed."""
        if not self.cfg.control_file or not os.path.exists(self.cfg.control_file):
            return True
        try:
            return bool(json.loads(Path(self.cfg.control_file).read_text()).get("allowed", True))
        except (OSError, ValueError):
            return True

    def check_owner(self, every_s: float = 0.0) -> None:
        """Raise EngineGone once the engine that started this process is gone: an orphan
        trainer must not train on or register anything; the next engine's trainer takes
        over (it waits for this process to exit). Checks at most every `every_s`."""
        if not self.cfg.owner_lease or not self.cfg.owner_token:
            return
        now = time.monotonic()
        if now - self._owner_checked < every_s:
            return
        self._owner_checked = now
        if not owner_alive(Path(self.cfg.owner_lease), self.cfg.owner_token):
            raise EngineGone

    def run(self) -> None:
        try:
            self._loop()
        except EngineGone:  # mid-step too: that step is dropped, nothing half-registered
            log.info("the engine that started this trainer is gone; stopping")

    def decide(self) -> tuple[str, list[TrainItem]]:
        """Rank 0: ("stop", []) once the engine is gone, ("wait", []) while training is
        not allowed or the batch is not full, else ("train", the global batch)."""
        if self._owner_gone():
            return "stop", []
        if not self.allowed():
            return "wait", []
        items = self.still_allowed(self.next_batch())
        own = {it.sample_id for it in items}
        if len(own) < self.cfg.batch_size:
            return "wait", []
        return "train", items + self.replay.pick(self.session_allowed, own)

    def skip_without_contrast(self, items: list[TrainItem]) -> None:
        """Rank 0 marks a batch that carried no contrast skipped, with the reason; no step
        was taken and no version is made from it."""
        if not self.ranks.main:
            return
        store = self._main_store()
        for it in (it for it in items if not it.replayed):
            reason = f"no contrast: every reward in its batch was {it.reward:+g} and no hint"
            store.set_sample_state(it.sample_id, "skipped", reason)
        log.info("batch of %d samples skipped: equal rewards, no hint", len(items))

    def _owner_gone(self) -> bool:
        try:
            self.check_owner()
        except EngineGone:
            return True
        return False

    def engine_gone(self) -> bool:
        """Rank 0 checks the owner; every rank gets the answer."""
        return bool(broadcast(self.ranks.main and self._owner_gone(), self.ranks))

    def _loop(self) -> None:
        while not self.cfg.max_steps or self.step < self.cfg.max_steps:
            what, items = broadcast(self.decide() if self.ranks.main else ("", []), self.ranks)
            if what == "stop":
                raise EngineGone
            if what == "wait":
                time.sleep(self.cfg.poll_s)
                continue
            metrics = self.train_step(items)
            if metrics.get("optim/skipped"):
                self.skip_without_contrast(items)
                continue
            if self.engine_gone():  # a step is long: the engine may have died meanwhile
                raise EngineGone
            version = self.save(items, metrics)
            if self.ranks.main:
                self.replay.after_step(items)
                event = {"event": "checkpoint", "version": version, "step": self.step, **metrics}
                print(json.dumps(event), flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="clawrl-trainer", description="clawrl-app training process")
    ap.add_argument("--config", required=True, help="TrainerConfig JSON written by the engine")
    args = ap.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    cfg = TrainerConfig(**json.loads(Path(args.config).read_text()))
    if cfg.device == "cpu":
        share_cpu_with_serving()
    Trainer(cfg).run()
    return end_rank(0)  # several ranks: out of the process group without Python's shutdown


def share_cpu_with_serving() -> None:
    """On a CPU-only machine the trainer and the endpoint share the cores: the trainer runs
    at low priority on half of them so chat answers stay responsive during a step."""
    with contextlib.suppress(OSError):
        os.nice(10)
    torch.set_num_threads(max(1, (os.cpu_count() or 2) // 2))


if __name__ == "__main__":
    sys.exit(main())
