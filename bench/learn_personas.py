"""The simulated users of bench/learn.py: four personas whose preference code can check.

Each persona has a pure compliance checker, its own training prompts (>= 32) and held-out
prompts (>= 8, never trained on), the correction it sends when an answer does not comply
(plain words stating the preference, as people write them) and the thanks it sends when it
does. One persona alone could be won by a method tuned to it (e.g. "stop early"); the four
pull in different directions (shorter, list-shaped, summary-then-detail, calmer tone).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace

from learn_pool import WIDE_POOL

from clawrl_app.engine.judging.heuristic_judge import corrective_hint

_TERMINATOR_RE = re.compile(r"[.!?]+(?=[\s\"')\]*]|$)")
_BULLET_RE = re.compile(r"^\s*[-*•]\s+\S")
# Emoji and pictographs: the emoji blocks, dingbats / misc symbols, variation selector 16.
_EMOJI_RE = re.compile("[\U0001f000-\U0001faff\u2600-\u27bf\ufe0f\u2b50\u2b55\u203c\u2049]")
_SUMMARY_PREFIX_RE = re.compile(
    r"^\s*(?:\*\*)?\s*(?:summary|tl;?dr|in short)\s*:?\s*(?:\*\*)?\s*:?\s*", re.I
)


def _sentences(text: str) -> int:
    """Sentence terminators in `text` ("..." counts once; "3.14" or "e.g" mid-word do not)."""
    return len(_TERMINATOR_RE.findall(text))


def _lines(text: str) -> list[str]:
    return [ln for ln in text.strip().splitlines() if ln.strip()]


BREVITY_MAX_WORDS = 20


def one_sentence(max_words: int) -> Callable[[str], bool]:
    """A single sentence of at most `max_words` words on one line (not empty)."""

    def check(text: str) -> bool:
        t = text.strip()
        return bool(t) and "\n" not in t and len(t.split()) <= max_words and _sentences(t) <= 1

    return check


def one_short_sentence(text: str) -> bool:
    """Brevity: not empty, at most 20 words, no line break, at most one sentence terminator."""
    return one_sentence(BREVITY_MAX_WORDS)(text)


def bulleted_list(text: str) -> bool:
    """A bulleted list: at least two bullet lines (`-`, `*` or `•`), and every other
    non-empty line is at most one short lead-in line ending with ':' before the first bullet."""
    lines = _lines(text)
    bullets = [i for i, ln in enumerate(lines) if _BULLET_RE.match(ln)]
    if len(bullets) < 2:
        return False
    others = [i for i in range(len(lines)) if i not in bullets]
    if not others:
        return True
    return others == [0] and bullets[0] == 1 and lines[0].rstrip().endswith(":")


SUMMARY_MAX_WORDS = 20


def summary_first(text: str) -> bool:
    """A one-line summary first, then detail: the first non-empty line is one sentence of at
    most 20 words (a "Summary:" / "TL;DR:" label allowed), not a bullet, ending with a
    terminator; at least one more non-empty line follows with at least 3 words of detail."""
    lines = _lines(text)
    if len(lines) < 2:
        return False
    first = _SUMMARY_PREFIX_RE.sub("", lines[0]).strip().strip("*").strip()
    if not first or _BULLET_RE.match(lines[0]) or first.startswith("#"):
        return False
    if len(first.split()) > SUMMARY_MAX_WORDS or _sentences(first) != 1:
        return False
    if not re.search(r"[.!?][\"')\]]?$", first):
        return False
    return len(" ".join(lines[1:]).split()) >= 3


def calm_plain(text: str) -> bool:
    """No exclamation marks and no emoji (and not empty)."""
    t = text.strip()
    return bool(t) and "!" not in t and _EMOJI_RE.search(t) is None


@dataclass(frozen=True)
class Persona:
    """A simulated user: what it wants (checked by `complies`), what it asks, how it reacts."""

    name: str
    description: str
    complies: Callable[[str], bool]
    correction: str
    """The reply to an answer that does not comply: states the preference in plain words."""
    thanks: str
    """The reply to an answer that complies."""
    train_prompts: tuple[str, ...]
    heldout_prompts: tuple[str, ...]
    max_tokens: int
    """Answer budget (training and evaluation): room for the wanted shape, not much more."""
    temperature: float | None = 1.0
    """Sampling temperature of the feedback turns (None: the server's default, as a user who
    never sets one gets)."""
    rates: bool = False
    """Also rate each answer explicitly (`POST /v1/feedback`, +1 / -1) before replying."""
    base: str = ""
    """The persona a user variant derives from (its own name for the four personas)."""

    @property
    def slug(self) -> str:
        """The name as it may appear in a file or session name ("brevity/u15" -> "brevity-u15")."""
        return self.name.replace("/", "-")

    def reaction(self, answer: str) -> str:
        """The user's next message after `answer`."""
        return self.thanks if self.complies(answer) else self.correction

    def hint(self) -> str:
        """The hint the app's heuristic judge takes from the correction: the teacher's extra
        context in on-policy distillation."""
        hint = corrective_hint(self.correction)
        if hint is None:
            raise ValueError(f"persona {self.name}: its correction yields no hint")
        return hint


