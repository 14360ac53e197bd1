"""Learning that does no harm, with the real trainer (`Trainer.train_step`, the embedded model,
LoRA, lr 5e-4 as the CPU plan sets it) on answers the policy itself samples.

1. A batch whose rewards are all equal carries no contrast: under the default baseline
   (`batch_mean`) the reward term does not push at all, and the trainer takes no optimizer
   step on it (AdamW's momentum alone would move the weights). Under the old default (`ema`), after
   one mixed batch the moving baseline sits above -1, and an all-negative batch pushes every
   sampled token down (what turned a user's "too long" into loops, issue #29).
2. An env rollout's reward is its group-relative advantage already: the trainer takes no
   baseline from it (a partial group in a batch would otherwise be shifted) and leaves it out
   of the chat samples' baseline.
3. Steps on all-negative feedback with the user's correction as the teacher's hint, answers
   sampled at the server's default temperature (0.2) and too long for the user: greedy
   answers to fixed prompts do not become degenerate (repeated phrases, loops).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from clawrl_app.degeneration import score as degeneration
from clawrl_app.engine.chat.formatter import ChatFormatter, eos_token_ids
from clawrl_app.engine.judging.prompts import teacher_messages
from clawrl_app.engine.store import JudgmentRow, Store
from clawrl_app.engine.training.config import TrainerConfig
from clawrl_app.engine.training.policy_forward import response_logprobs
from clawrl_app.engine.training.train_data import TrainItem, is_centred
from clawrl_app.engine.training.trainer import Trainer
from clawrl_app.models import ResolvedModel
from tests.engine.training.rank_fixtures import judged_store, tiny_llama

pytestmark = pytest.mark.slow

QUESTIONS = ["What is photosynthesis?", "Why is the sky blue?", "What is gravity?",
             "How do vaccines work?", "What is a black hole?", "What causes earthquakes?",
             "What is democracy?", "What is DNA?"]  # fmt: skip
FIXED = ["Explain how a bicycle works.", "Describe a busy market in the morning.",
         "Tell me about the history of bread.", "Explain why exercise is good for you.",
         "What is a tornado?", "Why do birds migrate?", "How do magnets work?",
         "What is a fossil?"]  # fmt: skip
CORRECTION = "Too long. Please answer in at most 15 words."
LONG = (
    "Photosynthesis is the process by which green plants, algae and some bacteria turn "
    "light energy into chemical energy, using carbon dioxide and water to make glucose and "
    "releasing oxygen as a by-product, which sustains most life on Earth."
)


def make_trainer(tmp_path: Path, model: ResolvedModel, **overrides: Any) -> Trainer:
    cfg = TrainerConfig(
        store_path=str(tmp_path / "s.sqlite3"), checkpoints_dir=str(tmp_path / "ckpt"),
        model_path=str(model.path), batch_size=4, lr=5e-4, resume_from="none", seed=0,
        **{"method": "combine", **overrides},
    )  # fmt: skip
    torch.manual_seed(0)
    return Trainer(cfg)


def scored(trainer: Trainer, prompt: list[int], resp: list[int], temperature: float) -> list[float]:
    item = TrainItem(0, "", prompt, resp, [0.0] * len(resp), temperature, 0.0, False, None, "x")
    with torch.no_grad():
        return [float(x) for x in response_logprobs(trainer.model, [item], "cpu").logprobs_BT[0]]


def item(
    trainer: Trainer, question: str, resp: list[int], reward: float, t: float, hint: str | None
) -> TrainItem:
    """A judged sample: behaviour log-probs at `t`, the teacher (base + hint) at 1."""
    fmt = ChatFormatter(trainer.tokenizer)
    msgs = [{"role": "user", "content": question}]
    prompt = fmt.render(msgs)
    teacher = None
    if hint is not None:
        with trainer.model.disable_adapter():
            teacher = scored(trainer, fmt.render(teacher_messages(msgs, hint)), resp, 1.0)
    old = scored(trainer, prompt, resp, t)
    return TrainItem(0, "s", prompt, resp, old, t, reward, True, teacher, "x")


@torch.no_grad()
def answers(
    trainer: Trainer, questions: list[str], max_tokens: int, t: float | None
) -> list[list[int]]:
    """The policy's answers: greedy (`t` None) or sampled at temperature `t`, top-p 0.9."""
    fmt, tok = ChatFormatter(trainer.tokenizer), trainer.tokenizer
    eos = sorted(eos_token_ids(tok))
    prompts = [fmt.render([{"role": "user", "content": q}]) for q in questions]
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[eos[0]] * (width - len(p)) + p for p in prompts])
    attn = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    trainer.model.eval()
    out = trainer.model.generate(
        input_ids=ids, attention_mask=attn, max_new_tokens=max_tokens, do_sample=t is not None,
        temperature=t, top_p=None if t is None else 0.9, top_k=0, eos_token_id=eos,
        pad_token_id=eos[0], use_cache=True,
    )  # fmt: skip
    trainer.model.train()
    rows = []
    for row in out[:, width:].tolist():
        cut = next((i for i, x in enumerate(row) if x in eos), len(row))
        rows.append(row[: cut + 1] if cut < len(row) else row)
    return rows


