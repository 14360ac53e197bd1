"""Chat spellings read as the judge's signal words (`judging.spelling`): pure functions."""

from __future__ import annotations

from clawrl_app.engine.judging.spelling import REAL_WORDS, SIGNAL_WORDS, one_edit, respell


def test_one_edit_is_one_letter_left_out_added_changed_or_two_swapped() -> None:
    assert one_edit("awsome", "awesome") and one_edit("awesome", "awsome")  # left out / added
    assert one_edit("perfekt", "perfect")  # changed
    assert one_edit("thnaks", "thanks")  # neighbours swapped
    assert not one_edit("thanks", "thanks")  # the same word is no edit
    assert not one_edit("tahnsk", "thanks")  # two swaps
    assert not one_edit("perfectly", "perfect")  # two letters more
    assert not one_edit("tnaksh", "thanks")  # letters swapped that are not neighbours


def test_respell_reads_chat_forms_and_near_misses_and_leaves_real_words_alone() -> None:
    assert respell("thnaks, this is awsome") == "thanks, this is awesome"
    assert respell("gr8, thx") == "great, thanks"
    assert respell("can u add somthing about it") == "can you add something about it"
    # real words one edit from a signal word, and short words, are never rewritten
    assert respell("he thinks it is more normal") == "he thinks it is more normal"
    assert respell("I am pleased") == "I am pleased"
    assert respell("ok cool") == "ok cool"
    assert all(len(w) >= 6 for w in SIGNAL_WORDS) and not SIGNAL_WORDS & REAL_WORDS