BREVITY = Persona(
    name="brevity",
    description="one short sentence (<= 20 words, one terminator, no line break)",
    complies=one_short_sentence,
    correction="No, that's too long. Answer in one short sentence please.",
    thanks="Thanks, that's perfect!",
    train_prompts=(
        "What is photosynthesis?",
        "Why is the sky blue?",
        "What does a compiler do?",
        "What is gravity?",
        "How do vaccines work?",
        "What is a black hole?",
        "What is machine learning?",
        "Why do leaves change colour in autumn?",
        "What causes earthquakes?",
        "What is democracy?",
        "What is a prime number?",
        "How does a rainbow form?",
        "What is DNA?",
        "Why do we have seasons?",
        "What is a volcano?",
        "What does the heart do?",
        "What is recycling?",
        "What is a noun?",
        "What is the internet?",
        "What is an atom?",
        "What is inflation?",
        "How do airplanes fly?",
        "What is a computer virus?",
        "Why do cats purr?",
        "What is electricity?",
        "What is the moon made of?",
        "How do plants drink water?",
        "What is a galaxy?",
        "What is a glacier?",
        "How does a refrigerator keep food cold?",
        "What is a spreadsheet?",
        "Why do we dream?",
    ),
    heldout_prompts=(
        "What is a tornado?",
        "How does the stomach digest food?",
        "What is climate change?",
        "What is a rainforest?",
        "Why do birds migrate?",
        "What is a battery?",
        "How do magnets work?",
        "What is a hurricane?",
        "What is a desert?",
        "How does a microwave oven heat food?",
    ),
    max_tokens=48,
)