def degenerate_share(trainer: Trainer) -> float:
    fmt = ChatFormatter(trainer.tokenizer)
    texts = [fmt.decode(r) for r in answers(trainer, FIXED, 96, None)]
    return sum(degeneration(t).degenerate for t in texts) / len(texts)


def test_a_batch_without_contrast_does_not_push_under_the_default_baseline(
    tmp_path: Path, embedded_model: ResolvedModel
) -> None:
    tr = make_trainer(tmp_path, embedded_model)
    assert tr.cfg.baseline == "batch_mean"  # the default
    tok = tr.tokenizer
    long = list(tok(LONG, add_special_tokens=False)["input_ids"])[:32]
    short = list(tok("Plants make food from light.", add_special_tokens=False)["input_ids"])
    mixed = [item(tr, QUESTIONS[0], short, 1.0, 1.0, None)]
    mixed += [item(tr, q, long, -1.0, 1.0, None) for q in QUESTIONS[1:4]]
    assert tr.train_step(mixed)["optim/grad_norm"] > 0  # contrast: the reward term pushes
    negative = [item(tr, q, long, -1.0, 1.0, None) for q in QUESTIONS[4:8]]
    before = weights(tr)
    assert tr.train_step(negative) == {"optim/skipped": 1.0, "reward/mean": -1.0}
    assert moved(tr, before) == 0.0 and tr.step == 1  # no step taken, no version to make
    # what the skip prevents: the loss gives no gradient, yet AdamW's momentum moves the
    # weights along the previous step's direction
    _, grad_norm = tr._update(negative)
    assert float(grad_norm) == 0.0 and moved(tr, before) > 0
    # the old default: the moving baseline remembers the +1 (-0.55 now), so four -1 answers
    # all get pushed down, every sampled token of them
    tr.cfg = replace(tr.cfg, baseline="ema")
    negative = [item(tr, q, long, -1.0, 1.0, None) for q in QUESTIONS[4:8]]
    assert tr.train_step(negative)["optim/grad_norm"] > 0.05


