"""The policy's own answer cut where the teacher would stop, as a +1 sample (issue #29).

Pure parts with a word-per-token stand-in for the tokenizer; then the real model in the
torch backend on a real recorded turn.
"""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from typing import Any

import pytest

from clawrl_app.engine.judging.teacher_cut import (
    MAX_CUTS,
    asks_for_less,
    choose_cut,
    cut_of,
    sentence_ends,
)

LESS = [
    "Shorter please, 25 words max.",
    "That is a lot of text. Keep it to about a dozen words, please.",
    "Too long. Please answer in at most 15 words.",
    "Can you be more brief?",
    "tl;dr please",
    "Way too wordy.",
    "Keep it to one sentence.",
    "Please answer in 2 sentences.",
    "That's a wall of text.",
    "Cut it down, no more than 40 words.",
    "Answer in under 50 words next time.",
    "Be concise.",
    "Keep it short!",
    "A one-liner is enough.",
    "Just the gist, please.",
    "30 words max",
]
NOT_LESS = [
    "Please don't use exclamation marks or emoji.",
    "Use bullet points.",
    "Can you explain in more detail?",
    "Make it longer, it's too short.",
    "Be more formal.",
    "Thanks!",
    "What about France?",
    "List 5 words that rhyme with cat.",
    "Please write it in French.",
    "Too brief, expand on the second point.",
]


@pytest.mark.parametrize("hint", LESS)
def test_a_hint_that_asks_for_less_is_heard(hint: str) -> None:
    assert asks_for_less(hint)


@pytest.mark.parametrize("hint", NOT_LESS)
def test_a_hint_about_tone_format_content_or_more_is_not_a_length_request(hint: str) -> None:
    assert not asks_for_less(hint)


# a word per token, its leading space included, as a tokenizer decodes
def tokens(text: str) -> list[str]:
    return [w if i == 0 else f" {w}" for i, w in enumerate(text.split())]


TOKENS = tokens("The sky is blue. It scatters light. 1. The value is 3.5 in total! Yes!")
IDS = list(range(len(TOKENS)))


def decode(ids: list[int]) -> str:
    return "".join(TOKENS[i] for i in ids)


def test_sentences_end_after_a_word_never_a_number_and_never_at_the_answers_end() -> None:
    ends = sentence_ends(IDS, decode)
    assert [decode(IDS[:i]) for i in ends] == [
        "The sky is blue.",
        "The sky is blue. It scatters light.",
        "The sky is blue. It scatters light. 1. The value is 3.5 in total!",
    ]  # "1." and "3.5" end nothing; "Yes!" ends the answer itself
    many = [f" Word{i} one two." for i in range(20)]
    assert len(sentence_ends(list(range(20)), lambda ids: "".join(many[i] for i in ids))) == (
        MAX_CUTS
    )
    assert sentence_ends([0, 1], lambda ids: " Hi." if ids == [0] else " Hi. Ok") == []  # < 3 words


def test_the_first_sentence_end_where_the_teacher_would_stop_is_the_cut() -> None:
    lp = math.log
    assert choose_cut([(4, lp(0.05)), (8, lp(0.37)), (12, lp(0.9))]) == 8
    assert choose_cut([(4, lp(0.05)), (8, lp(0.09))]) is None
    assert choose_cut([(4, lp(0.1))]) == 4  # the floor is allowed
    assert choose_cut([]) is None


def scorer(p_end: dict[int, float]) -> Any:
    """The teacher's log-probs of a response: the end token's at its position from `p_end`
    (by the prefix length), 0 elsewhere; records what it was asked."""
    asked: list[int] = []

    async def score(response: list[int]) -> list[float]:
        asked.append(len(response) - 1)
        return [0.0] * (len(response) - 1) + [math.log(p_end.get(len(response) - 1, 1e-4))]

    score.asked = asked  # type: ignore[attr-defined]
    return score