BULLETS = Persona(
    name="bullets",
    description="a bulleted list ('-', '*' or '•' lines; one lead-in line ending ':' allowed)",
    complies=bulleted_list,
    correction="No, please use bullet points, one point per line starting with '-'.",
    thanks="Thanks, that list is great.",
    train_prompts=(
        "What are some tips for sleeping better?",
        "How can I save money on groceries?",
        "What should I pack for a beach trip?",
        "How do I stay focused while studying?",
        "What are the benefits of regular exercise?",
        "How can I make my home more energy efficient?",
        "What are good habits for a healthy diet?",
        "How do I prepare for a job interview?",
        "What are some ways to reduce stress?",
        "What should I check before a long car drive?",
        "How can I learn a new language faster?",
        "What are the main parts of a computer?",
        "How do I keep houseplants alive?",
        "What are some ideas for a rainy day at home?",
        "How can I write a better email?",
        "What are the advantages of cycling to work?",
        "How do I start running as a beginner?",
        "What should a first aid kit contain?",
        "How can I be more productive in the morning?",
        "What are some ways to make new friends?",
        "How do I plan a birthday party?",
        "What are signs that a car needs service?",
        "How can I protect my online accounts?",
        "What are the steps to bake bread?",
        "What should I consider when buying a laptop?",
        "How can I reduce plastic waste?",
        "What are good ways to practise public speaking?",
        "How do I organise a small closet?",
        "What are the benefits of reading books?",
        "How can kids learn to enjoy vegetables?",
        "What should I do before moving to a new flat?",
        "How do I take care of a new puppy?",
    ),
    heldout_prompts=(
        "What are some tips for a long flight?",
        "How can I drink more water during the day?",
        "What should I bring on a camping trip?",
        "How can I improve my handwriting?",
        "What are the benefits of walking every day?",
        "How do I keep my kitchen clean?",
        "What are ways to spend less on electricity?",
        "How can I remember names better?",
        "What should I know before adopting a cat?",
        "How do I get better at chess?",
    ),
    max_tokens=96,
)

SUMMARY_FIRST = Persona(
    name="summary",
    description="a one-line summary sentence first, then the detail on the following lines",
    complies=summary_first,
    correction=(
        "No, start with a one-line summary sentence, then put the details on the next lines."
    ),
    thanks="Thanks, that's exactly how I like it.",
    train_prompts=(
        "Explain how the water cycle works.",
        "Explain how a bank loan works.",
        "Explain what a database index is.",
        "Explain how the immune system fights infection.",
        "Explain how solar panels make electricity.",
        "Explain how a car engine works.",
        "Explain what the stock market is.",
        "Explain how email gets delivered.",
        "Explain how the heart pumps blood.",
        "Explain what a recession is.",
        "Explain how a search engine finds pages.",
        "Explain how bread rises.",
        "Explain how tides work.",
        "Explain what an operating system does.",
        "Explain how a thermostat controls heating.",
        "Explain how elections work in a democracy.",
        "Explain how wind turbines work.",
        "Explain what a credit score is.",
        "Explain how muscles grow stronger.",
        "Explain how a camera takes a photo.",
        "Explain how recycling plastic works.",
        "Explain what a password manager does.",
        "Explain how weather forecasts are made.",
        "Explain how the moon changes shape in the sky.",
        "Explain how coffee affects the body.",
        "Explain what cloud computing is.",
        "Explain how an electric car charges.",
        "Explain how a library organises its books.",
        "Explain how antibiotics work.",
        "Explain how a river forms.",
        "Explain what a budget is and why it helps.",
        "Explain how GPS finds your location.",
    ),
    heldout_prompts=(
        "Explain how a rocket reaches space.",
        "Explain how a vaccine is tested.",
        "Explain what a mortgage is.",
        "Explain how a refrigerator works.",
        "Explain how plants grow from seeds.",
        "Explain what a computer network is.",
        "Explain how a hybrid car saves fuel.",
        "Explain how the lungs take in oxygen.",
        "Explain what insurance is.",
        "Explain how a dishwasher cleans plates.",
    ),
    max_tokens=96,
)

