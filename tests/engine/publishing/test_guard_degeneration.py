"""The regression guard sees degeneration, with real parts: the embedded model in the torch
backend, a real SQLite store, a real PEFT adapter in a checkpoint folder, the publisher.

The adapter is trained (a few steps of plain cross-entropy with peft on the CPU) to answer
the guard's own questions and open prompts in a loop that still names the fact: "Paris is
Paris is Paris is ...", "You can do it. You can do it. ...". A fact checker alone passes it
(that was the guard's decision before it scored form); the guard refuses it for its
degeneration rate against the base model's.
"""

from __future__ import annotations

import asyncio
import copy
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from clawrl_app.config import GuardSettings
from clawrl_app.engine.backends.pytorch.backend import TorchBackend
from clawrl_app.engine.chat.formatter import ChatFormatter
from clawrl_app.engine.core.checkpoints import MANIFEST
from clawrl_app.engine.core.events import Event, GuardChecked, PublishRefused
from clawrl_app.engine.publishing.guard import RegressionGuard, UserForm, decide
from clawrl_app.engine.publishing.publisher import Publisher
from clawrl_app.engine.store import Store
from clawrl_app.engine.store.guard import DEGENERATION
from clawrl_app.general_eval import GeneralItem, OpenPrompt, load_general_set, load_open_prompts

pytestmark = pytest.mark.slow
QUESTIONS = load_general_set()[:6]  # capitals and a sum: each has an `accept` answer
OPEN = load_open_prompts()[:2]
SETTINGS = GuardSettings(
    general_items=6, max_tokens=32, open_prompts=2, open_max_tokens=64, budget_prompts=0
)
# only the rules on the user's prompts decide: 6 of them, margins 0.1, new loops off
USER_PROMPTS_ONLY = GuardSettings(
    general_items=0, open_prompts=0, budget_prompts=0, open_max_tokens=64, user_form_items=6,
    user_form_min_tokens=0, max_new_loops=1.0, max_degeneration_rise=0.1,
    max_repetition_rise=0.1,
)  # fmt: skip
STEPS, LR = 6, 3e-3  # measured: loss 1.6 -> 0.04 in 6 steps; greedy answers then loop


def looping_pairs(questions: list[GeneralItem], prompts: list[OpenPrompt]) -> list[tuple[str, str]]:
    """(prompt, looping answer): a fact said in a loop, or a phrase said again and again."""
    pairs = [(q.question, " ".join([f"{q.accept[0].capitalize()} is"] * 8)) for q in questions]
    return pairs + [(p.prompt, " ".join(["You can do it."] * 6)) for p in prompts]


def train_looping_adapter(loaded_model: tuple[Any, Any], out: Path) -> Path:
    """LoRA on the attention projections, plain supervised cross-entropy on the looping
    answers (prompt tokens masked), saved as a checkpoint folder with a manifest."""
    from peft import LoraConfig, get_peft_model

    model, tok = loaded_model
    fmt = ChatFormatter(tok)
    torch.manual_seed(0)
    cfg = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
    peft_model = get_peft_model(copy.deepcopy(model), cfg)
    rows = [
        (fmt.render([{"role": "user", "content": q}]), tok.encode(a, add_special_tokens=False))
        for q, a in looping_pairs(QUESTIONS, OPEN)
    ]
    width = max(len(p) + len(a) for p, a in rows)
    ids_BT = torch.zeros((len(rows), width), dtype=torch.long)
    mask_BT = torch.zeros((len(rows), width), dtype=torch.long)
    labels_BT = torch.full((len(rows), width), -100, dtype=torch.long)
    for k, (p, a) in enumerate(rows):
        ids_BT[k, : len(p) + len(a)] = torch.tensor(p + a)
        mask_BT[k, : len(p) + len(a)] = 1
        labels_BT[k, len(p) : len(p) + len(a)] = torch.tensor(a)  # loss on the answer only
    params = [p for p in peft_model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=LR)
    peft_model.train()
    for _ in range(STEPS):
        loss = peft_model(input_ids=ids_BT, attention_mask=mask_BT, labels=labels_BT).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
    peft_model.save_pretrained(str(out))
    manifest = {"version": out.name, "step": STEPS, "parent": None, "mode": "lora",
                "method": "sft", "metrics": {"loss": float(loss.detach())}, "sessions": [],
                "samples": [], "canary": []}  # fmt: skip
    (out / MANIFEST).write_text(json.dumps(manifest))
    return out


