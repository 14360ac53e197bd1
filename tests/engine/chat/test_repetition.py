"""Degenerate-loop detection (pure)."""

from __future__ import annotations

from clawrl_app.engine.chat.repetition import repeating_tail


def test_a_sentence_loop_is_found_once_it_covers_the_span() -> None:
    sentence = [11, 12, 13, 14, 15, 16, 17, 18, 19, 20]  # 10 tokens
    answer = [1, 2, 3] + sentence * 6  # 60 tokens of loop: under the 64-token span
    assert repeating_tail(answer) == 0
    answer += sentence[:4]  # 64 tokens of period 10
    assert repeating_tail(answer) == 10


def test_a_single_token_run() -> None:
    assert repeating_tail([5] * 63) == 0
    assert repeating_tail([5] * 64) == 1
    assert repeating_tail([7] + [5] * 64) == 1


def test_no_loop_in_varied_text_or_a_short_list() -> None:
    assert repeating_tail(list(range(500))) == 0
    item = [30, 31, 32]  # "- item" three times, then on
    assert repeating_tail(item * 3 + list(range(100, 180))) == 0
    assert repeating_tail([]) == 0


def test_long_periods_need_four_repeats() -> None:
    block = list(range(200, 240))  # 40 tokens
    assert repeating_tail(block * 3) == 0  # 120 tokens, 3 repeats
    assert repeating_tail(block * 4) == 40
    assert repeating_tail(list(range(300, 370)) * 5) == 0  # period 70 > MAX_PERIOD


def test_a_loop_that_broke_off_is_not_reported() -> None:
    loop = [1, 2, 3, 4] * 20
    assert repeating_tail(loop) == 4
    assert repeating_tail(loop + [9]) == 0
