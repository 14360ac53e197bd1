"""The rollout -> reward -> group advantage -> trainer chain moves the policy the right way.

A toy env with two actions (`press_blue`, always rewarded; `press_red`, always punished),
played by the embedded model through a forced tool call (`tool_choice = "required"`):
each answer is sampled under the call's grammar with the serving backend's own code
(`backends/grammar.py`: llguidance matcher, `mask_logits`, the masked distribution's
log-probs recorded as the behaviour log-probs, as the endpoint records them), in this
process rather than over HTTP so that the test takes a minute (the endpoint's recorded
log-probs are compared with the trainer's in tests/envs/test_env_rollouts_e2e.py). The
episodes go through the real runner, the verifier's reward through the real group
advantages (`rewards.turn_advantages`), the samples through the real `Trainer.train_step`
(LoRA, the app's loss).

It fails if the advantage's sign is wrong (blue would fall), if the advantages are
assigned to the wrong samples, or if the trainer's token mask or grammar replay is wrong
(its log-probs would differ from the sampler's at the same weights).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from clawrl_app.engine.backends.grammar import GrammarCompiler, mask_logits
from clawrl_app.engine.chat.formatter import ChatFormatter
from clawrl_app.engine.training.config import TrainerConfig
from clawrl_app.engine.training.policy_forward import response_logprobs
from clawrl_app.engine.training.train_data import TrainItem, sampled_schema
from clawrl_app.engine.training.trainer import Trainer
from clawrl_app.envs.base import (
    Action,
    Observation,
    PolicyReply,
    StepResult,
    Task,
    ToolSpec,
    Verdict,
)
from clawrl_app.envs.rewards import binary_reward, turn_advantages
from clawrl_app.envs.runner import run_group
from clawrl_app.models import ResolvedModel

pytestmark = pytest.mark.slow

NO_ARGS: dict[str, Any] = {"type": "object", "properties": {}}
TOOLS = [ToolSpec("press_red", "Press the red button.", NO_ARGS),
         ToolSpec("press_blue", "Press the blue button.", NO_ARGS)]  # fmt: skip
TASK = Task("doors-1", "doors", "doors", "There are two buttons. Press one of them.", 1)
GROUP = 8
STEPS = 1
SYSTEM = "You press buttons by calling tools."
MESSAGES = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK.instruction}]


class DoorsEnv:
    """One step: press a button. Blue is right (+1), red is wrong (-1)."""

    name = "doors"

    def __init__(self) -> None:
        self.pressed: str | None = None

    def tasks(self) -> list[Task]:
        return [TASK]

    def system_prompt(self, task: Task) -> str:
        return SYSTEM

    def tool_specs(self, task: Task) -> list[ToolSpec]:
        return TOOLS

    def reset(self, task: Task, *, seed: int | None = None) -> Observation:
        self.pressed = None
        return Observation(task.instruction)

    def step(self, action: Action) -> StepResult:
        self.pressed = action.tool
        return StepResult(Observation(f"pressed {action.tool}"), done=True)

    def final_answer(self, text: str) -> StepResult | None:
        return None

    def evaluate(self) -> Verdict:
        ok = self.pressed == "press_blue"
        return Verdict(1.0 if ok else 0.0, ok)

    def outcome_reward(self, verdict: Verdict) -> float:
        return binary_reward(verdict.success)

    def close(self) -> None:
        self.pressed = None

    def oracle_replies(self, task: Task) -> list[PolicyReply]:
        return []


class ConstrainedSampler:
    """The policy: the trainer's own model sampled at temperature 1 under the forced call's
    grammar, as the torch backend samples (a group's answers decoded together, one row
    and one matcher each); records each turn like the endpoint does."""

    def __init__(self, trainer: Trainer, seed: int) -> None:
        self.model, self.tok = trainer.model, trainer.tokenizer
        self.fmt = ChatFormatter(trainer.tokenizer)
        self.grammars = GrammarCompiler(trainer.tokenizer)
        self.gen = torch.Generator(device=trainer.device).manual_seed(seed)
        self.turns: dict[str, dict[str, Any]] = {}
        self.ready: list[dict[str, Any]] = []

    @torch.no_grad()
    def sample_group(self, messages: Any, tools: Any, n: int) -> None:
        """Decode `n` answers to `messages` together (KV-cached, one token a step)."""
        schema = sampled_schema({"messages": messages, "tools": tools, "tool_choice": "required"})
        assert schema is not None
        prompt = self.fmt.render(messages, tools, "required")
        rows = [self.grammars.matcher(schema) for _ in range(n)]
        ids: list[list[int]] = [[] for _ in range(n)]
        lps: list[list[float]] = [[] for _ in range(n)]
        done = [False] * n
        x = torch.tensor([prompt] * n, device=self.model.device)  # (n, L)
        cache = None
        for _ in range(40):
            out = self.model(input_ids=x, past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            live = [None if d else g for d, g in zip(done, rows, strict=True)]
            logp_BV = torch.log_softmax(mask_logits(out.logits[:, -1].float(), live), -1)
            tokens = torch.multinomial(logp_BV.exp(), 1, generator=self.gen)[:, 0]  # (n,)
            for b in range(n):
                if not done[b]:
                    token = int(tokens[b])
                    ids[b].append(token)
                    lps[b].append(float(logp_BV[b, token]))
                    rows[b].consume(token)
                    done[b] = token == self.tok.eos_token_id
            if all(done):
                break
            x = tokens[:, None]  # (n, 1); finished rows decode on, unused
        for b in range(n):
            call = json.loads(self.fmt.decode(ids[b]))
            self.ready.append({"prompt": prompt, "ids": ids[b], "lps": lps[b],
                               "schema": schema, "name": call["name"]})  # fmt: skip

    def __call__(self, messages: Any, tools: Any, *, session_id: str) -> PolicyReply:
        turn = self.ready.pop(0)
        assert turn["prompt"] == self.fmt.render(messages, tools, "required")
        self.turns[session_id] = turn
        fn = {"name": turn["name"], "arguments": "{}"}
        return PolicyReply("", [{"id": "c0", "type": "function", "function": fn}])


def p_blue(trainer: Trainer) -> float:
    """P(the policy presses blue) under the grammar: the product of the masked token
    probabilities of the blue call, scored by the trainer's forward pass."""
    fmt, tok = ChatFormatter(trainer.tokenizer), trainer.tokenizer
    tools = [s.openai() for s in TOOLS]
    text = '{"name": "press_blue", "arguments": {}}'
    ids = list(tok(text, add_special_tokens=False)["input_ids"]) + [tok.eos_token_id]
    schema = sampled_schema({"tools": tools, "tool_choice": "required"})
    item = TrainItem(0, "", fmt.render(MESSAGES, tools, "required"), ids, [0.0] * len(ids), 1.0,
                     0.0, False, None, "x", json_schema=schema)  # fmt: skip
    trainer.model.eval()
    with torch.no_grad():
        out = response_logprobs(
            trainer.model, [item], trainer.device, allowed=trainer.grammar.allowed_BTV
        )
    return float(out.logprobs_BT[0].sum().exp())