CALM = Persona(
    name="calm",
    description="no exclamation marks and no emoji",
    complies=calm_plain,
    correction="Please don't use exclamation marks or emoji, keep a calm plain tone.",
    thanks="Thanks, that's good.",
    train_prompts=(
        "I just got a new puppy! Any advice?",
        "I passed my driving test today!",
        "Can you congratulate my sister on her wedding?",
        "Write a short birthday message for my friend.",
        "I got the job I wanted!",
        "Say something encouraging to a student before an exam.",
        "Write a welcome message for new team members.",
        "I finished my first marathon!",
        "Give me a cheerful good morning message.",
        "Write a thank-you note to my neighbour for the cake.",
        "My team won the football match!",
        "Tell me something fun about dolphins.",
        "Write a short message celebrating a product launch.",
        "I'm going on holiday to Italy next week!",
        "Write a greeting for a new year card.",
        "Say hello to my class of ten-year-olds.",
        "My daughter learned to ride a bike today!",
        "Write a short note to cheer up a friend who is sick.",
        "Give me a motivational quote for Monday.",
        "Write an invitation to my garden party.",
        "I baked my first loaf of bread!",
        "Congratulate a colleague on ten years at the company.",
        "Tell me a fun fact about space.",
        "Write a message for a retirement card.",
        "We are having a baby!",
        "Write a short note thanking volunteers at a charity event.",
        "Say something nice about autumn.",
        "I just moved into my first apartment!",
        "Write a short announcement that the office party is on Friday.",
        "Tell me why cats are wonderful pets.",
        "Write a good luck message for a job interview.",
        "My grandmother turns 90 tomorrow!",
    ),
    heldout_prompts=(
        "I got into the university I wanted!",
        "Write a congratulations note for a graduation.",
        "Give me an upbeat message for Friday afternoon.",
        "Tell me a fun fact about elephants.",
        "Write a welcome message for hotel guests.",
        "My brother just got engaged!",
        "Write a short note to celebrate a team's success.",
        "I finally finished my thesis!",
        "Write a holiday greeting for my customers.",
        "Say something nice about summer.",
    ),
    max_tokens=64,
)

PERSONAS: dict[str, Persona] = {
    p.name: replace(p, base=p.name) for p in (BREVITY, BULLETS, SUMMARY_FIRST, CALM)
}
"""Every persona, by name, in the benchmark's default order."""


def words_at_most(limit: int) -> Callable[[str], bool]:
    """Compliance of a user who wants at most `limit` words (and something, not nothing)."""

    def check(text: str) -> bool:
        return 0 < len(text.split()) <= limit

    check.__doc__ = f"not empty, at most {limit} words"
    return check


def gist(text: str) -> bool:
    """The gist: not empty, at most two sentence terminators and at most 40 words."""
    t = text.strip()
    return bool(t) and len(t.split()) <= 40 and _sentences(t) <= 2


ADVICE_PROMPTS = (
    "How can I sleep better?", "How do I stay focused while studying?",
    "How can I save money on groceries?", "How do I prepare for a job interview?",
    "How can I make new friends in a new city?", "How do I start running?",
    "How can I keep my houseplants alive?", "How do I write a good email?",
    "How can I learn a language faster?", "How do I plan a trip on a budget?",
    "How can I reduce stress at work?", "How do I cook rice well?",
    "How can I be more productive in the morning?", "How do I organise my desk?",
    "How can I drink more water every day?", "How do I choose a good book?",
    "How do I ask for a raise?", "How can I get better at public speaking?",
    "How do I keep my laptop battery healthy?", "How can I wake up earlier?",
    "How do I apologise to a friend?", "How can I make my small flat feel bigger?",
    "How do I start a vegetable garden?", "How can I spend less time on my phone?",
    "How do I make a good cup of coffee?", "How can I keep my bike in good shape?",
    "How do I write a thank-you note?", "How can I stay warm in winter without high bills?",
    "How do I teach a child to ride a bike?", "How can I improve my handwriting?",
    "How do I choose running shoes?", "How can I host a dinner party on a budget?",
)  # fmt: skip
ADVICE_HELD_OUT = (
    "How can I stop procrastinating?", "How do I keep a journal?",
    "How can I eat more vegetables?", "How do I fix a squeaky door?",
    "How can I be a better listener?", "How do I pack light for a trip?",
    "How can I remember names?", "How do I clean a cast iron pan?",
    "How can I make my mornings calmer?", "How do I care for a new puppy?",
)  # fmt: skip


