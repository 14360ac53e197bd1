"""Corrections however they are worded (issue #29): change requests, their hints, the set."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from clawrl_app.engine.judging.change_requests import (
    change_request,
    request_hint,
    request_sentences,
    sentences,
)
from clawrl_app.engine.judging.heuristic_judge import classify_next_state

PHRASINGS = Path(__file__).resolve().parents[3] / "assets" / "judge_phrasings.jsonl"
QUESTION = "Tell me about the Eiffel Tower."
ANSWER = (
    "The Eiffel Tower is a wrought-iron lattice tower in Paris, completed in 1889. It is "
    "330 metres tall and one of the most visited monuments in the world!"
)
DOZEN = "That is a lot of text. Keep it to about a dozen words, please."


def judge(reply: str) -> tuple[int, str | None]:
    verdict = classify_next_state("user", reply, answer=ANSWER, question=QUESTION)
    return verdict.score, verdict.hint


def assert_heard(reply: str, score: int) -> None:
    """`reply` is judged `score`, with a hint exactly when it is a correction."""
    got, hint = judge(reply)
    assert got == score, reply
    assert (hint is not None) is (score == -1), reply


def load_phrasings() -> list[dict[str, Any]]:
    with PHRASINGS.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


# --- the measured failure ------------------------------------------------------------------
def test_the_dozen_words_user_is_heard_and_its_request_is_the_hint() -> None:
    assert judge(DOZEN) == (-1, "Keep it to about a dozen words, please.")


def test_the_handled_user_still_is() -> None:
    score, hint = judge("Too long. Please answer in at most 15 words.")
    assert score == -1 and hint == "Please answer in at most 15 words."


# --- held-out paraphrases: written for this test, not in the set the rules were written on --
@pytest.mark.parametrize(
    "reply",
    [
        "Could you make that a lot more compact?",
        "Keep replies to a sentence or two from now on.",
        "Fewer paragraphs please.",
        "That's far too wordy for a quick question.",
        "Please format the steps as a numbered list.",
        "Give me bullet points instead of prose.",
        "Drop the smiley faces.",
        "A more neutral tone please.",
        "You left out the opening hours.",
        "That's wrong, it opened in 1889.",
        "Please add an example of how to use it.",
        "Explain why, please.",
        "Less chatty please.",
        "tl;dr?",
    ],
)
def test_held_out_corrections_are_negative_with_a_hint(reply: str) -> None:
    score, hint = judge(reply)
    assert score == -1, reply
    assert hint


@pytest.mark.parametrize(
    "reply",
    [
        "Perfect, thanks a lot!",
        "Great, that works now.",
        "Exactly what I needed, cheers.",
        "👍",
        "That's really helpful.",
        "Spot on, thank you.",
        "Nice and short, thanks.",
    ],
)
def test_held_out_approvals_are_positive(reply: str) -> None:
    assert judge(reply) == (1, None)


@pytest.mark.parametrize(
    "reply",
    [
        "ok what about Paris?",
        "How do magnets work?",
        "Who designed the Statue of Liberty?",
        "Could you explain how vaccines work?",
        "Write a haiku about autumn.",
        "Give me a recipe for pancakes.",
        "List three rivers in Africa.",
        "I'm going there next week.",
    ],
)
def test_neutral_replies_and_new_questions_are_zero(reply: str) -> None:
    assert judge(reply) == (0, None)


def test_moving_on_is_never_a_correction() -> None:
    # REFERENCE §3: moving on is progress (+1); "next: ..." is at worst neutral.
    assert judge("next: how do magnets work?")[0] >= 0
    assert judge("Good. Now write the intro.")[0] >= 0


@pytest.mark.parametrize(
    "reply",
    [
        "Great, but make it shorter.",
        "Thanks! Can you put it in a table though?",
        "Perfect, except drop the exclamation marks.",
        "Nice, now make it more formal.",
    ],
)
def test_a_request_wins_over_politeness(reply: str) -> None:
    assert judge(reply)[0] == -1


# --- hints ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("reply", "hint"),
    [
        (DOZEN, "Keep it to about a dozen words, please."),
        ("No, that's too long. Answer in one short sentence please.", None),
        ("Too much text, I just need the gist.", "I just need the gist."),
        ("Whoa. Can you trim that down? It's way too long.", "Can you trim that down?"),
        ("No emojis.", "No emojis."),
        ("That's a lot of text.", None),  # a complaint alone: no request sentence
        ("Who painted the Mona Lisa?", None),
    ],
)
def test_request_hint_is_the_request_sentence(reply: str, hint: str | None) -> None:
    if reply.startswith("No, that's too long"):
        hint = "Answer in one short sentence please."
    assert request_hint(reply) == hint


def test_a_complaint_without_a_request_keeps_the_whole_reply_as_hint() -> None:
    assert judge("That's a lot of text.") == (-1, "That's a lot of text.")


def test_sentences_and_request_sentences() -> None:
    assert sentences("One. Two!  Three?\nFour") == ["One.", "Two!", "Three?", "Four"]
    assert request_sentences("Hmm. Use bullets. Thanks!") == ["Use bullets."]
    assert change_request("How do magnets work?") is None
    assert change_request("way too peppy") == "complaint about the answer"


# --- the labelled set ----------------------------------------------------------------------
def test_phrasings_set_is_well_formed() -> None:
    rows = load_phrasings()
    assert len(rows) >= 300
    keys = {"reply", "label", "family", "kind", "hint_expected", "split", "round"}
    for row in rows:
        # rounds 13 on also carry the conversation the reply answers
        assert keys <= set(row) <= keys | {"question", "answer"}, row
        assert row["label"] in (-1, 0, 1)
        assert row["kind"] in ("length", "format", "tone", "content", "approval", "neutral")
        assert row["split"] in ("train", "heldout")
        # a correction expects a hint unless it names nothing to change ("wrong.")
        assert not row["hint_expected"] or row["label"] == -1
        assert (row["label"] == -1) is (row["kind"] in ("length", "format", "tone", "content"))
    # a bare complaint ("wrong.", "umm no. that's not how it works") names nothing to change:
    # a few of the corrections
    corrections = [row for row in rows if row["label"] == -1]
    assert sum(not row["hint_expected"] for row in corrections) <= 0.05 * len(corrections)
    replies = [row["reply"] for row in rows]
    assert len(replies) == len(set(replies))


def test_a_family_is_never_on_both_sides_of_the_split() -> None:
    sides: dict[str, set[str]] = defaultdict(set)
    for row in load_phrasings():
        sides[row["family"]].add(row["split"])
    assert all(len(s) == 1 for s in sides.values()), {f: s for f, s in sides.items() if len(s) > 1}
    held_out = {f for f, s in sides.items() if s == {"heldout"}}
    kinds = {row["kind"] for row in load_phrasings() if row["family"] in held_out}
    assert kinds == {"length", "format", "tone", "content", "approval", "neutral"}


def test_the_rules_agree_with_the_train_families() -> None:
    rows = [r for r in load_phrasings() if r["split"] == "train"]
    scores = [judge(r["reply"])[0] for r in rows]
    agreement = sum(r["label"] == s for r, s in zip(rows, scores, strict=True)) / len(rows)
    assert agreement >= 0.98


def test_no_correction_is_ever_scored_as_approval_and_vice_versa() -> None:
    for row in load_phrasings():
        score, hint = judge(row["reply"])
        if row["label"] == -1:
            assert score != 1, row["reply"]
        if row["label"] == 1:
            assert score != -1, row["reply"]
        if score == -1 and row["label"] == -1 and row["hint_expected"]:
            assert hint, row["reply"]  # ("wrong." names nothing to change: no hint expected)


def test_a_corrections_hint_contains_the_request_words() -> None:
    for row in load_phrasings():
        if row["label"] != -1:
            continue
        score, hint = judge(row["reply"])
        if score != -1 or not row["hint_expected"]:
            continue
        assert hint is not None
        words = {w.strip(".,!?':;").lower() for w in hint.split()}
        reply_words = {w.strip(".,!?':;").lower() for w in row["reply"].split()}
        assert words <= reply_words, (row["reply"], hint)


# --- round 3 (heuristic-v4): the misses of its first score, each with a near neighbour -----
@pytest.mark.parametrize(
    ("reply", "score"),
    [
        ("Remember, I like my answers brief.", -1),
        ("I like it short.", -1),
        ("I like this a lot.", 1),
        ("You're rambling.", -1),
        ("That's a lot of waffle.", -1),
        ("Three lines at most.", -1),
        ("Summary first, details after.", -1),
        ("Open with the bottom line.", -1),
        ("Tell me more about who built it.", -1),
        ("Say something about the visitors too.", -1),
        ("That's the right length.", 1),
        ("That's not the right length.", -1),
        ("Better.", 1),
        ("That's more like it.", 1),
        ("Yes, short like that.", 1),
        ("Much shorter, thank you!", 1),
        ("Good info but I wanted something much shorter.", -1),
        ("Much shorter please.", -1),
        ("We went there in 2015.", 0),
        ("I think it's 324 metres.", -1),
        ("Write a short poem about the sea.", 0),
        ("Write a short answer about the sea.", -1),
        ("Use a code block for the command.", -1),
        ("Convert 20 euros to dollars.", 0),
        ("Good. Now write the intro.", 1),
    ],
)
def test_round_three_wordings(reply: str, score: int) -> None:
    assert_heard(reply, score)


# --- round 4 (heuristic-v5): the misses of its first score (0.725), each with a neighbour ---
@pytest.mark.parametrize(
    ("reply", "score"),
    [
        # approvals the rules read as requests, and the requests beside them
        ("Perfect, keep doing that.", 1),
        ("Keep doing that but with bullets.", -1),
        ("yes!! answer like this every time", 1),
        ("answer like this every time, but shorter", -1),
        ("This is exactly the style I want from now on.", 1),
        ("A more formal style from now on, please.", -1),
        ("not too long not too short, nice", 1),
        ("Not too long please.", -1),
        ("this length is good", 1),
        ("this length is too much", -1),
        ("Answers like this are ideal, keep it up.", 1),
        ("keep it up but shorter", -1),
        ("👌", 1),
        ("👏 brilliant answer", 1),
        ("brilliant, but way too long", -1),
        ("ace, ta very much", 1),
        # a correction the rules read as approval
        ("Same info in fewer words would be nice.", -1),
        ("Would be nice to visit someday.", 1),
        # corrections heard as nothing
        ("i dont have time to read all this", -1),
        ("I don't have time for Paris this year.", 0),
        ("You could have said all that in one sentence.", -1),
        ("You could have said hi.", 0),
        ("jeez, who's reading all that lol", -1),
        ("whats the quick version", -1),
        ("What's the quickest way to get there?", 0),
        ("just the cliff notes pls", -1),
        ("to long, shortr pls", -1),
        ("Is there a more compact version of this?", -1),
        ("Is there a lift to the top?", 0),
        ("so drawn out omg", -1),
        ("Would be easier to follow as a little Q and A, tbh.", -1),
        ("Could you present the dates as a timeline?", -1),
        ("Could this be a table with one row per fact?", -1),
        ("Could this be the tallest tower?", 0),
        ("number the facts please", -1),
        ("why so cheerful lol, it's just a tower", -1),
        ("Why so many visitors?", 0),
        ("could you word it the way an encyclopedia would", -1),
        ("That reads like a museum plaque, talk to me normally.", -1),
        ("Why the exclamation point at the end? Just state it calmly.", -1),
        ("Your claim about it being the tallest structure is off, please double-check it.", -1),
        ("The lights are off at night?", 0),
        ("I'm off to Paris tomorrow.", 0),
        ("you've mixed up the dates, it opened in 1889, fix it", -1),
        ("I always get the dates mixed up.", 0),
        ("throw in a bit about the restaurants up there as well", -1),
        # neutral replies the rules scored
        ("thanks. unrelated, but how do you get red wine out of a carpet?", 0),
        ("Make a shopping list for a lasagne.", 0),
        ("Make a packing list for my trip.", 0),
        ("Make it a list.", -1),
        ("Give me a short list of the key facts.", -1),
    ],
)
def test_round_four_wordings(reply: str, score: int) -> None:
    assert_heard(reply, score)


# --- rounds 5 and 6 (heuristic-v6): structure that a keyword misses, each with a neighbour --
@pytest.mark.parametrize(
    ("reply", "score"),
    [
        # politeness, then a request: the request wins (these were read as approval)
        ("Appreciate it, but I really only need about a third of that.", -1),
        ("Appreciate it, that was all I needed.", 1),
        (
            "Thank you for this. Might I trouble you for a version that is perhaps half the length?",
            -1,
        ),
        ("Thank you for this, the tone is lovely.", 1),
        ("paragraphs 😩 👉 bullets 🙏", -1),
        ("🙏", 1),
        ("The list format is great, thanks.", 1),
        # a negated approval is a correction; a negated complaint is praise
        (
            "not what I was after, I wanted the engineering side: wind, materials, how it stays up",
            -1,
        ),
        ("that's what I was after", 1),
        ("love that it's not a wall of text 🙌", 1),
        ("ugh, a wall of text", -1),
        ("no complaints whatsoever", 1),
        ("no notes", 1),
        ("no, the height is wrong", -1),
        ("not a word too many, thanks", 1),
        ("a few words too many", -1),
        # a form for a new subject is a new task
        ("make a bulleted packing list for a weekend in Paris", 0),
        ("give me three bullet points on why sleep matters", 0),
        ("give me three bullet points on it", -1),
        ("make it a bulleted list", -1),
    ],
)
def test_rounds_five_and_six_wordings(reply: str, score: int) -> None:
    assert_heard(reply, score)


@pytest.mark.parametrize(
    ("reply", "score"),
    [("10/10", 1), ("8 out of 10", 1), ("4/5 stars", 1), ("2/10", -1), ("1 star", -1), ("5/10", 0)],
)
def test_a_rating_scores_the_answer(reply: str, score: int) -> None:
    verdict = classify_next_state("user", reply, answer=ANSWER, question=QUESTION)
    assert verdict.score == score, reply
    if score:
        assert "rates the answer" in verdict.reason


# --- round 8 (heuristic-v7): chat spellings, terse forms, sarcasm; each with a neighbour ----
@pytest.mark.parametrize(
    ("reply", "score"),
    [
        # a misspelt signal word is heard as the word; a real word one edit away is not
        ("thnaks, that's awsome", 1),
        ("exacly right, perfct", 1),
        ("gr8 answer", 1),
        ("he thinks it's about right", 0),
        ("make it sound more normal", -1),
        ("could you add somethng about the queues", -1),
        # a form and nothing more is a request; with an approval it is praise
        ("two sentences.", -1),
        ("as a table", -1),
        ("good length.", 1),
        ("perfect length, ty", 1),
        ("ok", 0),
        ("elaborate pls", -1),
        ("can you add a bit about the lifts?", -1),
        # sarcasm about length, "chill with ...", "I needed X, not Y"
        ("wow, a whole novel. cheers.", -1),
        ("go easy on the hype", -1),
        ("cheers, but I wanted opening hours, not the history", -1),
        ("cheers, but I need to run now", 1),
        ("what we really need is the nearest metro", -1),
        # "again" that asks for no redo; a good rating with a remark
        ("10/10, will use again", 1),
        ("how tall is it again", 0),
        ("try again, shorter", -1),
        ("2/10 too long", -1),
        ("wonderful, just right", 1),
        ("not just right, too long", -1),
    ],
)
def test_round_eight_wordings(reply: str, score: int) -> None:
    assert_heard(reply, score)


# --- round 9 (heuristic-v8): new topics, quotes, hedges, dev replies; each with a neighbour ---
@pytest.mark.parametrize(
    ("reply", "score"),
    [
        # a new topic judges the answer only by what comes before its marker
        ("short question: is it safe to eat raw cookie dough?", 0),
        ("different task: turn these into bullets - milk, eggs, bread", 0),
        ("great, exactly what I needed. unrelated, but how do I boil an egg?", 1),
        ("thanks. unrelated, but how do I boil an egg?", 0),
        ("too long. different question: what's the tallest mountain?", -1),
        ("You answered a different question.", -1),
        # quoted words are the user's material; the words around them still count
        ("how do you say 'I was wrong, sorry' in French?", 0),
        ("delete everything after 'In summary', I don't need the recap", -1),
        # stepping away; a request beside it still counts
        ("gotta run, lunch. back in 20", 0),
        ("brb getting coffee, when im back pls have a shorter version ready", -1),
        # a new task with a number, news about the user, the user's own thing
        ("make a list of 5 names for a golden retriever puppy", 0),
        ("make it 5 names", -1),
        ("so tomorrow I have an interview and I keep blanking on joins. can you quiz me?", 0),
        ("can you suggest a shorter title for my blog post?", 0),
        ("can you make it shorter for my kids?", -1),
        # dev replies: one thing only, the fix that missed
        ("diff only", -1),
        ("just the command, no walkthrough", -1),
        ("half that", -1),
        ("ship it", 1),
        ("you fixed the symptom, not the bug", -1),
        ("that fixed it", 1),
        ("that's python 2 syntax, I'm on 3.12", -1),
        # hedged and frustrated requests; a polite closer approves nothing
        ("if you could keep replies to around 40 words that'd be really helpful", -1),
        ("really helpful, thanks", 1),
        ("could we make it slightly less salesy?", -1),
        ("can it sound more like a person talking?", -1),
        ("can you not be so condescending?", -1),
        ("why do you always write essays", -1),
        ("good info, though the 'Great question!' opener has to go", -1),
        ("I have to go now, thanks", 1),
        # approvals that read like something else
        ("no complaints, that's exactly it", 1),
        ("no, that's not it", -1),
        ("can't argue with that", 1),
        ("that bit about checking the return code first saved me, great answer", 1),
        ("I was nervous, but I used your outline and it went really well", 1),
        ("loved the 'rule of thumb' line at the end, I'm stealing that", 1),
    ],
)
def test_round_nine_wordings(reply: str, score: int) -> None:
    assert_heard(reply, score)


# --- round 10 (heuristic-v9): replies from people at work; each with a neighbour ---
@pytest.mark.parametrize(
    ("reply", "score"),
    [
        # a new task that carries its own requests; the same words about the answer
        (
            "write me a short note to my landlord, no more than 3 lines, saying the boiler is broken again",
            0,
        ),
        (
            "can you draft a formal email to the school asking for a meeting with the head? not too long",
            0,
        ),
        ("write it as a short note, no more than 3 lines", -1),
        ("different thing: make a table of my kids' vaccination dates, plain text, no emoji", 0),
        ("can you make a table of it?", -1),
        ("new one: how do I say 'where is the pharmacy' in Portuguese? keep it short", 0),
        # the user answers the assistant's question; "again" that asks for no redo
        ("to answer your question, it's windows 11 and I don't have admin rights", 0),
        ("to answer your question: too long, I only read the first line", -1),
        ("can you keep this for later? I'll need it again on Friday", 0),
        ("again?? still too long", -1),
        # approvals without praise words, and approvals that name a form
        ("nothing wrong with it, I'm using it as is", 1),
        ("something is wrong with it, the totals don't add up", -1),
        ("short is fine, don't make it any longer", 1),
        ("make it a bit longer", -1),
        ("that's what I'll send", 1),
        ("ok printing it now", 1),
        ("done, it compiles", 1),
        ("it compiles but the test fails", -1),
        ("yes is very good, my boss understand now", 1),
        ("not very good, too many words", -1),
        ("ok this one is correct, my teacher say the same", 1),
        ("yes do that, same format as this one", 1),
        ("yeah go ahead and add the other three, this looks right", 1),
        ("yes do that, but shorter", -1),
        # corrections without the usual words
        ("bro the rocket emojis are so cringe. remove", -1),
        ("why are there emojis in my resignation letter 💀 take them out", -1),
        ('"Hey there" is not how we open a letter to the court.', -1),
        ("you answered question 4 but she asked about question 5", -1),
        ("you answered every question, thanks", 1),
        ("pager's going off, I don't need the background on systemd, just the command", -1),
        ("I don't need anything else, thanks", 1),
        ("hmm, this not sound right to my ears but i dont know why", -1),
    ],
)
def test_round_ten_wordings(reply: str, score: int) -> None:
    assert_heard(reply, score)


# --- round 11 (heuristic-v10): praise by a negated complaint, sizes, sources; neighbours ---
@pytest.mark.parametrize(
    ("reply", "score"),
    [
        # praise by a negated complaint; the same words before a request
        ("No complaints here, that covers it.", 1),
        ("No issues with the facts, but it's way too long.", -1),
        ("Can't fault it.", 1),
        ("not bad at all, actually", 1),
        ("Not bad, but cut it to two lines.", -1),
        ("the 15th actually", -1),
        ("I didn't expect it to be this clear, honestly. Nothing to add.", 1),
        ("Wasn't sure you'd get it right, but no issues — that all matches what I know.", 1),
        # a number that sizes the user's own text; a number that replaces the answer's
        ("I'm writing a 500-word essay on Paris, what should I include?", 0),
        ("I'm writing a report, can you make this shorter?", -1),
        (
            "How long should a tourism brochure paragraph be, generally? Asking for a design class.",
            0,
        ),
        ("Recommend a good sci-fi novel?", 0),
        ("Recommend a shorter version?", -1),
        # a size named by the small thing it must fit; a question about fitting
        ("whatever you give me has to fit in a subject line", -1),
        ("any chance that fits on a post-it?", -1),
        ("Does the Eiffel Tower fit in a football stadium?", 0),
        # "is there a way to", "rework", sources
        ("Is there a way to say all that in like one breath?", -1),
        ("Is there a way to visit the top at night?", 0),
        ("I need this to sound lively for a tour group, can you rework it?", -1),
        ("where are you getting this from? pls cite something i can put in my bibliography", -1),
        # the speaker's role before "I"
        ("As a nurse, I need this in two lines.", -1),
        ("As a kid I always wanted to go up the tower.", 0),
    ],
)
def test_round_eleven_wordings(reply: str, score: int) -> None:
    assert_heard(reply, score)
