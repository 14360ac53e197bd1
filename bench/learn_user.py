"""The simulated user of bench/learn.py: what it wants (one short sentence), how it
reacts, and the prompts it trains and evaluates on."""

from __future__ import annotations

import re

MAX_WORDS = 20
_TERMINATOR_RE = re.compile(r"[.!?]+(?=[\s\"')\]]|$)")


def complies(text: str) -> bool:
    """The preference, checked by code: the answer is ONE short sentence.

    - not empty;
    - at most `MAX_WORDS` (20) whitespace-separated words;
    - no line break inside the answer (a list or a second paragraph is not one sentence);
    - at most one sentence terminator: a run of `.`, `!` or `?` followed by whitespace, a
      closing quote/bracket or the end ("..." counts once; "3.14" or "e.g" mid-word do not).
    """
    t = text.strip()
    if not t or "\n" in t:
        return False
    if len(t.split()) > MAX_WORDS:
        return False
    return len(_TERMINATOR_RE.findall(t)) <= 1


THANKS = "Thanks, that's perfect!"
TOO_LONG = "No, that's too long. Answer in one short sentence."
TOO_MANY = "No, that's more than one sentence. Answer in one short sentence."


def reaction(text: str) -> str:
    """The simulated user's reply to an answer: thanks, or a correction stating the preference."""
    if complies(text):
        return THANKS
    t = text.strip()
    return TOO_LONG if (len(t.split()) > MAX_WORDS or not t) else TOO_MANY


# Training prompts: short everyday questions, a mix of one-fact questions (the base model
# often answers those in one sentence) and "explain" questions (it rarely does).
TRAIN_PROMPTS = [
    "What is photosynthesis?",
    "Why is the sky blue?",
    "What does a compiler do?",
    "What is gravity?",
    "What is the capital of Japan?",
    "How do vaccines work?",
    "What is a black hole?",
    "Who wrote Romeo and Juliet?",
    "What is machine learning?",
    "Why do leaves change colour in autumn?",
    "What is the boiling point of water?",
    "What causes earthquakes?",
    "What is democracy?",
    "What is a prime number?",
    "How does a rainbow form?",
    "What do bees make?",
    "What is DNA?",
    "Why do we have seasons?",
    "What language is spoken in Brazil?",
    "What is a volcano?",
    "What does the heart do?",
    "What is recycling?",
    "How many continents are there?",
    "What is a noun?",
    "What is the internet?",
    "Who painted the Mona Lisa?",
    "What is an atom?",
    "What is inflation?",
    "How do airplanes fly?",
    "What is the largest ocean?",
    "What is a computer virus?",
    "Why do cats purr?",
    "What is electricity?",
    "What is the moon made of?",
    "How do plants drink water?",
    "What is a galaxy?",
]

# Held-out prompts: the same kind of questions, none of them trained on.
HELDOUT_PROMPTS = [
    "What is a tornado?",
    "What is the capital of Italy?",
    "How does the stomach digest food?",
    "What is climate change?",
    "Who invented the telephone?",
    "What is a rainforest?",
    "Why do birds migrate?",
    "What is an earthquake scale?",
    "What is a battery?",
    "How do magnets work?",
    "What is a desert?",
    "What is a hurricane?",
]

# General quality: unrelated questions whose answer must contain a fact (regex, case-insensitive).
QUALITY_PROMPTS: list[tuple[str, str]] = [
    ("What is the capital of France?", r"\bparis\b"),
    ("What is 2+3?", r"\b5\b|\bfive\b"),
    ("How many legs does a spider have?", r"\b8\b|\beight\b"),
    ("What colour is the sky on a clear day?", r"\bblue\b"),
    ("What is the opposite of hot?", r"\bcold\b"),
    ("Which planet do we live on?", r"\bearth\b"),
]

LATENCY_PROMPT = "Tell me about the weather in spring."
LATENCY_TOKENS = 16
