"""The blind rounds of the judge's phrasings (rounds 12 on), each heard after its first sight:
the replies it missed, in general form, beside neighbours the new rules must leave alone
(docs/benchmarks/judge.md has each round's first-sight figures)."""

from __future__ import annotations

import pytest

from clawrl_app.engine.judging.heuristic_judge import classify_next_state

ROUNDS: dict[int, list[tuple[str, int]]] = {
    12: [
        # round 12 of the blind phrasings, first sight: sarcasm behind thanks / "cool"
        ("thanks for the dissertation. one line would've done", -1),
        ("cool, now do the version for people who don't have an hour to spare", -1),
        ("I wonder if you could say the same thing in about half the space?", -1),
        ("I was actually after its role in WWII, can you focus on that?", -1),
        ("thank you!! exactly the facts I was after", 1),  # "was after" at the end approves
        ("Can't think of anything to add, really — that's good.", 1),
        ("goated answer ngl", 1),
        # the user's own things and new tasks, whatever their form words
        ("it's freezing in my flat today, the heating's broken", 0),
        ("Still broken.", -1),
        ("If I only have a short stopover, is it worth going up?", 0),
        ("since im on my phone, shorter please", -1),
        ("Write a short list of things to pack for a rainy weekend.", 0),
        ("make a table comparing three budget airlines I could use to get to Paris", 0),
        ("Let me try it and get back to you.", 0),
    ],
    13: [
        # round 13 of the blind phrasings, first sight: sarcasm behind thanks / "great"
        (
            "wow, three solutions and a pep talk for a one-word bug. one fix would have done, thanks",
            -1,
        ),
        ("a nap would have done me good, thanks", 1),  # "would have done me": no size asked
        ("oh great, swapped it and now it's SyntaxError: invalid syntax", -1),
        ("followed it to the letter and it came out thin, something's off", -1),
        ("three tips, one short line each, nothing more", -1),
        ("my phone's on 3%, just tell me which one to grab", -1),
        ("does it have to be a whole paragraph? I just want one name", -1),
        ("Could you set it out as a timeline, date on the left?", -1),
        ("pitch it for a year 5 class please, they won't follow the a/b stuff", -1),
        ("none of these are any use in winter. anything indoors?", -1),
        ("is any of this backed by actual studies? link me the research please", -1),
        # outcomes reported and hedged approvals
        ("made it tonight, the kids scraped the pan clean", 1),
        ("got him the meter, huge hit", 1),
        ("f-string ftw, ta", 1),
        (
            "I was half expecting a textbook mess, but honestly that's a fair summary. I'll take it.",
            1,
        ),
        # form words in a question of the user's own, and a new piece of writing
        ("is there a shorter way to find the reciprocal, or do I convert it first?", 0),
        ("Write a short lullaby I can sing to my baby.", 0),
    ],
    14: [
        # round 14, first sight: sarcasm behind "lovely" / "awesome" / "cool", failed fixes
        (
            "lovely, it stopped looping. it also stopped updating when I switch users. so that's fun",
            -1,
        ),
        ("find: -printf: unknown primary or operator. awesome. it's a macbook btw", -1),
        (
            "cool, didn't expect a tour of every flag. the one-liner on its own would've been plenty",
            -1,
        ),
        (
            "did the stretches for two days and it's stiffer than before. anything else I can try?",
            -1,
        ),
        # readers who will not get through it, requests put as complaints
        ("my uncle has the attention span of a goldfish", -1),
        ("they won't get past line three", -1),
        ("bytes?? can't it print MB or GB like a normal human?", -1),
        ("'either will do' isn't a recommendation, it's a shrug. which would you get?", -1),
        ("where are crooks and curley's wife?? aren't they the loneliest characters", -1),
        # outcomes reported, praise by what it is not
        ("did the short walks for 3 days and I can tie my own shoes again. thank you!!", 1),
        ("clear and not too long, exactly what I needed. thanks", 1),
        ("no waffle, just the facts, the way I like it. going with the kobo", 1),
        ("pushed the abortcontroller version, dashboard went flat. ty", 1),
        ("got a 7 on it!! miss said my intro was one of the strongest", 1),
        ("deleted it. disk at 61% now, legend", 1),
        ("back from Iceland - those microspikes saved us. thanks for that one", 1),
        # the world's things, not the answer's
        ("he'll say you're wrong no matter what, that's just how he is", 0),
        ("the drive looks long, is there anywhere good to stop for lunch?", 0),
        ("what's the difference between the two, do they round differently?", 0),
        ("I'll run it tonight, don't want to thrash the disk right now", 0),
        ("please stop adding emojis", -1),
    ],
    15: [
        # round 15, first sight: sarcastic thanks before a request for just the one thing
        ("Many thanks for the partitioning advice. Could I get just the SQL?", -1),
        ("wow, three methods and a love letter to pivot tables. I just wanted the one formula", -1),
        (
            "'Your safety is our top priority!' thanks 😂 could you just talk like a normal person",
            -1,
        ),
        (
            "fascinating stuff, my mates were thrilled to hear it mid-game 🙃 the rule alone next time?",
            -1,
        ),
        ("standup in 2 mins, query only pls", -1),
        ("could it be funnier?? my cousins will heckle me", -1),
        ("can the joke come first? you want the laugh early", -1),
        ("where does council tax go in all this?", -1),
        ("you kind of skipped what I actually type in there", -1),
        ("umm no. that's not how it works", -1),
        # approvals in negative words, outcomes, a comma after "separate thing"
        ("not a thing wrong with that, it's exactly what I was after", 1),
        ("nothing I'd change, that's a plan I can actually stick to", 1),
        ("wasn't expecting much tbh but the sticker thing sorted it. fair play", 1),
        ("gave it a week and... yeah. you were right", 1),
        ("¡gracias! this is great 😄 quick q though, is it worth learning vosotros?", 1),
        ("the line about Priya is GOLD. keeping that", 1),
        ("separate thing, how do I dump just one table with mysqldump?", 0),
        ("she's got a much shorter fuse than my last cat, that's for sure", 0),
        ("I'll start on the 1st, no point kicking off mid-month", 0),
        ("should I be checking it in the afternoon instead?", 0),
        ("use bullets instead", -1),
    ],
    16: [
        # round 16, first sight: sarcasm behind "appreciate" / "great" / an emoji in a quote
        (
            "asked for one groupby, got a short course. appreciate the enthusiasm, but the first "
            "snippet was all I needed",
            -1,
        ),
        ("ah great, the Evans Gambit 😅 can I get about a quarter of this?", -1),
        ("'you're going to smash it! 💪' bless. could the actual advice be a bit less cheesy?", -1),
        # no "a hit" praise (the whole reply describes a bug: the word model hears it since
        # round 17's rows, so the case keeps only the words the rules must leave alone)
        ("'0770090012345' gives a hit", 0),
        # failed fixes and details ignored
        ("returns an empty list. every time.", -1),
        ("the dashed ones don't match at all", -1),
        ("07700-900123 was literally one of the examples I gave you", -1),
        (
            "did the add and the commit and now it says 'Committing is not possible'. what did I miss?",
            -1,
        ),
        ("the stacked version is unreadable", -1),
        ("my reviewer has been on at me about unreadable patterns, this is great", 1),
        # the user's circumstances, asking for less
        ("screensharing with my whole team watching, I need the three commands, now", -1),
        ("I'm in the garden centre right now, what do I need to buy? one or two things", -1),
        ("im in the shed with oily hands, what do I check FIRST", -1),
        ("ok but what do I do when they don't play e5?", -1),
        ("I'm a new grad. This sounds like someone else entirely.", -1),
        # outcomes reported
        ("quarter turn on the barrel adjuster and it shifts like new", 1),
        ("it's unfurling a new leaf!! first one since march", 1),
        ("GOT THE JOB. the panel loved my answer", 1),
        ("that one line is worth the whole answer", 1),
        ("that did it, thanks! while I'm here - how do I stop git nagging me on every pull?", 1),
        # the world's things
        ("mm right, noted", 0),
        ("how long does it take to recover once you stop overwatering it?", 0),
        ("pretty sure this is because someone force-pushed to main on friday, classic", 0),
    ],
    17: [
        # round 17, first sight: corrections read as approval ("love this as", "sending it")
        ("would love this as a grid: what I see in one column, what it means in the other", -1),
        ("needs to be under 50 words, I'm sending it as a text not a letter", -1),
        ("love this, thank you", 1),
        ("love this in particular: the second tip", 1),
        # fixes that failed, the point missed, talking down, more wanted
        ("did the reinstall like you said, still the same crash", -1),
        ("switched the setting and nope, same error", -1),
        ("fed it twice a day for three more days and it's still flat", -1),
        ("This doesn't tell me whether I'll owe or not, which was the whole point.", -1),
        ("Could you expand on the ratio bit? You rushed past it", -1),
        ("i'm a dev, you don't need to explain what a terminal is", -1),
        ("my plants are dying, could you tone down the pep a bit?", -1),
        ("How do I tone down the colour of this paint?", 0),
        ("my cover letter needs to be under one page, can you help me write one?", 0),
        ("is this the same error as the one before?", 0),
        ("I've had the same issue for months, this fixed it!", 1),
        # the user's own "if", a question sized by its adjective, a question after news
        ("what happens if I get the form wrong, is there a fine?", 0),
        ("why is this wrong?", -1),
        ("what happens if the cake comes out wrong?", 0),
        ("short unrelated question, can I keep the starter in the fridge?", 0),
        ("long day here. anyway, what's the difference between a W-4 and a W-9?", 0),
        ("next one: I need a formula that counts the rows that say 'pending'", 0),
        # outcomes and praise after a remark on the size
        ("ran it again and it worked fine, cheers", 1),
        ("try it again", -1),
        ("the note is just the right length, not too long, I'm sending it as is", 1),
        ("that's a lot of detail but honestly exactly what I needed, thank you", 1),
        ("wasn't expecting such a long answer but it covered literally everything", 1),
        ("that's a lot of detail, too long really, but spot on", -1),
        ("just booked the point-to-point tickets, saved a ton. thank you!", 1),
        ("copied it straight into my notes, brilliant", 1),
        ("bingo", 1),
        ("yep, that was the culprit", 1),
    ],
}


@pytest.mark.parametrize(
    ("reply", "score"),
    [pytest.param(reply, score, id=f"r{n}-{k}") for n, cases in ROUNDS.items()
     for k, (reply, score) in enumerate(cases)],
)  # fmt: skip
def test_blind_round_phrasings_heard_after_first_sight(reply: str, score: int) -> None:
    verdict = classify_next_state("user", reply)
    assert verdict.score == score, verdict
    assert (verdict.hint is not None) == (score == -1)
