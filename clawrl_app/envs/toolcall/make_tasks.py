"""Writes the shipped tool-call task pack (`envs/data/toolcall/`): deterministic, every
answer computed here by Python itself (datetime, math, Fraction), every task with the tool
calls that solve it (`oracle`). `python -m clawrl_app.envs.toolcall.make_tasks` rewrites
the files; a test checks the shipped ones are exactly what this writes.

Five families of 25 tasks: word_arith, unit_conversion, dates, number_theory, lookup.
Every fifth task of a family is held out (`split = "heldout"`): never trained on.

Then a curriculum within the embedded model's reach (a forced tool call only has to pick
the tool and copy the numbers or the key from the question; `curriculum.py`): calc_one
and lookup_one are one-step (the episode ends at the first call; its result is the
answer), calc_two needs the call and then `final_answer` with its result.
"""

from __future__ import annotations

import json
import math
import random
from datetime import date, timedelta
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parents[1] / "data" / "toolcall"
PER_FAMILY = 25
END = " End with 'Answer: \\boxed{...}'."
TABLE = {
    "crates_north": 1240, "crates_south": 986, "crates_east": 1517, "crates_west": 743,
    "price_widget": 12.5, "price_gadget": 7.25, "price_gizmo": 31.0, "price_doohickey": 4.75,
    "staff_alpha": 38, "staff_beta": 52, "staff_gamma": 17, "staff_delta": 64,
    "km_route_1": 142, "km_route_2": 87, "km_route_3": 219, "km_route_4": 56,
}  # fmt: skip


def calc(expression: str) -> dict[str, Any]:
    return {"tool": "calculator", "arguments": {"expression": expression}}


def code(source: str) -> dict[str, Any]:
    return {"tool": "code_interpreter", "arguments": {"code": source}}


def word_arith(r: random.Random, i: int) -> dict[str, Any]:
    kind = i % 3
    if kind == 0:
        k, price, n = r.choice([3, 4, 5]), r.choice([0.75, 1.20, 2.00, 0.90]), r.randint(6, 40)
        ans = round(price / k * n * 100)
        return dict(prompt=f"Pencils cost {k} for ${price:.2f}. How many cents do {n} pencils "
                    "cost?", answer=str(ans), answer_type="integer",
                    oracle=[calc(f"round({price} / {k} * {n} * 100)")])  # fmt: skip
    if kind == 1:
        a, b, c = r.randint(120, 900), r.randint(10, 90), r.randint(3, 12)
        return dict(prompt=f"A library has {a} books. It buys {b} boxes of {c} books each and "
                    f"then gives away {b + c} books. How many books does it have now?",
                    answer=str(a + b * c - (b + c)), answer_type="integer",
                    oracle=[calc(f"{a} + {b} * {c} - ({b} + {c})")])  # fmt: skip
    speed, hours, extra = r.randint(40, 95), r.randint(2, 9), r.randint(5, 60)
    return dict(prompt=f"A train travels at {speed} km/h for {hours} hours and then "
                f"{extra} km more. How many kilometres does it travel in total?",
                answer=str(speed * hours + extra), answer_type="integer",
                oracle=[calc(f"{speed} * {hours} + {extra}")])  # fmt: skip


def unit_conversion(r: random.Random, i: int) -> dict[str, Any]:
    if i % 2 == 0:
        rate, amount = r.choice([1.08, 0.86, 1.27, 149.5, 0.79]), r.randint(20, 900)
        ans = round(amount * rate, 2)
        return dict(prompt=f"The exchange rate is 1 unit of currency A = {rate} units of "
                    f"currency B. How many units of B are {amount} units of A? Give the "
                    "answer to 2 decimal places.", answer=f"{ans:.2f}", answer_type="decimal",
                    tolerance=0.005, oracle=[calc(f"round({amount} * {rate}, 2)")])  # fmt: skip
    units = [("ounces", 28.35, "grams"), ("miles", 1.609, "kilometres"),
             ("pounds", 453.6, "grams"), ("inches", 2.54, "centimetres")]  # fmt: skip
    name, per, target = r.choice(units)
    amount = r.randint(3, 250)
    ans = round(amount * per)
    return dict(prompt=f"1 {name[:-1] if name != 'inches' else 'inch'} = {per} {target}. How "
                f"many {target} are {amount} {name}, rounded to the nearest whole number?",
                answer=str(ans), answer_type="integer",
                oracle=[calc(f"round({amount} * {per})")])  # fmt: skip


