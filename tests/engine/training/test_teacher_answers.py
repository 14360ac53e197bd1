"""The teacher's own answer under the hint as a +1 sample of the turn (issue #29).

The store keeps it with the judgment (a real SQLite file); `train_data` makes it one more
item of the turn, rewarded +1, without behaviour log-probs; the forward pass takes the
policy's current log-probs for it (ratio 1); the trainer counts samples, not items, toward
its batch; and a real step on the
embedded model makes the shown answer likelier and the policy's own disliked one less so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from clawrl_app.engine.chat.formatter import ChatFormatter, eos_token_ids
from clawrl_app.engine.store import JudgmentRow, Store
from clawrl_app.engine.training.policy_forward import response_logprobs
from clawrl_app.engine.training.train_data import TrainItem, demonstration_item
from clawrl_app.models import ResolvedModel
from tests.engine.training.rank_fixtures import judged_store
from tests.engine.training.test_no_harm import LONG, QUESTIONS, make_trainer, scored


def test_the_store_keeps_the_teacher_answer_with_the_judgment(tmp_path: Path) -> None:
    ids = judged_store(tmp_path / "s.sqlite3", 2)
    with Store(tmp_path / "s.sqlite3") as store:
        assert store.get_judgment(ids[0]).teacher_answer_ids is None  # type: ignore[union-attr]
        assert store.set_teacher_answer(ids[0], [5, 6, 2])
        assert store.get_judgment(ids[0]).teacher_answer_ids == [5, 6, 2]  # type: ignore[union-attr]
        assert store.get_judgment(ids[1]).teacher_answer_ids is None  # type: ignore[union-attr]
        assert store.set_teacher_answer(ids[0], None)
        assert store.get_judgment(ids[0]).teacher_answer_ids is None  # type: ignore[union-attr]


def own(reward: float = -1.0, centred: bool = False) -> TrainItem:
    return TrainItem(7, "s", [1, 2, 3], [4, 5], [-1.0, -2.0], 0.7, reward, True, None, "v2",
                     centred=centred)  # fmt: skip


def judgment(answer: list[int] | None) -> JudgmentRow:
    return JudgmentRow(1, 7, "heuristic", [], -1.0, -1.0, "Shorter.", [], None, None, None,
                       None, 0.0, teacher_answer_ids=answer)  # fmt: skip


def test_the_teacher_answer_is_one_more_sample_of_the_turn_rewarded_plus_one() -> None:
    demo = demonstration_item(own(), judgment([8, 9, 2]), "combine")
    assert demo is not None and demo.demonstration
    assert (demo.sample_id, demo.prompt_ids, demo.response_ids) == (7, [1, 2, 3], [8, 9, 2])
    assert demo.reward == 1.0 and demo.has_reward and demo.old_logprobs == []
    assert demo.teacher_logprobs is None and demo.temperature == 0.7
    assert demonstration_item(own(), judgment([8, 9, 2]), "combine-stop") is not None
    assert demonstration_item(own(), judgment([8, 9, 2]), "opd") is None  # no reward term
    assert demonstration_item(own(), judgment(None), "combine") is None
    assert demonstration_item(own(centred=True), judgment([8]), "combine") is None  # an env turn


def test_the_forward_pass_takes_the_policys_own_log_probs_for_a_shown_answer() -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=2)  # fmt: skip
    model = LlamaForCausalLM(cfg)
    real = own()
    demo = demonstration_item(real, judgment([8, 9, 2]), "combine")
    assert demo is not None
    out = response_logprobs(model, [real, demo], "cpu")
    m = out.mask_BT.bool()
    assert torch.equal(out.old_logprobs_BT[1][m[1]], out.logprobs_BT[1][m[1]].detach())
    assert out.old_logprobs_BT[0][m[0]].tolist() == [-1.0, -2.0]  # a sample keeps its own


@pytest.mark.slow
def test_a_step_makes_the_shown_answer_likelier_and_counts_samples_not_items(
    tmp_path: Path, embedded_model: ResolvedModel
) -> None:
    tr = make_trainer(tmp_path, embedded_model)
    tok, fmt = tr.tokenizer, ChatFormatter(tr.tokenizer)
    eos = sorted(eos_token_ids(tok))[:1]
    long = list(tok(LONG, add_special_tokens=False)["input_ids"])[:32]
    short = list(tok("Plants make food from light.", add_special_tokens=False)["input_ids"])
    prompts = [fmt.render([{"role": "user", "content": q}]) for q in QUESTIONS[:4]]
    mine = [
        TrainItem(k, f"s{k}", p, long, scored(tr, p, long, 1.0), 1.0, -1.0, True, None, "base")
        for k, p in enumerate(prompts)
    ]
    shown = [demonstration_item(it, judgment(short + eos), "combine") for it in mine]
    items = mine + [d for d in shown if d is not None]
    assert len(items) == 8
    before_short = sum(scored(tr, prompts[0], short + eos, 1.0))
    before_long = sum(scored(tr, prompts[0], long, 1.0))
    metrics = tr.train_step(items)
    assert metrics["optim/grad_norm"] > 0 and "optim/skipped" not in metrics
    assert sum(scored(tr, prompts[0], short + eos, 1.0)) > before_short + 1.0
    assert sum(scored(tr, prompts[0], long, 1.0)) < before_long


@pytest.mark.slow
def test_a_batch_is_full_with_batch_size_samples_whatever_the_shown_answers(
    tmp_path: Path, embedded_model: ResolvedModel
) -> None:
    """Three judged samples with their three shown answers are six items but not a batch of
    4; a fourth sample makes one (eight items)."""
    ids = judged_store(tmp_path / "s.sqlite3", 4, rewards=[-1.0] * 4, teacher_every=0)
    with Store(tmp_path / "s.sqlite3") as store:
        for k in ids:
            store.set_teacher_answer(k, [300, 301, 2])
        store.set_sample_state(ids[3], "skipped", "held back by the test")
    tr = make_trainer(tmp_path, embedded_model)
    assert tr.decide() == ("wait", [])
    assert len(tr.next_batch()) == 6
    with Store(tmp_path / "s.sqlite3") as store:
        store.set_sample_state(ids[3], "judged")
    verdict, items = tr.decide()
    assert verdict == "train" and len(items) == 8
    assert sum(it.demonstration for it in items) == 4
    assert sorted({it.sample_id for it in items}) == sorted(ids)


def test_an_answer_that_quotes_the_hint_is_no_answer() -> None:
    """The teacher sometimes rewrites the correction instead of answering ("Sure, here's a
    more concise version: 'Shorter, 25 words max.'"): a 3-word phrase of the hint, any case."""
    from clawrl_app.engine.judging.teacher_answer import quotes

    hint = "Shorter please, 25 words max."
    assert quotes('Sure, here\'s a more concise version: "Shorter, 25 words MAX."', hint)
    assert not quotes("To start running, just run.", hint)
    assert not quotes("Use 25 words or fewer.", hint)  # two words in a row are not a quote
    # nor the label that introduces the hint in the teacher's prompt (two words of it)
    from clawrl_app.engine.judging.prompts import HINT_MARKER

    assert quotes("The answer to this question is: [user's hint / instruction]", HINT_MARKER, 2)
    assert not quotes("A hint: read the instructions first.", HINT_MARKER, 2)


def photosynthesis_turns(tmp_path: Path) -> tuple[list[dict[str, str]], Any, Any]:
    """The question "What is photosynthesis?" recorded twice in a real store: once with a
    long answer (five times the same sentence, 50 words), once with a short one."""
    from clawrl_app.engine.store import NewTurn

    msgs = [{"role": "user", "content": "What is photosynthesis?"}]
    long_answer = " ".join(["Photosynthesis turns light, water and carbon dioxide into sugar."] * 5)
    with Store(tmp_path / "s.sqlite3") as store:
        store.ensure_session("s", "api")
        row, short_row = (store.record_turn(NewTurn(
            "s", "main", {"messages": msgs, "max_tokens": 64}, text, [1], [2], [-0.1], "base"
        )) for text in (long_answer, "Plants make sugar from light."))  # fmt: skip
    assert row is not None and short_row is not None
    return msgs, row, short_row


@pytest.mark.slow
def test_the_teacher_answer_must_carry_the_hint(
    loaded_model: tuple[Any, Any], tmp_path: Path
) -> None:
    """Real model, torch backend, greedy. Reading "Too long. Please answer in at most 15
    words." the base model answers photosynthesis in 10 words (kept); reading "That is a
    lot of text. Keep it to about a dozen words, please." in 52, as without the hint
    (measured gain -0.01 nats per token): dropped, or it would be rewarded +1 for length."""
    import asyncio

    from clawrl_app.engine.backends.pytorch.backend import TorchBackend
    from clawrl_app.engine.judging.teacher_answer import hint_gain, teacher_answer

    model, tok = loaded_model
    fmt = ChatFormatter(tok)
    msgs, row, short_row = photosynthesis_turns(tmp_path)
    brief = "Too long. Please answer in at most 15 words."
    dozen = "That is a lot of text. Keep it to about a dozen words, please."

    async def go() -> tuple[Any, Any, float, Any]:
        be = TorchBackend(model, tok, model_name="m", context_length=2048)
        await be.start()
        try:
            kept = await teacher_answer(be, fmt, row, brief, None, 64)
            dropped = await teacher_answer(be, fmt, row, dozen, None, 64)
            gain = await hint_gain(be, fmt, msgs, brief, kept or [], None) if kept else 0.0
            longer = await teacher_answer(be, fmt, short_row, brief, None, 64)
            return kept, dropped, gain, longer
        finally:
            await be.stop()

    kept, dropped, gain, longer = asyncio.run(go())
    assert kept is not None and len(fmt.decode(kept).split()) <= 15 and gain >= 0.2
    assert dropped is None
    # The same answer, shown beside a rejected one of 5 words, would reward going longer.
    assert len(fmt.decode(kept).split()) >= 5 and longer is None


def test_an_answer_and_its_cut_are_a_stop_pair_that_trains_one_position() -> None:
    """The cut (the answer's first 1 token, then an end token) and the rejected answer
    differ at position 1: each trains that position alone, as their own baseline (+1 / -1,
    centred). A teacher answer that is not a cut, a liked answer or an env turn is no pair;
    `with_demonstration` pairs what it can."""
    from clawrl_app.engine.training.train_data import stop_pair, with_demonstration

    mine = own()  # response [4, 5], reward -1
    cut = demonstration_item(mine, judgment([4, 2]), "combine")
    assert cut is not None
    pair = stop_pair(mine, cut)
    assert pair is not None
    a, b = pair
    assert (a.response_ids, a.span, a.centred, a.reward) == ([4, 5], (1, 2), True, -1.0)
    assert (b.response_ids, b.span, b.centred, b.reward) == ([4, 2], (1, 2), True, 1.0)
    assert b.demonstration and a.old_logprobs == [-1.0, -2.0]
    assert stop_pair(mine, demonstration_item(mine, judgment([8, 9, 2]), "combine")) is None  # type: ignore[arg-type]
    assert stop_pair(mine, demonstration_item(mine, judgment([4, 5, 2]), "combine")) is None  # type: ignore[arg-type]
    assert stop_pair(mine, demonstration_item(mine, judgment([2]), "combine")) is None  # type: ignore[arg-type]
    assert stop_pair(own(reward=1.0), cut) is None
    assert stop_pair(mine, mine) is None  # not a demonstration
    assert with_demonstration(mine, judgment([4, 2]), "combine") == pair
    plain, shown = with_demonstration(mine, judgment([8, 9, 2]), "combine")
    assert plain == mine and shown is not None and shown.span is None
    assert with_demonstration(mine, judgment(None), "combine") == (mine, None)


def test_a_span_leaves_every_other_response_position_out_of_the_loss() -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    from clawrl_app.engine.training.train_data import stop_pair

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=2)  # fmt: skip
    model = LlamaForCausalLM(cfg)
    mine = TrainItem(7, "s", [1, 2, 3], [4, 5, 6, 7], [-1.0] * 4, 1.0, -1.0, True, None, "v2")
    cut = demonstration_item(mine, judgment([4, 5, 2]), "combine")
    pair = stop_pair(mine, cut)  # type: ignore[arg-type]
    assert pair is not None
    out = response_logprobs(model, [*pair, own()], "cpu")
    assert out.mask_BT.tolist() == [
        [0.0, 0.0, 1.0, 0.0],  # the answer's third token (it went on)
        [0.0, 0.0, 0.0, 1.0],  # the cut's end token, its last (3 long, left-padded to 4)
        [0.0, 0.0, 1.0, 1.0],  # an item without a span: its whole (2-token) response
    ]