def test_answers_the_user_just_started_to_accept_train_though_their_batch_is_all_plus_one(
    tmp_path: Path, embedded_model: ResolvedModel
) -> None:
    """After rejections (moving mean -1), a batch of four accepted short answers is credited
    at A = +1 (`advantages.accepted_baseline`): a step is taken and the accepted answers
    become likelier. With `credit_accepted` off it is skipped for want of contrast (what
    befell brevity/rated's four +1 in a row, 2026-12-02); after acceptances as good (moving
    mean +1) it is skipped too."""
    tr = make_trainer(tmp_path, embedded_model)
    tok = tr.tokenizer
    long = list(tok(LONG, add_special_tokens=False)["input_ids"])[:32]
    short = list(tok("Plants make food from light.", add_special_tokens=False)["input_ids"])
    rejected = [item(tr, q, long, -1.0, 1.0, CORRECTION) for q in QUESTIONS[:4]]
    accepted = [item(tr, q, short, 1.0, 1.0, None) for q in QUESTIONS[4:8]]
    assert "optim/skipped" not in tr.train_step(rejected)  # the hints teach; mean -1 now
    assert tr.baseline == -1.0
    tr.cfg = replace(tr.cfg, credit_accepted=False)
    assert tr.train_step(accepted)["optim/skipped"] == 1.0 and tr.step == 1
    tr.cfg, tr.baseline = replace(tr.cfg, credit_accepted=True), -1.0
    before = weights(tr)
    lp_before = sum(sum(scored(tr, it.prompt_ids, it.response_ids, 1.0)) for it in accepted)
    metrics = tr.train_step(accepted)
    assert "optim/skipped" not in metrics and tr.step == 2 and moved(tr, before) > 0
    assert metrics["adv/mean"] == pytest.approx(1.0)  # r - max(0, -1)
    lp_after = sum(sum(scored(tr, it.prompt_ids, it.response_ids, 1.0)) for it in accepted)
    assert lp_after > lp_before
    tr.baseline = 1.0  # earlier answers fared as well: nothing to credit
    assert tr.train_step(accepted)["optim/skipped"] == 1.0 and tr.step == 2


def test_only_the_terms_of_the_method_count_as_contrast(
    tmp_path: Path, embedded_model: ResolvedModel
) -> None:
    """Under `rl` a hint's log-probs are not a signal (the judge scores them whatever the
    method): four disliked answers with hints get no step, where `combine` takes one; under
    `opd` a mixed reward without hints is not one either."""
    tr = make_trainer(tmp_path, embedded_model, method="rl")
    tok = tr.tokenizer
    long = list(tok(LONG, add_special_tokens=False)["input_ids"])[:24]
    hinted = [item(tr, q, long, -1.0, 1.0, CORRECTION) for q in QUESTIONS[:4]]
    assert all(it.teacher_logprobs is not None for it in hinted)
    before = weights(tr)
    assert tr.train_step(hinted)["optim/skipped"] == 1.0 and moved(tr, before) == 0.0
    tr.cfg = replace(tr.cfg, method="combine")
    assert tr.carries_contrast(hinted)
    rewards = (1.0, -1.0, -1.0, -1.0)
    mixed = [
        replace(it, reward=r, teacher_logprobs=None) for it, r in zip(hinted, rewards, strict=True)
    ]
    assert tr.carries_contrast(mixed)
    tr.cfg = replace(tr.cfg, method="opd")
    assert not tr.carries_contrast(mixed) and tr.carries_contrast(hinted)


def test_a_batch_that_says_little_moves_the_weights_little(
    tmp_path: Path, embedded_model: ResolvedModel
) -> None:
    """Rewards of +-0.01 give a gradient ~100x weaker than +-1; Adam alone would move the
    adapter by ~lr either way. Under `signal_norm` the weak step's rate (and move) shrinks in
    proportion, the strong step keeps the full rate."""
    tok_ids = None
    moves, rates = {}, {}
    for norm in (0.0, 0.25):
        tr = make_trainer(tmp_path / str(norm), embedded_model, signal_norm=norm)
        tok_ids = tok_ids or list(tr.tokenizer(LONG, add_special_tokens=False)["input_ids"])[:24]
        weak = [
            item(tr, q, tok_ids, r, 1.0, None)
            for q, r in zip(QUESTIONS[:4], (0.01, -0.01, 0.01, -0.01), strict=True)
        ]
        before = weights(tr)
        m = tr.train_step(weak)
        assert m["optim/grad_norm"] < 0.05
        moves[norm], rates[norm] = moved(tr, before), m["optim/lr"]
    assert rates[0.0] == 5e-4 and rates[0.25] == pytest.approx(5e-4 * m["optim/grad_norm"] / 0.25)
    assert moves[0.25] < moves[0.0] / 5
    strong = [
        item(tr, q, tok_ids, r, 1.0, None)
        for q, r in zip(QUESTIONS[4:], (1.0, -1.0, 1.0, -1.0), strict=True)
    ]
    m = tr.train_step(strong)
    assert m["optim/grad_norm"] > 0.25 and m["optim/lr"] == 5e-4


