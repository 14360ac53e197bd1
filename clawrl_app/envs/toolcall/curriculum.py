"""The toolcall curriculum: task families within the embedded model's reach (issue #27).

A 135M model forced into a valid call (`tool_choice = "required"`) only has to choose the
tool and copy the numbers or the key from the question into its arguments. Three families,
deterministic (written by `make_tasks.py` into the shipped pack):

- `calc_one`: one arithmetic question with its numbers in the prompt ("Subtract 38 from
  412."); one step: the episode ends at the first tool call and its result is the answer.
- `lookup_one`: the value of a key named in the prompt; one step (lookup or calculator
  offered: choosing the tool is part of the task).
- `calc_two`: the same questions in two steps: the calculator, then `final_answer` with
  its result.

Train and held-out are split by template and by values: each family has templates only
held-out tasks use, the other held-out tasks use train templates with numbers (or keys)
no train task has, and no (template, values) pair occurs twice.
"""

from __future__ import annotations

import random
from typing import Any

from clawrl_app.envs.toolcall.calculator import calculate, format_number

PER_FAMILY = 24
HELDOUT_SHARE = 4  # every 4th task is held out
CALC_TRAIN = [
    ("What is {a} times {b}?", "{a} * {b}"),
    ("Add {a} and {b}.", "{a} + {b}"),
    ("Subtract {b} from {a}.", "{a} - {b}"),
    ("What is {a} plus {b}?", "{a} + {b}"),
    ("Multiply {a} by {b}.", "{a} * {b}"),
    ("What is {a} minus {b}?", "{a} - {b}"),
    ("Multiply {a} by {b}, then add {c}.", "{a} * {b} + {c}"),
]
CALC_HELDOUT = [
    ("What is the product of {a} and {b}?", "{a} * {b}"),
    ("Take {b} away from {a}.", "{a} - {b}"),
]
LOOKUP_TRAIN = [
    "What is the value of '{key}' in the table?",
    "Look up '{key}' in the table.",
    "Find the number stored under '{key}'.",
]
LOOKUP_HELDOUT = ["Which value does the table hold for '{key}'?"]
ITEMS = {
    "stock": ["apples", "pears", "plums", "figs", "limes", "kiwis", "dates", "grapes"],
    "seats": ["hall_a", "hall_b", "hall_c", "hall_d", "hall_e", "hall_f", "hall_g", "hall_h"],
    "depth": ["well_1", "well_2", "well_3", "well_4", "well_5", "well_6", "well_7", "well_8"],
}
CURRICULUM_TABLE = {
    f"{group}_{name}": 100 + (37 * i + 211 * g) % 900
    for g, (group, names) in enumerate(ITEMS.items())
    for i, name in enumerate(names)
}
"""Keys of lookup_one (none starts like a key of the shipped `lookup` family)."""
SUFFIX = {
    "calc_one": " Use the calculator.",
    "lookup_one": "",
    "calc_two": " Use the calculator, then give its result with final_answer.",
}


def _calc_values(r: random.Random, seen: set[tuple[int, int, int]]) -> tuple[int, int, int]:
    while True:
        v = (r.randint(12, 99), r.randint(3, 60), r.randint(2, 40))
        if v not in seen:
            seen.add(v)
            return v


def _calc_task(r: random.Random, i: int, seen: set[tuple[int, int, int]]) -> dict[str, Any]:
    held = i % HELDOUT_SHARE == HELDOUT_SHARE - 1
    if held and (i // HELDOUT_SHARE) % 2 == 0:
        prompt, expr = CALC_HELDOUT[(i // (2 * HELDOUT_SHARE)) % len(CALC_HELDOUT)]
    else:
        prompt, expr = CALC_TRAIN[i % len(CALC_TRAIN)]
    a, b, c = _calc_values(r, seen)
    expression = expr.format(a=a, b=b, c=c)
    return {
        "prompt": prompt.format(a=a, b=b, c=c),
        "answer": format_number(calculate(expression)),
        "answer_type": "integer",
        "split": "heldout" if held else "train",
        "oracle": [{"tool": "calculator", "arguments": {"expression": expression}}],
    }


def _lookup_tasks() -> list[dict[str, Any]]:
    keys = sorted(CURRICULUM_TABLE)
    held_keys = {k for n, k in enumerate(keys) if n % 8 == 7}  # one key per group
    out = []
    for i in range(PER_FAMILY):
        held = i % HELDOUT_SHARE == HELDOUT_SHARE - 1
        pool = sorted(held_keys) if held and (i // HELDOUT_SHARE) % 2 == 0 else None
        if pool is not None:  # a held-out key asked in a train template
            key, prompt = pool[(i // 8) % len(pool)], LOOKUP_TRAIN[i % len(LOOKUP_TRAIN)]
        elif held:  # a held-out template on a train key
            key = [k for k in keys if k not in held_keys][(5 * i) % (len(keys) - len(held_keys))]
            prompt = LOOKUP_HELDOUT[0]
        else:
            key = [k for k in keys if k not in held_keys][i % (len(keys) - len(held_keys))]
            prompt = LOOKUP_TRAIN[i % len(LOOKUP_TRAIN)]
        out.append({
            "prompt": prompt.format(key=key),
            "answer": str(CURRICULUM_TABLE[key]),
            "answer_type": "integer",
            "split": "heldout" if held else "train",
            "oracle": [{"tool": "lookup", "arguments": {"key": key}}],
        })  # fmt: skip
    return out


def curriculum_tasks(seed: int = 27) -> list[dict[str, Any]]:
    """The curriculum's task lines (the pack's format; `one_step` tasks end at their first
    call)."""
    families: dict[str, tuple[list[dict[str, Any]], list[str], bool]] = {}
    for name, offset in (("calc_one", 0), ("calc_two", 1)):
        r, seen = random.Random(seed * 10 + offset), set()  # type: ignore[var-annotated]
        families[name] = ([_calc_task(r, i, seen) for i in range(PER_FAMILY)], ["calculator"],
                          name == "calc_one")  # fmt: skip
    families["lookup_one"] = (_lookup_tasks(), ["lookup", "calculator"], True)
    out = []
    for family, (made, tools, one_step) in families.items():
        for i, t in enumerate(made):
            line = {"id": f"{family}-{i:03d}", "family": family, "tools": tools,
                    "max_steps": 1 if one_step else 3, **t}  # fmt: skip
            line["prompt"] += SUFFIX[family]
            if one_step:
                line["one_step"] = True
            out.append(line)
    return out