@pytest.mark.slow
def test_a_stop_pair_step_raises_the_end_where_the_cut_ends_and_nothing_else_moves_much(
    tmp_path: Path, embedded_model: ResolvedModel
) -> None:
    """Four rejected 32-token answers, each with its cut after its first sentence: one step
    on the four pairs makes the end token likelier right there, on each prompt; the
    answer's tokens before the cut barely move (they are context only)."""
    from clawrl_app.engine.training.train_data import stop_pair

    tr = make_trainer(tmp_path, embedded_model)
    tok, fmt = tr.tokenizer, ChatFormatter(tr.tokenizer)
    end = [tok.eos_token_id]
    first = list(tok("Plants make food from light.", add_special_tokens=False)["input_ids"])
    rest = list(tok(" " + LONG, add_special_tokens=False)["input_ids"])[:24]
    answer = first + rest
    prompts = [fmt.render([{"role": "user", "content": q}]) for q in QUESTIONS[:4]]
    items: list[TrainItem] = []
    for k, p in enumerate(prompts):
        mine = TrainItem(k, f"s{k}", p, answer, scored(tr, p, answer, 1.0), 1.0, -1.0, True,
                         None, "base")  # fmt: skip
        pair = stop_pair(mine, demonstration_item(mine, judgment(first + end), "combine"))  # type: ignore[arg-type]
        assert pair is not None
        items += list(pair)
    stop_before = [scored(tr, p, first + end, 1.0)[-1] for p in prompts]
    prefix_before = sum(scored(tr, prompts[0], first, 1.0))
    metrics = tr.train_step(items)
    assert metrics["optim/grad_norm"] > 0 and "optim/skipped" not in metrics
    stop_after = [scored(tr, p, first + end, 1.0)[-1] for p in prompts]
    assert all(a > b + 0.5 for a, b in zip(stop_after, stop_before, strict=True)), (
        stop_before, stop_after,
    )  # fmt: skip
    assert abs(sum(scored(tr, prompts[0], first, 1.0)) - prefix_before) < 1.0