def weights(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}


def moved(trainer: Trainer, before: dict[str, torch.Tensor]) -> float:
    """The largest change of a trainable weight since `before`."""
    now = weights(trainer)
    return max(float((now[n] - w).abs().max()) for n, w in before.items())


def test_the_trainer_skips_a_batch_without_contrast_and_makes_no_version_of_it(
    tmp_path: Path, embedded_model: ResolvedModel
) -> None:
    """The trainer's loop on a store whose oldest batch is two liked answers (equal rewards,
    no hint) and whose next is a liked and a disliked one: the first is marked skipped with
    the reason, the second makes v1, the only version."""
    model = tiny_llama(tmp_path / "tiny", embedded_model.path)
    ids = judged_store(tmp_path / "s.sqlite3", 4, rewards=[1.0, 1.0, 1.0, -1.0], teacher_every=0)
    cfg = TrainerConfig(
        store_path=str(tmp_path / "s.sqlite3"), checkpoints_dir=str(tmp_path / "ckpt"),
        model_path=str(model), batch_size=2, resume_from="none", max_steps=1, poll_s=0.05,
    )  # fmt: skip
    Trainer(cfg).run()
    with Store(tmp_path / "s.sqlite3") as store:
        assert [c.version for c in store.list_checkpoints()] == ["v1"]
        first, second = (
            [store.get_sample(i) for i in ids[:2]],
            [store.get_sample(i) for i in ids[2:]],
        )
    assert all(s.state == "skipped" and "no contrast" in (s.skip_reason or "") for s in first)
    assert all(s.state == "trained" and s.trained_in == "v1" for s in second)


def judged(backend: str, rating: int | None) -> JudgmentRow:
    return JudgmentRow(1, 1, backend, [], 0.5, 0.5, None, [], None, None, rating, None, 0.0)


def test_env_rewards_are_advantages_already_and_take_no_baseline(
    tmp_path: Path, embedded_model: ResolvedModel
) -> None:
    assert is_centred(judged("env:toolcall", None))
    assert not is_centred(judged("env:toolcall", 1))  # the user's rating is a plain reward
    assert not is_centred(judged("heuristic", None))
    tr = make_trainer(tmp_path, embedded_model)
    tok = tr.tokenizer
    short = list(tok("Plants make food from light.", add_special_tokens=False)["input_ids"])
    # two winners of a group whose losers are in another batch: +0.5 each
    winners = [item(tr, q, short, 0.5, 1.0, None) for q in QUESTIONS[:2]]
    assert tr.train_step(winners)["optim/skipped"] == 1.0  # as chat rewards: mean removed
    winners = [replace(it, centred=True) for it in winners]
    assert tr.train_step(winners)["optim/grad_norm"] > 0  # as env advantages: pushed up
    # beside them, two chat samples keep their own baseline (+1 and -1: mean 0)
    chat = [item(tr, QUESTIONS[2], short, 1.0, 1.0, None)]
    chat += [item(tr, QUESTIONS[3], short, -1.0, 1.0, None)]
    assert tr.train_step(chat + winners)["adv/mean"] > 0.2  # (+1, -1, +0.5, +0.5) / 4


@pytest.mark.timeout(600)
def test_all_negative_feedback_with_hints_does_not_make_greedy_answers_degenerate(
    tmp_path: Path, embedded_model: ResolvedModel
) -> None:
    tr = make_trainer(tmp_path, embedded_model)
    before = degenerate_share(tr)
    for step in range(3):
        qs = [QUESTIONS[(4 * step + k) % len(QUESTIONS)] for k in range(4)]
        sampled = answers(tr, qs, 64, 0.2)  # the embedded model's server default
        tr.train_step(
            [item(tr, q, r, -1.0, 0.2, CORRECTION) for q, r in zip(qs, sampled, strict=True)]
        )
    after = degenerate_share(tr)
    # at most one more of the eight fixed answers degenerate (the run: 0.08 -> 0.58)
    assert after <= before + 1 / len(FIXED), (before, after)