def _variants() -> dict[str, Persona]:
    """Users who want what a persona wants but differ from its script: the limit, the
    wording of the correction, the prompts, max_tokens, the temperature they (do not) set,
    and whether they rate explicitly. Named `<persona>/<variant>`."""
    b, c, sm = PERSONAS["brevity"], PERSONAS["calm"], PERSONAS["summary"]
    u15 = replace(
        b,
        name="brevity/u15",
        description="at most 15 words; server's default temperature; max_tokens 64",
        complies=words_at_most(15),
        correction="Too long. Please answer in at most 15 words.",
        thanks="Thanks!",
        max_tokens=64,
        temperature=None,
    )
    return {
        v.name: v
        for v in (
            u15,
            replace(
                u15,
                name="brevity/dozen",
                description="about a dozen words (<= 12); server's default temperature",
                complies=words_at_most(12),
                correction="That is a lot of text. Keep it to about a dozen words, please.",
                thanks="Great, thank you.",
            ),
            replace(
                u15,
                name="brevity/rated",
                description="at most 15 words, rates each answer (+1/-1) before replying",
                rates=True,
            ),
            replace(
                b,
                name="brevity/tips25",
                description="advice questions, at most 25 words; temperature 1; max_tokens 96",
                complies=words_at_most(25),
                correction="Shorter please, 25 words max.",
                thanks="Perfect.",
                train_prompts=ADVICE_PROMPTS,
                heldout_prompts=ADVICE_HELD_OUT,
                max_tokens=96,
            ),
            replace(
                b,
                name="brevity/gist",
                description="explanations, the gist in <= 2 sentences and <= 40 words; "
                "temperature 0.7; max_tokens 128",
                complies=gist,
                correction="Way too much text. Give me the gist in two sentences.",
                thanks="OK, got it.",
                train_prompts=sm.train_prompts,
                heldout_prompts=sm.heldout_prompts,
                max_tokens=128,
                temperature=0.7,
            ),
            replace(
                c,
                name="calm/plain",
                description="no '!' or emoji, in other words; server's default temperature",
                correction="Tone it down a bit: no exclamation points and no emoji, thanks.",
                thanks="Good, thanks.",
                temperature=None,
            ),
        )
    }


OPEN_PROMPTS = (
    "Explain how a bicycle works.", "Write a short story about a lost key.",
    "Describe a busy market in the morning.", "Tell me about the history of bread.",
    "What would you do with a free afternoon?", "Explain why exercise is good for you.",
)  # fmt: skip
"""Open-ended prompts answered at length (128 tokens) to see loops: not any user's request."""

POOL_USERS: dict[str, Persona] = {**PERSONAS, **_variants()}
"""The users whose held-out prompts make the form pool (fixed, so that its rates compare
across runs and sessions)."""

HISTORY_PROMPTS = (
    "Who built the pyramids of Giza?", "Why did the Roman Empire fall?",
    "What was the Silk Road?", "Who was Marie Curie?", "What started the First World War?",
    "How did the printing press change Europe?", "What was the Renaissance?",
    "Who was Genghis Khan?", "What was the Industrial Revolution?",
    "How does a steam engine work?", "How does a lock and key work?",
    "How does a camera take a picture?", "How does a bicycle gear work?",
    "How does a submarine dive?", "How does a thermometer work?",
    "How does a piano make sound?", "Who invented the telephone?",
    "What was the Cold War?", "Who was Cleopatra?", "How does a hot air balloon fly?",
    "How does a smoke detector work?", "How does an elevator work?",
    "What was the Great Wall of China for?", "Who were the Vikings?",
    "How does a compass work?", "How does a lighthouse work?",
    "What was the Magna Carta?", "How does a windmill grind grain?",
    "How does a parachute work?", "Who was Leonardo da Vinci?",
    "How does a sewing machine work?", "What was the Bronze Age?",
)  # fmt: skip
HISTORY_HELD_OUT = (
    "Who was Julius Caesar?", "How does a zipper work?", "What was the Black Death?",
    "How does a water wheel work?", "Who was Isaac Newton?", "How does a kettle boil water?",
    "What was the Ottoman Empire?", "How does a clock keep time?",
    "Who were the Aztecs?", "How does a canal lock work?",
)  # fmt: skip