@pytest.mark.slow
def test_further_tries_find_an_answer_the_greedy_teacher_could_not_show(
    loaded_model: tuple[Any, Any], tmp_path: Path
) -> None:
    """Real model, torch backend. Reading "That is a lot of text. Keep it to about a dozen
    words, please." the greedy teacher answers as if it had not read the hint (dropped,
    above); sampled tries, seeded by the turn, find one that is kept: it ended on its own,
    is within a dozen words, shorter than the rejected answer, and the hint explains it.
    The tries come after the greedy answer, each with its own seed, and stop at the first
    kept one."""
    import asyncio
    from unittest.mock import patch

    from clawrl_app.engine.backends.pytorch.backend import TorchBackend
    from clawrl_app.engine.judging import teacher_answer as ta

    model, tok = loaded_model
    fmt = ChatFormatter(tok)
    msgs, row, _ = photosynthesis_turns(tmp_path)
    dozen = "That is a lot of text. Keep it to about a dozen words, please."
    calls: list[tuple[float, int | None]] = []
    drawn: list[list[int]] = []
    real = ta.side_tokens

    async def spy(*args: Any) -> tuple[list[int], str | None]:
        calls.append((args[5], args[6]))
        out = await real(*args)
        drawn.append(out[0])
        return out

    async def go() -> tuple[Any, Any, float]:
        be = TorchBackend(model, tok, model_name="m", context_length=2048)
        await be.start()
        try:
            greedy_only = await ta.teacher_answer(be, fmt, row, dozen, None, 64)
            with patch.object(ta, "side_tokens", spy):
                kept = await ta.teacher_answer(
                    be, fmt, row, dozen, None, 64, ta.TeacherShowing(tries=8, temperature=1.0)
                )
            gain = await ta.hint_gain(be, fmt, msgs, dozen, kept or [], None) if kept else 0.0
            return greedy_only, kept, gain
        finally:
            await be.stop()

    greedy_only, kept, gain = asyncio.run(go())
    assert greedy_only is None
    assert kept is not None, f"no kept answer in 8 tries: {calls}"
    text = fmt.decode(kept)
    assert 0 < len(text.split()) <= 12 and gain >= ta.MIN_HINT_GAIN
    assert kept[-1] in eos_token_ids(tok)  # it ended on its own
    assert calls[0] == (0.0, None) and all(t == 1.0 for t, _ in calls[1:])
    seeds = [s for _, s in calls[1:]]
    assert len(set(seeds)) == len(seeds) >= 1 and len(calls) <= 9
    assert drawn[-1] == kept  # the first kept one ends the tries