def test_the_rewarded_action_becomes_more_likely(
    tmp_path: Path, embedded_model: ResolvedModel
) -> None:
    cfg = TrainerConfig(
        store_path=str(tmp_path / "s.sqlite3"), checkpoints_dir=str(tmp_path / "ckpt"),
        model_path=str(embedded_model.path), method="rl", batch_size=GROUP, lr=5e-4,
        resume_from="none", seed=0,
    )  # fmt: skip
    torch.manual_seed(0)
    trainer = Trainer(cfg)
    sampler = ConstrainedSampler(trainer, seed=0)
    history: list[float] = []
    for step in range(STEPS):
        trainer.model.eval()
        sampler.sample_group(MESSAGES, [t.openai() for t in TOOLS], GROUP)
        group = run_group(DoorsEnv, TASK, sampler, n=GROUP, concurrency=1, seed=step)
        advantages = turn_advantages(group, mode="sequence")
        items = []
        for ep, adv in zip(group, advantages, strict=True):
            assert adv is not None and ep.session_id is not None
            t = sampler.turns[ep.session_id]
            if adv[0] != 0:  # a group that pressed one button only has no contrast
                assert (adv[0] > 0) == (t["name"] == "press_blue")  # the advantage's sign
            items.append(TrainItem(len(items), "s", t["prompt"], t["ids"], t["lps"], 1.0,
                                   adv[0], True, None, "x", json_schema=t["schema"]))  # fmt: skip
        if step == 0:  # the trainer's masked log-probs are the sampler's, token for token
            with torch.no_grad():
                out = response_logprobs(trainer.model, items, trainer.device,
                                        allowed=trainer.grammar.allowed_BTV)  # fmt: skip
            for b, it in enumerate(items):
                got = out.logprobs_BT[b, -len(it.response_ids) :]
                assert torch.allclose(got, torch.tensor(it.old_logprobs), atol=2e-3), b
            # forced scaffolding tokens (`{"name": "press_` ...) carry no choice: log-prob 0
            assert int((got.abs() < 1e-6).sum()) >= len(got) // 2
        history.append(p_blue(trainer))
        if len({round(a[0], 9) for a in advantages if a}) > 1:
            trainer.model.train()
            trainer.train_step(items)
    final = p_blue(trainer)
    print(f"P(blue) before each step: {history}, after: {final:.3f}")
    assert final > history[0] + 0.1, (history, final)