def test_the_cut_is_the_answer_up_to_there_and_the_end_token() -> None:
    ends = sentence_ends(IDS, decode)
    score = scorer({ends[0]: 0.02, ends[1]: 0.6})
    cut = asyncio.run(cut_of(IDS, 99, decode, score))
    assert cut == [*IDS[: ends[1]], 99]
    assert score.asked == ends[:2]  # scored in order until one is kept
    # nowhere to stop short of 3/4 of the answer's words: no cut (the third end keeps 13 of 15)
    score = scorer({ends[2]: 0.9})
    assert asyncio.run(cut_of(IDS, 99, decode, score)) is None and score.asked == ends[:2]


def test_a_cut_that_loops_is_no_cut() -> None:
    tail = " And then a long tail of words that keeps the cut well under three quarters."

    def cut(head: str) -> list[int] | None:
        toks = tokens(head + tail)
        ids = list(range(len(toks)))

        def dec(ids: list[int]) -> str:
            return "".join(toks[i] for i in ids)

        late = sentence_ends(ids, dec)[4]  # after the fifth sentence
        return asyncio.run(cut_of(ids, 7, dec, scorer({late: 0.5})))

    assert cut("You can do it. You can do it. You can do it. You can do it. Then stop.") is None
    fine = cut("Rest well at night. Eat early. Walk daily. Read a book. Then stop.")
    assert fine is not None and fine[-1] == 7  # the same place in an answer that does not loop


@pytest.mark.slow
def test_the_real_teacher_cuts_a_long_answer_for_a_length_request_only(
    loaded_model: tuple[Any, Any], tmp_path: Path
) -> None:
    """Real model, torch backend: the base model's greedy answer to "How can I sleep
    better?" (64 tokens, cut off at the budget) recorded as a turn. Reading "Shorter
    please, 25 words max." the teacher would stop after its first sentence (measured 0.68):
    the cut is that sentence and the end-of-turn token, the answer's own tokens before it.
    "Please don't use exclamation marks or emoji." asks for no cut."""
    from clawrl_app.engine.backends.greedy import greedy_tokens
    from clawrl_app.engine.backends.pytorch.backend import TorchBackend
    from clawrl_app.engine.chat.formatter import ChatFormatter
    from clawrl_app.engine.judging.teacher_answer import TeacherShowing, teacher_shows
    from clawrl_app.engine.store import NewTurn, Store

    model, tok = loaded_model
    fmt = ChatFormatter(tok)
    msgs = [{"role": "user", "content": "How can I sleep better?"}]

    async def go() -> tuple[Any, Any, Any, Any]:
        be = TorchBackend(model, tok, model_name="m", context_length=2048)
        await be.start()
        try:
            ids, reason = await greedy_tokens(be, fmt, "base", msgs, 64)
            with Store(tmp_path / "s.sqlite3") as store:
                store.ensure_session("s", "api")
                row = store.record_turn(NewTurn(
                    "s", "main", {"messages": msgs, "max_tokens": 64}, "a", fmt.render(msgs),
                    ids, [-0.1] * len(ids), "base",
                ))  # fmt: skip
            assert row is not None and reason == "length"
            short = await teacher_shows(
                be, fmt, row, "Shorter please, 25 words max.", None, 0, TeacherShowing(cut=True)
            )
            plain = await teacher_shows(
                be,
                fmt,
                row,
                "Please don't use exclamation marks or emoji.",
                None,
                0,
                TeacherShowing(cut=True),
            )
            off = await teacher_shows(be, fmt, row, "Shorter please, 25 words max.", None, 0)
            return ids, short, plain, off
        finally:
            await be.stop()

    ids, short, plain, off = asyncio.run(go())
    assert short is not None and short[-1] == tok.eos_token_id
    assert short[:-1] == ids[: len(short) - 1]
    text = fmt.decode(short[:-1])
    assert text.endswith(".") and len(text.split()) < 0.75 * len(fmt.decode(ids).split())
    assert plain is None and off is None
