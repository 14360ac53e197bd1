"""Which tool does the base model call after the calculator's result in `calc_two`?

Teacher-forced, no sampling, no engine: for each `calc_two` train task the episode's first
step is the oracle's calculator call; the prompt the policy would then see is rendered with
the app's own chat formatter (tools inlined, a forced call: the prompt ends with
`<tool_call>`), once with the env's tool message (the scaffold: `"1406\\nNow call
final_answer with 1406."`) and once with the bare result (`"1406"`, as before 0386f39).
Prints per task P(final_answer) / (P(final_answer) + P(calculator)) for the next call's name,
and the mean. Issue #27: below ~0.1 a sampled group almost never reaches the second step.

Run: `CLAWRL_HOME=/tmp/clawrl-test-cache HF_HUB_OFFLINE=1 .venv/bin/python
bench/toolcall_probe.py [--tasks 12]`
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from clawrl_app.engine.chat.formatter import ChatFormatter  # noqa: E402
from clawrl_app.envs.base import Action  # noqa: E402
from clawrl_app.envs.toolcall.env import ToolcallEnv  # noqa: E402
from clawrl_app.models import resolve_model  # noqa: E402
from clawrl_app.paths import app_paths  # noqa: E402


def logprob(model: object, prompt: list[int], cont: list[int]) -> float:
    ids = torch.tensor([prompt + cont])
    with torch.no_grad():
        out = model(ids).logits.log_softmax(-1)[0]  # type: ignore[operator]
    return sum(float(out[len(prompt) + i - 1, t]) for i, t in enumerate(cont))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", type=int, default=12, help="calc_two train tasks to probe")
    args = ap.parse_args()
    path = resolve_model(None, app_paths()).path
    tok = AutoTokenizer.from_pretrained(path)
    fmt = ChatFormatter(tok)
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    env = ToolcallEnv()
    tasks = [t for t in env.tasks() if t.family == "calc_two" and t.split == "train"]
    names = {n: tok(f'{{"name": "{n}"', add_special_tokens=False)["input_ids"]
             for n in ("final_answer", "calculator")}  # fmt: skip
    shares: dict[str, list[float]] = {"scaffold": [], "bare": []}
    print("| task | result | P(final_answer), scaffold | bare |")
    print("|---|---|---|---|")
    for task in tasks[: args.tasks]:
        call = task.data["oracle"][0]
        env.reset(task)
        seen = env.step(Action(tool="calculator", arguments=call["arguments"])).observation.text
        bare = seen.split("\n")[0]
        tools = [s.openai() for s in env.tool_specs(task)]
        row = []
        for label, content in (("scaffold", seen), ("bare", bare)):
            messages = [
                {"role": "system", "content": env.system_prompt(task)},
                {"role": "user", "content": task.instruction},
                {"role": "assistant", "content": "", "tool_calls": [{
                    "id": "c0", "type": "function",
                    "function": {"name": "calculator", "arguments": json.dumps(call["arguments"])},
                }]},
                {"role": "tool", "tool_call_id": "c0", "content": content},
            ]  # fmt: skip
            prompt = fmt.render(messages, tools, "required")
            lp = {n: logprob(model, prompt, ids) for n, ids in names.items()}
            fa = math.exp(lp["final_answer"])
            share = fa / (fa + math.exp(lp["calculator"]))
            shares[label].append(share)
            row.append(f"{share:.2f}")
        print(f"| {task.id} | {bare} | {row[0]} | {row[1]} |")
    mean = {k: sum(v) / len(v) for k, v in shares.items() if v}
    print(f"| mean | | **{mean['scaffold']:.3f}** | **{mean['bare']:.3f}** |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