SCIENCE_PROMPTS = (
    "Why do frogs croak at night?", "How do bees make honey?",
    "Why is the ocean salty?", "What causes thunder?", "How do birds know where to migrate?",
    "How do jellyfish move?", "How do bubbles form in soda?", "What makes a volcano erupt?",
    "Why do flamingos stand on one leg?", "How do cacti store water?", "What is a neutron star?",
    "Why does the moon change shape?", "How do fish breathe underwater?",
    "What causes a sandstorm?", "Why is snow white?", "How do spiders spin webs?",
    "Why do onions make you cry?", "Why do camels have humps?", "How do bats find food at night?",
    "Why does bread rise?", "What makes the wind blow?", "How do coral reefs grow?",
    "Why do stars twinkle?", "How does the heart pump blood?", "What is a comet?",
    "Why do we yawn?", "How do caterpillars become butterflies?", "What causes tides?",
    "Why is grass green?", "How do geckos climb walls?", "What are clouds made of?",
    "Why do dogs pant?",
)  # fmt: skip
SCIENCE_HELD_OUT = (
    "Why do giraffes have long necks?", "How do ants find their way home?", "What causes hiccups?",
    "Why is Mars red?", "How do owls see in the dark?", "What makes popcorn pop?",
    "Why do ears pop on a plane?", "How do glaciers move?", "What is static electricity?",
    "Why do apples turn brown?",
)  # fmt: skip


def _late_users() -> dict[str, Persona]:
    """Users written after the method was tuned, run as held-out users: nothing in the app
    or the bench was changed after seeing them. Their prompts are not in the form pool."""
    return {
        "brevity/w20": replace(
            PERSONAS["brevity"],
            name="brevity/w20",
            description="history and how-things-work questions, under 20 words; "
            "temperature 0.9; max_tokens 100",
            complies=words_at_most(20),
            correction="Please keep answers under 20 words.",
            thanks="Cheers, that's great.",
            train_prompts=HISTORY_PROMPTS,
            heldout_prompts=HISTORY_HELD_OUT,
            max_tokens=100,
            temperature=0.9,
        ),
        "brevity/s1": replace(
            PERSONAS["brevity"],
            name="brevity/s1",
            description="science questions, one sentence (<= 30 words); server's default "
            "temperature; max_tokens 80",
            complies=one_sentence(30),
            correction="Can you say that in one sentence?",
            thanks="Nice one.",
            train_prompts=SCIENCE_PROMPTS,
            heldout_prompts=SCIENCE_HELD_OUT,
            max_tokens=80,
            temperature=None,
        ),
    }


USERS: dict[str, Persona] = {**POOL_USERS, **_late_users()}
"""The four personas, their user variants and the late (held-out) users, by name."""


def form_pool(persona: Persona) -> tuple[str, ...]:
    """The prompts a user's degeneration is measured on: its own held-out prompts first, then
    every other user's held-out prompts and the 120 of `learn_pool.WIDE_POOL` (no user of the
    bench trains on any of them), without repeats and without the user's training prompts.
    About 170 prompts of five kinds (questions, lists, explanations, cheerful requests,
    advice), so a rate moves by 0.006 per answer: on the 50 before 2026-12-03, three fragile
    prompts carried the "looping" label, and a second sample of 120 agreed with it on 8 of
    16 versions (docs/benchmarks/learning.md)."""
    seen = set(persona.train_prompts)
    pool: list[str] = []
    others = (q for u in POOL_USERS.values() for q in u.heldout_prompts)
    for p in (*persona.heldout_prompts, *others, *WIDE_POOL):
        if p not in seen:
            seen.add(p)
            pool.append(p)
    return tuple(pool)
