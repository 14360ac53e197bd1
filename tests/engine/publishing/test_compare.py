"""Side-by-side compare (issue #16): pure diff/score/prompt functions, the admin route on a
real engine, the CLI's rendering, and the Compare screen driven by Pilot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from clawrl_app.compare_cli import format_report, side_by_side
from clawrl_app.engine.publishing.compare import (
    CompareError,
    Segment,
    answer_scores,
    parse_prompts,
    prompt_label,
    recent_prompts,
    word_diff,
)
from clawrl_app.engine.store import NewTurn, Store
from clawrl_app.tui import compare_views

# -- pure functions ------------------------------------------------------------------------


def test_word_diff_marks_only_the_differing_words() -> None:
    a, b = word_diff("the cat sat down", "the dog sat down")
    assert a == [Segment("the ", False), Segment("cat ", True), Segment("sat down", False)]
    assert b == [Segment("the ", False), Segment("dog ", True), Segment("sat down", False)]


def test_word_diff_of_identical_answers_has_no_change() -> None:
    a, b = word_diff("same answer here", "same answer here")
    assert a == b == [Segment("same answer here", False)]


def test_word_diff_ignores_whitespace_only_changes_and_handles_insertions() -> None:
    a, b = word_diff("one two", "one  two three")
    assert not any(s.changed for s in a)
    assert b[-1] == Segment("three", True)
    assert "".join(s.text for s in b) == "one  two three"  # the text is kept as it was


def test_scores_and_label() -> None:
    assert answer_scores("two words") == {"words": 2, "chars": 9}
    msgs = [{"role": "user", "content": "first"}, {"role": "assistant", "content": "x"},
            {"role": "user", "content": [{"type": "text", "text": "second\n  line"}]}]  # fmt: skip
    assert prompt_label(msgs) == "second line"
    assert prompt_label([{"role": "user", "content": "abcdefghij"}], width=5) == "abcd…"


def test_parse_prompts_plain_and_jsonl() -> None:
    text = 'hello there\n\n{"messages": [{"role": "user", "content": "hi"}, ' \
        '{"role": "assistant", "content": "drop me"}]}\n'  # fmt: skip
    assert parse_prompts(text) == [
        [{"role": "user", "content": "hello there"}],
        [{"role": "user", "content": "hi"}],  # cut after its last user message
    ]
    with pytest.raises(CompareError, match="line 1"):
        parse_prompts('{"messages": []}')


def _turn(sid: str, messages: list[dict[str, Any]], type: str = "main") -> NewTurn:
    return NewTurn(sid, type, {"messages": messages}, "answer", [1], [2], [-0.1], "base")


def test_recent_prompts_reads_main_turns_of_real_sessions(tmp_path: Path) -> None:
    with Store(tmp_path / "s.sqlite3") as store:
        for sid, source in (("old", "openclaw"), ("env", "env:terminal"), ("gone", "x"),
                            ("new", "openclaw")):  # fmt: skip
            store.ensure_session(sid, source)
        u1 = {"role": "user", "content": "old question"}
        store.record_turn(_turn("old", [u1]))
        store.record_turn(_turn("env", [{"role": "user", "content": "env task"}]))
        store.record_turn(_turn("gone", [{"role": "user", "content": "excluded"}]))
        store.set_review_state("gone", "excluded")
        first = [{"role": "user", "content": "q1"}]
        store.record_turn(_turn("new", first))
        store.record_turn(_turn("new", [{"role": "user", "content": "title?"}], type="side"))
        ctx = [*first, {"role": "assistant", "content": "a1"}, {"role": "user", "content": "q2"}]
        store.record_turn(_turn("new", ctx))
        prompts = recent_prompts(store, 5)
        assert prompts == [ctx, first, [u1]]  # newest first, with the earlier context
        assert recent_prompts(store, 1) == [ctx]


def test_cli_report_marks_differences_without_colour() -> None:
    a, b = word_diff("yes it works", "no it works")
    item = {"prompt": "does it work?", "a": "", "b": "", "same": False,
            "a_segments": [[s.text, s.changed] for s in a],
            "b_segments": [[s.text, s.changed] for s in b],
            "scores": {"a": answer_scores("yes it works"), "b": answer_scores("no it works")}}  # fmt: skip
    assert side_by_side(item, 20, color=False) == ["[-yes-] it works     │ {+no+} it works"]
    result = {"a": "v2", "b": "v1", "max_tokens": 8, "items": [item],
              "summary": {"prompts": 1, "identical": 0, "a_words_mean": 3.0, "b_words_mean": 3.0}}  # fmt: skip
    lines = format_report(result, 20, color=False)
    assert lines[0] == "── 1. does it work?  (differ)"
    assert lines[-1].startswith("v2 vs v1: 1 prompts, 0 identical, 1 differ")


def test_views_default_pair_is_served_and_parent() -> None:
    rows = [{"version": "v2", "parent": "v1", "served": True},
            {"version": "v1", "parent": None, "served": False}]  # fmt: skip
    assert compare_views.default_pair(rows) == ("v2", "v1")
    assert compare_views.default_pair([]) == ("base", "base")
    assert compare_views.version_choices(rows) == ["v2", "v1", "base"]
    text = compare_views.diff_text([["same ", False], ["new", True]])
    assert text.plain == "same new" and text.spans[0].style == compare_views.CHANGED_STYLE


# -- through the real endpoint (the session engine serves base) ----------------------------


def _post(engine: Any, body: Any) -> httpx.Response:
    key = engine.engine.api_key
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.post(f"{engine.base}/admin/compare", json=body, headers=headers, timeout=300)


def test_compare_base_with_itself_finds_no_difference(engine: Any) -> None:
    store = engine.engine.store
    before = len(store.list_sessions(limit=1000))
    prompts = [[{"role": "user", "content": "Name a colour."}],
               [{"role": "user", "content": "What is 2 + 2?"}]]  # fmt: skip
    r = _post(engine, {"a": "base", "b": "clawrl-base", "prompts": prompts, "max_tokens": 8})
    assert r.status_code == 200, r.text
    result = r.json()
    assert (result["a"], result["b"]) == ("base", "base")
    assert result["summary"]["identical"] == result["summary"]["prompts"] == 2
    for item in result["items"]:
        assert item["a"] and item["a"] == item["b"]
        assert not any(changed for _, changed in item["a_segments"] + item["b_segments"])
    assert len(store.list_sessions(limit=1000)) == before  # side traffic: nothing recorded


def test_compare_rejects_bad_input_and_unloaded_versions(engine: Any) -> None:
    r = _post(engine, {"a": "base", "b": "v99"})
    assert r.status_code == 400
    assert "no checkpoint 'v99' that can answer; usable: base" in r.json()["error"]["message"]
    r = _post(engine, {"a": "base"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "b"
    r = _post(engine, {"a": "base", "b": "base", "last": 0})
    assert r.status_code == 400 and r.json()["error"]["param"] == "last"
    r = _post(engine, {"a": "base", "b": "base", "prompts": [["not a message"]]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "prompts"


# -- the Compare screen with a real engine -------------------------------------------------


async def test_compare_screen_shows_both_answers(engine: Any) -> None:
    from textual.widgets import Select, Static

    from clawrl_app.tui.app import ClawrlApp
    from clawrl_app.tui.client import LocalClient
    from clawrl_app.tui.screens.compare import CompareScreen
    from tests.tui.test_tui_pilot import until

    key = engine.engine.api_key
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    body = {"model": "clawrl", "max_tokens": 6,
            "messages": [{"role": "user", "content": "Say hello to the compare screen."}]}  # fmt: skip
    httpx.post(f"{engine.url}/chat/completions", json=body, headers=headers, timeout=300)
    app = ClawrlApp(LocalClient(engine), capture_logs=False)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.press("7")
        screen = app.screen
        assert isinstance(screen, CompareScreen)
        await until(pilot, lambda: screen.query_one("#version-a", Select).value == "base")
        assert screen.picked("b") == "base"  # base has no parent: base vs base
        screen.last, screen.max_tokens = 1, 6  # the background lane is slow on shared CPUs
        await pilot.press("c")
        result = await until(pilot, lambda: screen.result or list(app._notifications), 300)
        assert screen.result, [n.message for n in app._notifications]
        assert result["items"] and all(i["same"] for i in result["items"])
        await until(pilot, lambda: screen.query(".compare-a"))
        shown = screen.query_one(".compare-a", Static).render()
        assert str(shown).strip() == result["items"][0]["a"].strip()
        await pilot.press("a")  # serving what is served already: said, nothing asked
        assert len(app.screen_stack) == 1