def test_the_teacher_reading_the_form_cue_shows_what_the_dozen_user_asked_for(
    loaded_model: tuple[Any, Any], tmp_path: Path
) -> None:
    """Real model, torch backend, greedy. Reading "That is a lot of text. Keep it to about a
    dozen words, please." the teacher answers photosynthesis as if it had not read the hint
    (dropped, above); reading it with its form cue (" One short sentence.",
    `judge.teacher_cue`) it answers within the dozen words, and the answer is kept: held to
    the request's own limit, and the hint it read explains it."""
    import asyncio
    from unittest.mock import patch

    from clawrl_app.engine.backends.pytorch.backend import TorchBackend
    from clawrl_app.engine.judging import teacher_answer as ta

    model, tok = loaded_model
    fmt = ChatFormatter(tok)
    _, row, _ = photosynthesis_turns(tmp_path)
    dozen = "That is a lot of text. Keep it to about a dozen words, please."
    read: list[str] = []
    real = ta.side_tokens

    async def spy(*args: Any) -> tuple[list[int], str | None]:
        read.append(str(args[3][-1]["content"]))
        return await real(*args)

    async def go() -> tuple[Any, Any]:
        be = TorchBackend(model, tok, model_name="m", context_length=2048)
        await be.start()
        try:
            with patch.object(ta, "side_tokens", spy):
                plain = await ta.teacher_answer(be, fmt, row, dozen, None, 64)
                cued = await ta.teacher_answer(
                    be, fmt, row, dozen, None, 64, ta.TeacherShowing(cue=True)
                )
            return plain, cued
        finally:
            await be.stop()

    plain, cued = asyncio.run(go())
    assert plain is None
    assert not read[0].endswith("One short sentence.")
    assert read[1].endswith(dozen + " One short sentence.")
    assert cued is not None, "the cued teacher's answer was dropped"
    assert 0 < len(fmt.decode(cued).split()) <= 12
