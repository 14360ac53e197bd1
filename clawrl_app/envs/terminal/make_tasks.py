"""Writes the terminal env's easiest family, `write` (`envs/data/terminal/write-*/`): one
file with one word or number in it, a single call away (`shell_exec` with `echo`, or
`shell_write_content_to_file`), within reach of the embedded model once it copies the path
and the value from the instruction. The shipped shell chores (data, files, scripting, text)
are left as they are. `python -m clawrl_app.envs.terminal.make_tasks` rewrites the folders;
a test checks the shipped ones are exactly what this writes.

Train and held-out differ by template (wording) and by values (other words, other numbers),
so no held-out task is a train task reworded or revalued. Each task has two tests (the file
exists; it holds the value), so writing the wrong value scores 0, not -1 (the reward is
`2 x passed / tests - 1`): a group can differ even when nobody is fully right.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data" / "terminal"
FAMILY = "write"
PREFIX = "write-"
TRAIN_WORDS = ["apple", "river", "candle", "garden", "pencil", "silver", "orange", "forest"]
HELDOUT_WORDS = ["window", "rocket", "basket", "violet"]
FILES = ["notes", "todo", "label", "memo", "entry", "result"]
TRAIN = [
    "Write the word {word} to /workspace/answer.txt.",
    "Write the number {number} to /workspace/answer.txt.",
    "Create the file /workspace/{name}.txt containing the text {word}.",
]
HELDOUT = [
    "Put the word {word} into the file /workspace/answer.txt.",
    "Create the file /workspace/{name}.txt with the number {number} in it.",
]
PER_TRAIN_TEMPLATE, PER_HELDOUT_TEMPLATE = 4, 3

TEST = """from pathlib import Path

W = Path('/workspace')


def test_file_exists():
    assert (W / {file!r}).is_file()


def test_file_holds_the_value():
    assert (W / {file!r}).read_text().strip() == {value!r}
"""

TOML = """id = "{id}"
family = "{family}"
instruction = "{instruction}"
max_steps = 3
split = "{split}"

[verifier]
kind = "pytest"
timeout_s = 30
"""


def tasks() -> list[dict[str, str]]:
    """Every task of the family, deterministic; no word, number or instruction twice."""
    r = random.Random(20261127)
    out = []
    for split, templates, per in (
        ("train", TRAIN, PER_TRAIN_TEMPLATE),
        ("heldout", HELDOUT, PER_HELDOUT_TEMPLATE),
    ):
        pool = TRAIN_WORDS if split == "train" else HELDOUT_WORDS
        words = iter(r.sample(pool, len(pool)))  # each word once per split
        low, high = (10, 499) if split == "train" else (500, 999)
        numbers = iter(r.sample(range(low, high + 1), per * len(templates)))
        names = r.sample(FILES, len(FILES))
        for k in range(per * len(templates)):
            template = templates[k % len(templates)]
            word = next(words) if "{word}" in template else ""
            number = next(numbers) if "{number}" in template else 0
            name = names[k % len(names)]
            out.append({
                "id": f"{PREFIX}{split}-{k:02d}",
                "instruction": template.format(word=word, number=number, name=name),
                "split": split,
                "file": f"{name}.txt" if "{name}" in template else "answer.txt",
                "value": str(number) if "{number}" in template else word,
            })  # fmt: skip
    return out


def render() -> dict[str, str]:
    """Relative path -> text of every file of the family."""
    files = {}
    for t in tasks():
        d = t["id"]
        files[f"{d}/task.toml"] = TOML.format(family=FAMILY, **t)
        files[f"{d}/tests/test_task.py"] = TEST.format(file=t["file"], value=t["value"])
        files[f"{d}/solution.sh"] = f"set -e\ncd /workspace\necho {t['value']} > {t['file']}\n"
    return files


def main() -> None:
    for old in DATA.glob(f"{PREFIX}*"):
        shutil.rmtree(old)
    for name, text in render().items():
        path = DATA / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    print(f"wrote {len(tasks())} `{FAMILY}` tasks to {DATA}")


if __name__ == "__main__":
    main()
