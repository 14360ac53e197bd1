"""The benchmark's personas (bench/learn_personas.py): checkers, prompts and replies."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from learn_personas import (  # noqa: E402
    PERSONAS,
    POOL_USERS,
    USERS,
    bulleted_list,
    calm_plain,
    form_pool,
    one_short_sentence,
    summary_first,
    words_at_most,
)

from clawrl_app.engine.judging.heuristic_judge import classify_next_state  # noqa: E402


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("Photosynthesis turns light into sugar.", True),
        ("Paris", True),
        ("It is 3.14, roughly.", True),
        ("", False),
        ("One sentence. Two sentences.", False),
        ("Line one\nline two", False),
        (" ".join(["word"] * 21) + ".", False),
    ],
)
def test_one_short_sentence(text: str, ok: bool) -> None:
    assert one_short_sentence(text) is ok


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("- sleep early\n- no screens", True),
        ("Here are some tips:\n* sleep early\n* no screens\n* dark room", True),
        ("• one\n\n• two", True),
        ("- only one bullet", False),
        ("Sleep early and avoid screens.", False),
        ("1. sleep early\n2. no screens", False),
        ("- one\n- two\nHope this helps.", False),
        ("Intro without colon\n- one\n- two", False),
    ],
)
def test_bulleted_list(text: str, ok: bool) -> None:
    assert bulleted_list(text) is ok


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("Water evaporates, condenses and falls as rain.\nThe sun heats the sea...", True),
        ("Summary: water goes round in a cycle.\n\nFirst it evaporates from the sea.", True),
        ("**TL;DR:** Loans are borrowed money repaid with interest.\nA bank lends you...", True),
        ("Water evaporates, condenses and falls as rain.", False),
        ("The water cycle is long. It has steps.\nFirst evaporation happens.", False),
        ("- evaporation\n- condensation", False),
        ("# The water cycle\nWater evaporates and falls.", False),
        (" ".join(["word"] * 25) + ".\nMore detail here.", False),
        ("Water goes round and round\nMore detail here.", False),
    ],
)
def test_summary_first(text: str, ok: bool) -> None:
    assert summary_first(text) is ok


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("Congratulations on the new puppy. Walk it daily.", True),
        ("Congratulations!", False),
        ("Congratulations \U0001f389", False),
        ("Well done \u2764\ufe0f", False),
        ("Nice work \u2b50", False),
        ("", False),
    ],
)
def test_calm_plain(text: str, ok: bool) -> None:
    assert calm_plain(text) is ok


@pytest.mark.parametrize("name", list(USERS))
def test_persona_prompts_and_sizes(name: str) -> None:
    p = USERS[name]
    assert len(p.train_prompts) >= 32
    assert len(p.heldout_prompts) >= 8
    assert len(set(p.train_prompts)) == len(p.train_prompts)
    assert not set(p.train_prompts) & set(p.heldout_prompts)
    assert p.reaction("") == p.correction


def test_at_least_four_personas_with_distinct_prompts() -> None:
    assert len(PERSONAS) >= 4
    all_heldout = [h for p in PERSONAS.values() for h in p.heldout_prompts]
    all_train = {t for p in PERSONAS.values() for t in p.train_prompts}
    assert not set(all_heldout) & all_train


@pytest.mark.parametrize("name", list(USERS))
def test_replies_read_as_feedback_by_the_default_judge(name: str) -> None:
    """Corrections score -1 (with a hint for OPD) and thanks +1 under the heuristic judge."""
    p = USERS[name]
    prompt = p.train_prompts[0]
    bad = classify_next_state("user", p.correction, answer="Some answer", question=prompt)
    assert bad.score == -1 and bad.hint
    good = classify_next_state("user", p.thanks, answer="Some answer", question=prompt)
    assert good.score == 1
    assert p.hint() == bad.hint  # the teacher column of the benchmark uses the judge's hint


def test_user_variants_differ_from_their_persona_and_name_it() -> None:
    variants = {n: u for n, u in USERS.items() if n not in PERSONAS}
    assert len(variants) >= 4
    for name, u in variants.items():
        base = PERSONAS[u.base]
        assert name.startswith(f"{u.base}/")
        assert (u.correction, u.max_tokens, u.temperature, u.rates, u.train_prompts) != (
            base.correction, base.max_tokens, base.temperature, base.rates, base.train_prompts
        )  # fmt: skip
    assert any(u.rates for u in variants.values())  # one rates explicitly
    assert any(u.temperature is None for u in variants.values())  # one leaves it to the server
    assert (
        len({u.correction for u in variants.values()} - {p.correction for p in PERSONAS.values()})
        >= 4
    )  # wordings of their own


def test_words_at_most() -> None:
    check = words_at_most(15)
    assert check("A volcano is a mountain that erupts.")
    assert not check("")
    assert not check(" ".join(["word"] * 16))


def test_every_users_form_pool_is_unseen_by_it_and_large_enough_to_read_005() -> None:
    from learn_personas import USERS, form_pool

    for user in USERS.values():
        pool = form_pool(user)
        # a rise of 0.05 is 8 answers or more, not 2-3 (three fragile prompts decided the label
        # on the 50 of the pool before 2026-12-03)
        assert len(pool) >= 160 and len(set(pool)) == len(pool), user.name
        assert not set(pool) & set(user.train_prompts), user.name
        assert pool[: len(user.heldout_prompts)] == tuple(
            p for p in user.heldout_prompts if p not in user.train_prompts
        )


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("A fridge pumps heat out. The coolant carries it.", True),
        ("A fridge pumps heat out.", True),
        ("One. Two. Three.", False),
        (" ".join(["word"] * 41) + ".", False),
        ("", False),
    ],
)
def test_gist(text: str, ok: bool) -> None:
    from learn_personas import gist

    assert gist(text) is ok


def test_late_users_are_held_out_from_the_pool_and_every_other_prompt_set() -> None:
    late = {n: u for n, u in USERS.items() if n not in POOL_USERS}
    assert late, "at least one user written after the method was tuned"
    known = {q for u in POOL_USERS.values() for q in (*u.train_prompts, *u.heldout_prompts)}
    root = Path(__file__).resolve().parents[2] / "assets"
    shipped = "".join(
        (root / f).read_text(encoding="utf-8")
        for f in ("open_prompts.jsonl", "anchor_prompts.jsonl", "general_set.jsonl")
    )
    for u in late.values():
        mine = {*u.train_prompts, *u.heldout_prompts}
        assert not mine & known
        assert not [p for p in mine if p in shipped]
        assert not set(u.train_prompts) & set(u.heldout_prompts)
        for other in POOL_USERS.values():
            assert not mine & set(form_pool(other))
        assert form_pool(u)[: len(u.heldout_prompts)] == u.heldout_prompts