def dates(r: random.Random, i: int) -> dict[str, Any]:
    start = date(2020, 1, 1) + timedelta(days=r.randint(0, 2000))
    if i % 2 == 0:
        end = start + timedelta(days=r.randint(10, 400))
        n = (end - start).days
        src = f"from datetime import date\nprint((date({end.year}, {end.month}, {end.day}) - date({start.year}, {start.month}, {start.day})).days)"  # noqa: E501
        return dict(prompt=f"How many days are there from {start.isoformat()} to "
                    f"{end.isoformat()}?", answer=str(n), answer_type="integer",
                    oracle=[code(src)])  # fmt: skip
    src = f"from datetime import date\nprint(date({start.year}, {start.month}, {start.day}).strftime('%A'))"  # noqa: E501
    return dict(prompt=f"On which day of the week is {start.isoformat()}? Answer with the "
                "English name of the day.", answer=start.strftime("%A"), answer_type="string",
                oracle=[code(src)])  # fmt: skip


def number_theory(r: random.Random, i: int) -> dict[str, Any]:
    kind = i % 4
    if kind == 0:
        n = r.randint(30, 2000)
        count = sum(1 for d in range(1, n + 1) if n % d == 0)
        src = f"n = {n}\nprint(sum(1 for d in range(1, n + 1) if n % d == 0))"
        return dict(prompt=f"How many positive divisors does {n} have?", answer=str(count),
                    answer_type="integer", oracle=[code(src)])  # fmt: skip
    if kind == 1:
        n, k = r.randint(6, 30), r.randint(2, 5)
        return dict(prompt=f"In how many ways can a team of {k} be chosen from {n} people?",
                    answer=str(math.comb(n, k)), answer_type="integer",
                    oracle=[calc(f"comb({n}, {k})")])  # fmt: skip
    if kind == 2:
        a, b = r.randint(100, 5000), r.randint(100, 5000)
        return dict(prompt=f"What is the greatest common divisor of {a} and {b}?",
                    answer=str(math.gcd(a, b)), answer_type="integer",
                    oracle=[calc(f"gcd({a}, {b})")])  # fmt: skip
    a, b = r.randint(4, 60), r.randint(4, 60)
    return dict(prompt=f"What is the least common multiple of {a} and {b}?",
                answer=str(math.lcm(a, b)), answer_type="integer",
                oracle=[calc(f"lcm({a}, {b})")])  # fmt: skip


def lookup(r: random.Random, i: int) -> dict[str, Any]:
    group = ["crates", "price", "staff", "km"][i % 4]
    keys = sorted(k for k in TABLE if k.startswith(group))
    a, b = r.sample(keys, 2)
    calls = [
        {"tool": "lookup", "arguments": {"key": a}},
        {"tool": "lookup", "arguments": {"key": b}},
    ]
    if group == "price":
        qa, qb = r.randint(2, 9), r.randint(2, 9)
        total = TABLE[a] * qa + TABLE[b] * qb
        return dict(prompt=f"Use the lookup tool for the prices '{a}' and '{b}'. What do {qa} "
                    f"of the first and {qb} of the second cost together?",
                    answer=f"{total:.2f}", answer_type="decimal", tolerance=0.005,
                    oracle=[*calls, calc(f"{TABLE[a]} * {qa} + {TABLE[b]} * {qb}")])  # fmt: skip
    return dict(prompt=f"Use the lookup tool for '{a}' and '{b}'. What is their sum?",
                answer=str(int(TABLE[a] + TABLE[b])), answer_type="integer",
                oracle=[*calls, calc(f"{TABLE[a]} + {TABLE[b]}")])  # fmt: skip


FAMILIES = {
    "word_arith": (word_arith, ["calculator", "code_interpreter"]),
    "unit_conversion": (unit_conversion, ["calculator", "code_interpreter"]),
    "dates": (dates, ["code_interpreter", "calculator"]),
    "number_theory": (number_theory, ["calculator", "code_interpreter"]),
    "lookup": (lookup, ["lookup", "calculator"]),
}


def make_tasks(seed: int = 2026) -> list[dict[str, Any]]:
    tasks = []
    for f_index, (family, (make, tools)) in enumerate(FAMILIES.items()):
        r = random.Random(seed * 100 + f_index)
        for i in range(PER_FAMILY):
            t = make(r, i)
            tasks.append(
                {
                    "id": f"{family}-{i:03d}",
                    "family": family,
                    "prompt": t.pop("prompt") + END,
                    "split": "heldout" if i % 5 == 4 else "train",
                    "tools": tools,
                    **t,
                }
            )
    return tasks


def render() -> dict[str, str]:
    """File name -> exact content of the shipped pack."""
    from clawrl_app.envs.toolcall.curriculum import CURRICULUM_TABLE, curriculum_tasks

    lines = [json.dumps(t, sort_keys=True) for t in make_tasks() + curriculum_tasks()]
    return {
        "tasks.jsonl": "\n".join(lines) + "\n",
        "lookup_table.json": json.dumps({**TABLE, **CURRICULUM_TABLE}, indent=1, sort_keys=True)
        + "\n",
    }


def main() -> None:
    DATA.mkdir(parents=True, exist_ok=True)
    for name, text in render().items():
        (DATA / name).write_text(text)
    print(f"wrote {render()['tasks.jsonl'].count(chr(10))} tasks to {DATA}")


if __name__ == "__main__":
    main()