@pytest.fixture(scope="module")
def looping_adapter(
    loaded_model: tuple[Any, Any], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    return train_looping_adapter(loaded_model, tmp_path_factory.mktemp("loop") / "v1")


def test_a_looping_adapter_that_a_fact_check_passes_is_refused_for_degeneration(
    loaded_model: tuple[Any, Any], looping_adapter: Path, tmp_path: Path
) -> None:
    model, tok = loaded_model
    fmt = ChatFormatter(tok)
    store = Store(tmp_path / "store.db")
    events: list[Event] = []
    sent_back: list[str] = []

    async def trainer_back_to(version: str) -> None:
        sent_back.append(version)

    async def go() -> tuple[bool, RegressionGuard, str]:
        be = TorchBackend(copy.deepcopy(model), tok, model_name="m", context_length=2048)
        await be.start()
        try:
            guard = RegressionGuard(store, be, fmt, SETTINGS, QUESTIONS, OPEN)
            pub = Publisher(store, be, events=events.append, guard=guard,
                            on_guard_refused=trainer_back_to)  # fmt: skip
            store.register_checkpoint("v1", looping_adapter, None, STEPS, {}, [], [])
            published = await pub.publish(store.get_checkpoint("v1"))  # type: ignore[arg-type]
            return published, guard, be.active_version
        finally:
            await be.stop()

    published, guard, active = asyncio.run(go())
    verdict = guard.last
    assert verdict is not None
    c, s = verdict.candidate, verdict.served
    # the adapter loops on every answer; the base model on few (measured: 0 or 1 of 8)
    assert c.degeneration == 1.0 and c.degeneration_n == 8
    assert s.version == "base" and s.degeneration is not None and s.degeneration <= 0.25
    assert verdict.base_degeneration == s.degeneration
    # what a fact check alone sees: every loop names its fact, at least the base's score ...
    assert c.facts_any_form is not None and s.facts_any_form is not None
    assert c.facts_any_form >= s.facts_any_form - SETTINGS.max_general_drop
    # ... so the decision on facts alone (the guard before it scored form) passes it
    facts_only = decide(
        replace(c, general=c.facts_any_form, degeneration=None, new_loops=None),
        replace(s, general=s.facts_any_form, degeneration=None),
        SETTINGS,
        base_general=s.facts_any_form,
    )
    assert facts_only.passed
    # the guard refuses it for its degeneration (its loops count as wrong answers, too)
    assert published is False and active == "base" and sent_back == ["base"]
    assert c.general == 0.0
    why = f"degeneration 1.00 vs base {s.degeneration:.2f} (max rise 0.05) on 8 answers"
    assert why in verdict.reasons
    # every answer loops: new loops wherever the base's answer to the same prompt did not
    assert c.new_loops == pytest.approx(1.0 - s.degeneration)
    assert any(r.startswith("new loops: ") for r in verdict.reasons)
    assert store.get_checkpoint("v1").status == "refused"  # type: ignore[union-attr]
    refused = [e for e in events if isinstance(e, PublishRefused)]
    assert len(refused) == 1 and why in refused[0].reason
    checked = [e for e in events if isinstance(e, GuardChecked)]
    assert len(checked) == 1 and checked[0].degeneration == 1.0
    assert checked[0].base_degeneration == s.degeneration
    assert f"degeneration 1.00 vs {s.degeneration:.2f}" in checked[0].summary
    # each version's rate is stored beside its other scores (the Dashboard's curve)
    rates = {m.version: m.value for m in store.metrics(DEGENERATION)}
    assert rates == {"base": s.degeneration, "v1": 1.0}
    status = guard.status()
    assert status["recent"][-1]["degeneration"] == 1.0 and not status["recent"][-1]["passed"]
    store.close()


def test_the_users_prompts_are_answered_at_the_budget_their_requests_set(
    loaded_model: tuple[Any, Any], looping_adapter: Path, tmp_path: Path
) -> None:
    """The looping adapter answers the capitals "Paris is Paris is ...". Two of them were
    asked with max_tokens 4: the answer stops before a loop can show (no loop the user
    would see); two with no budget, answered at `open_max_tokens` (64): they loop. So the
    rate is exactly 2 of 4 (with `user_form_min_tokens` 0). Under the default (32) the
    two 4-token requests are left out of the check, too short to show a loop: 2 prompts,
    fewer than it decides on. Real model, real store, the guard's own `user_form`."""
    from clawrl_app.engine.store import NewTurn

    model, tok = loaded_model
    fmt = ChatFormatter(tok)
    settings = SETTINGS.model_copy(update={"user_form_items": 4, "user_form_min_tokens": 0})
    with Store(tmp_path / "store.db") as store:
        store.ensure_session("chat", "test")
        for k, q in enumerate(QUESTIONS[:4]):
            body: dict[str, Any] = {"messages": [{"role": "user", "content": q.question}]}
            if k % 2 == 0:
                body["max_tokens"] = 4
            store.record_turn(NewTurn("chat", "main", body, "a", [1] * 8, [2], [0.0], "base"))

        async def go() -> tuple[UserForm, UserForm]:
            be = TorchBackend(copy.deepcopy(model), tok, model_name="m", context_length=2048)
            await be.start()
            try:
                await be.load_adapter("v1", looping_adapter)
                guard = RegressionGuard(store, be, fmt, settings, QUESTIONS, OPEN)
                default = settings.model_copy(update={"user_form_min_tokens": 32})
                skipping = RegressionGuard(store, be, fmt, default, QUESTIONS, OPEN)
                return await guard.user_form("v1"), await skipping.user_form("v1")
            finally:
                await be.stop()

        form, without_short = asyncio.run(go())
    assert without_short.n == 2 and without_short.rate is None
    assert form.n == 4 and form.rate == 0.5
    assert form.base_rate is not None and form.base_rate <= 0.5
    # the two looping answers repeat most of their phrases; the base's hardly any
    assert form.repetition is not None and form.base_repetition is not None
    assert form.repetition - form.base_repetition > 0.25


def test_open_prompts_at_the_users_length_refuse_loops_the_base_does_not_make(
    loaded_model: tuple[Any, Any], looping_adapter: Path, tmp_path: Path
) -> None:
    """The user's newest requests set max_tokens 48, 48, 48 and none (64, the cap): their
    answer length is 48. The guard answers its open prompts at 48 tokens with the candidate
    and the base model: the looping adapter loops on both ("You can do it. You can ..."),
    the base on at most one, and a new loop in 2 answers is more than 0.05 of them allow:
    refused on this rule alone (the general check, the open prompts at `open_max_tokens` and the
    user's prompts are off). The base's answers are kept per length. Real model, real store,
    the guard's own `check`."""
    from clawrl_app.engine.store import NewTurn

    model, tok = loaded_model
    fmt = ChatFormatter(tok)
    settings = GuardSettings(general_items=0, open_prompts=0, budget_prompts=2,
                             open_max_tokens=64, user_form_items=0)  # fmt: skip
    with Store(tmp_path / "s.db") as store:
        store.ensure_session("chat", "test")
        for k, budget in enumerate((None, 48, 48, 48)):
            body: dict[str, Any] = {"messages": [{"role": "user", "content": f"Question {k}?"}]}
            if budget is not None:
                body["max_tokens"] = budget
            store.record_turn(NewTurn("chat", "main", body, "a", [1] * 8, [2], [0.0], "base"))

        async def go() -> tuple[Any, Any, RegressionGuard]:
            be = TorchBackend(copy.deepcopy(model), tok, model_name="m", context_length=2048)
            await be.start()
            try:
                await be.load_adapter("v1", looping_adapter)
                guard = RegressionGuard(store, be, fmt, settings, QUESTIONS, OPEN)
                off = settings.model_copy(update={"budget_prompts": 0})
                unchecked = await RegressionGuard(store, be, fmt, off, QUESTIONS, OPEN).check(
                    "v1", "base", 1
                )
                return await guard.check("v1", "base", 1), unchecked, guard
            finally:
                await be.stop()

        verdict, unchecked, guard = asyncio.run(go())
        assert list(guard._base_budget) == [(48, False)] and guard.status()["budget_prompts"] == 2
    c = verdict.candidate
    assert (c.budget_tokens, c.budget_n) == (48, 2)
    # the adapter loops on both; the base on at most one (measured: 1, the story)
    base_rate = c.base_budget_degeneration
    assert c.budget_degeneration == 1.0 and base_rate is not None and base_rate <= 0.5
    assert c.budget_new_loops == 1.0 - base_rate and not verdict.passed
    new = round(2 * (1.0 - base_rate))
    assert verdict.reasons == [
        f"at your answer length (48 tokens): {new} of 2 open prompts answered in a loop where "
        "the base's answers are not (at most 0: 0.05 of them)"
    ]
    assert f"at your length (48 tokens) degeneration 1.00 vs base {base_rate:.2f}" in (
        verdict.summary()
    )
    assert verdict.as_dict()["budget_new_loops"] == c.budget_new_loops
    # without this check nothing here refuses it
    assert unchecked.passed and unchecked.candidate.budget_n == 0


def test_a_refusal_resting_on_one_answer_is_confirmed_on_the_next_prompts(
    loaded_model: tuple[Any, Any], looping_adapter: Path, tmp_path: Path
) -> None:
    """Of the user's 6 newest prompts, one is asked with no answer budget: the looping
    adapter loops on it (64 tokens), the base does not; the other 5 allow 4 tokens, too few
    to loop. One loop in 6 refuses by one answer (margins 0.1 here); the guard asks the 6
    before them too. With none of those looping (1 of 12) the version passes, confirmed;
    with a second loop among them (2 of 12) the refusal stands; `user_form_confirm` off: one
    answer decides. Only the rules on the user's prompts decide here (no general set, new
    loops off); then the new-loops rule alone (0.05: none of 6 answers may loop anew, 1 of
    12 may), the same way. Real model, real store, the guard's own `check`."""
    from clawrl_app.engine.store import NewTurn

    model, tok = loaded_model
    fmt = ChatFormatter(tok)
    others = [i.question for i in load_general_set()[6:16]]  # never trained to loop
    settings = USER_PROMPTS_ONLY

    def store_with(unbudgeted_older: bool, path: Path) -> Store:
        """12 turns, oldest first; the newest one unbudgeted (a looping question); with
        `unbudgeted_older`, also the oldest (another looping question)."""
        store = Store(path)
        store.ensure_session("chat", "test")
        texts = [QUESTIONS[1].question, *others[:10], QUESTIONS[0].question]
        for k, text in enumerate(texts):
            body: dict[str, Any] = {"messages": [{"role": "user", "content": text}]}
            if not (k == 11 or (k == 0 and unbudgeted_older)):
                body["max_tokens"] = 4
            store.record_turn(NewTurn("chat", "main", body, "a", [1] * 8, [2], [0.0], "base"))
        return store

    async def go(one: Store, two: Store) -> list[Any]:
        be = TorchBackend(copy.deepcopy(model), tok, model_name="m", context_length=2048)
        await be.start()
        try:
            await be.load_adapter("v1", looping_adapter)
            alone = settings.model_copy(update={"user_form_confirm": False})
            loops = settings.model_copy(update={
                "max_new_loops": 0.05, "max_degeneration_rise": 1.0, "max_repetition_rise": 1.0
            })  # fmt: skip
            return [
                await RegressionGuard(store, be, fmt, s, QUESTIONS, OPEN).check("v1", "base", 1)
                for store, s in (
                    (one, settings), (one, alone), (two, settings), (one, loops), (two, loops)
                )
            ]  # fmt: skip
        finally:
            await be.stop()

    with store_with(False, tmp_path / "a.db") as one, store_with(True, tmp_path / "b.db") as two:
        clean, alone, again, loops_clean, loops_again = asyncio.run(go(one, two))
    # one answer alone: refused on 6 prompts
    assert not alone.passed and alone.candidate.user_n == 6
    assert not alone.candidate.user_confirmed
    assert alone.candidate.user_degeneration == pytest.approx(1 / 6)
    assert alone.candidate.base_user_degeneration == 0.0
    assert "degeneration on your own prompts 0.17 vs base 0.00" in alone.reasons[0]
    # confirmed on the next 6, none looping: passed on 12
    assert clean.passed and clean.candidate.user_n == 12 and clean.candidate.user_confirmed
    assert clean.candidate.user_degeneration == pytest.approx(1 / 12)
    assert "(12 prompts, confirmed)" in clean.summary()
    assert clean.as_dict()["user_confirmed"] is True
    # a second loop in the next 6: refused on 12
    assert not again.passed and again.candidate.user_n == 12
    assert again.candidate.user_degeneration == pytest.approx(2 / 12)
    assert "on 12 prompts" in again.reasons[0]
    # the new-loops rule: 1 of 6 new (none allowed) rests on one answer; confirmed on 12
    # (1 allowed) it passes, and a second new loop among them keeps the refusal
    assert loops_clean.passed and loops_clean.candidate.user_confirmed
    assert (loops_clean.candidate.new_loops, loops_clean.candidate.new_loops_n) == (1 / 12, 12)
    assert not loops_again.passed and loops_again.candidate.new_loops_n == 12
    assert loops_again.reasons == [
        "new loops: 2 of 12 of its answers degenerate where the base's are not "
        "(at most 1: 0.05 of them)"
    ]


def test_a_refusal_too_few_prompts_can_confirm_is_deferred_until_they_exist(
    loaded_model: tuple[Any, Any], looping_adapter: Path, tmp_path: Path, monkeypatch: Any
) -> None:
    """The user has written 8 prompts, the newest with no answer budget (the looping
    adapter loops on it), the others at 4 tokens. One loop in 6 refuses by one answer; the
    2 prompts left cannot confirm it (1 of 8 still rests on one answer), so the verdict is
    deferred until 12 prompts: not a refusal (the guard's `refused` stays 0), and the
    version `waiting` until 4 more prompts are recorded. Checked again on 12, one loop in
    12 passes. Real model, real store, the guard's own `check` and `waiting`."""
    from clawrl_app.engine.publishing import guard as guard_module
    from clawrl_app.engine.store import NewTurn

    monkeypatch.setattr(guard_module, "WAIT_POLL_S", 0.0)  # count the prompts on each ask
    model, tok = loaded_model
    fmt = ChatFormatter(tok)
    others = [i.question for i in load_general_set()[6:17]]  # never trained to loop
    settings = USER_PROMPTS_ONLY

    def record(store: Store, text: str, budget: int | None) -> None:
        body: dict[str, Any] = {"messages": [{"role": "user", "content": text}]}
        if budget is not None:
            body["max_tokens"] = budget
        store.record_turn(NewTurn("chat", "main", body, "a", [1] * 8, [2], [0.0], "base"))

    async def go(store: Store) -> list[Any]:
        be = TorchBackend(copy.deepcopy(model), tok, model_name="m", context_length=2048)
        await be.start()
        try:
            await be.load_adapter("v1", looping_adapter)
            guard = RegressionGuard(store, be, fmt, settings, QUESTIONS, OPEN)
            first = await guard.check("v1", "base", 1)
            status = guard.status()
            before = guard.waiting("v1")
            for text in others[7:11]:
                record(store, text, 4)
            after = guard.waiting("v1")
            again = guard.was_deferred("v1")
            second = await guard.check("v1", "base", 1)
            return [first, status, before, after, again, second, guard.status()]
        finally:
            await be.stop()

    with Store(tmp_path / "s.db") as store:
        store.ensure_session("chat", "test")
        for text in others[:7]:
            record(store, text, 4)
        record(store, QUESTIONS[0].question, None)  # the newest: the adapter loops on it
        first, status, before, after, again, second, last = asyncio.run(go(store))
    assert not first.passed and first.deferred and first.deferred_until == 12
    assert first.candidate.user_n == 8 and first.candidate.user_confirmed
    assert first.candidate.user_degeneration == pytest.approx(1 / 8)
    assert "deferred: rests on one answer, checked again at 12 of your prompts" in first.summary()
    assert first.as_dict()["deferred_until"] == 12
    assert (status["refused"], status["deferred"], status["waiting"]) == (0, 1, ["v1"])
    assert (before, after, again) == (True, False, True)
    assert second.passed and not second.deferred and second.candidate.user_n == 12
    assert second.candidate.user_degeneration == pytest.approx(1 / 12)
    assert (last["checked"], last["refused"], last["waiting"]) == (2, 0, [])


def test_a_refusal_at_the_users_length_by_one_loop_is_confirmed_on_more_open_prompts(
    loaded_model: tuple[Any, Any], looping_adapter: Path, tmp_path: Path
) -> None:
    """At the user's length (48 tokens) the looping adapter loops on every open prompt; the
    base model loops on "Explain how a bicycle works." alone. With the margin at 0.5 (2
    prompts: 1 new loop may pass; 4: 2 may), the first 2 prompts (a story, a weekend) give
    2 new loops: refused, by one loop too many. The guard asks the next 2 (`budget_more`)
    and decides on all 4: where both are the bicycle, which the base loops on too, the new
    loops stay 2 of 4 and the version passes, confirmed; where both are new loops (advice,
    a list), 4 of 4 keep the refusal; with `budget_confirm` off, the 2 decide. Only the rule
    at the user's length decides here. Real model, real store, the guard's own `check`."""
    from clawrl_app.engine.store import NewTurn

    model, tok = loaded_model
    fmt = ChatFormatter(tok)
    shipped = {p.prompt: p for p in load_open_prompts()}
    story, weekend, bicycle = (shipped[q] for q in (
        "Write a short story about a lost key.", "Describe your ideal weekend.",
        "Explain how a bicycle works.",
    ))  # fmt: skip
    advice = shipped["Give some advice to someone starting their first job."]
    water = shipped["List some ways to save water at home."]
    settings = GuardSettings(general_items=0, open_prompts=0, budget_prompts=2,
                             open_max_tokens=64, user_form_items=0, max_new_loops=0.5)  # fmt: skip
    with Store(tmp_path / "s.db") as store:
        store.ensure_session("chat", "test")
        for k in range(4):
            body = {"messages": [{"role": "user", "content": f"Question {k}?"}], "max_tokens": 48}
            store.record_turn(NewTurn("chat", "main", body, "a", [1] * 8, [2], [0.0], "base"))

        async def go() -> list[Any]:
            be = TorchBackend(copy.deepcopy(model), tok, model_name="m", context_length=2048)
            await be.start()
            try:
                await be.load_adapter("v1", looping_adapter)
                off = settings.model_copy(update={"budget_confirm": False})
                return [
                    await RegressionGuard(store, be, fmt, s, QUESTIONS, prompts).check(
                        "v1", "base", 1
                    )
                    for s, prompts in (
                        (settings, [story, weekend, bicycle, bicycle]),
                        (settings, [story, weekend, advice, water]),
                        (off, [story, weekend, bicycle, bicycle]),
                    )
                ]
            finally:
                await be.stop()

        passed, stands, alone = asyncio.run(go())
    assert not alone.passed and not alone.candidate.budget_confirmed
    assert (alone.candidate.budget_n, alone.candidate.budget_new_loops) == (2, 1.0)
    assert alone.reasons == [
        "at your answer length (48 tokens): 2 of 2 open prompts answered in a loop where "
        "the base's answers are not (at most 1: 0.5 of them)"
    ]
    c = passed.candidate
    assert passed.passed and c.budget_confirmed and c.budget_n == 4
    assert (c.budget_new_loops, c.budget_degeneration, c.base_budget_degeneration) == (
        0.5,
        1.0,
        0.5,
    )
    assert "new loops 2 of 4, confirmed" in passed.summary()
    assert passed.as_dict()["budget_confirmed"] is True
    assert not stands.passed and stands.candidate.budget_confirmed
    assert (stands.candidate.budget_n, stands.candidate.budget_new_loops) == (4, 1.0)
    assert stands.reasons == [
        "at your answer length (48 tokens): 4 of 4 open prompts answered in a loop where "
        "the base's answers are not (at most 2: 0.5 of them)"
    ]
