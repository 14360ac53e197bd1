"""Prefix reuse benchmark: time to first token of turn 1 vs turn 2 of a session (CPU).

What an agent does: a ~2k-token system prompt (instructions + tool schemas), then every turn
re-sends the whole history plus the previous answer. Each session gets its own system prompt
(it differs from its first words), so turn 1 is always a cold prefill; turn 2 extends turn 1's
prompt + answer. Through the real HTTP endpoint with the official `openai` client, no session
header, streaming, temperature 0; time to first token = request sent -> first chunk of the answer (text or a tool call; a tool
call is held back until it is complete, so the questions ask for text).
Run once with the prefix cache at its default (the hardware plan's) and once with it off
(`server.prefix_cache_mb = 0`) for comparison. Goal (issue #15): turn 2 <= 0.25x turn 1.

Run: `.venv/bin/python bench/serve_prefix.py [--sessions 3] [--prompt-tokens 2000]`
(also `bench/serve.py --prefix`).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from clawrl_app.config import load_settings  # noqa: E402
from clawrl_app.engine.engine_thread import EngineThread  # noqa: E402
from clawrl_app.models import resolve_model  # noqa: E402
from clawrl_app.paths import app_paths  # noqa: E402

TOOL_NAMES = ["read_file", "write_file", "list_dir", "run_shell", "web_search", "fetch_url",
              "send_message", "schedule_task", "memory_get", "memory_set", "browser_open",
              "image_describe"]  # fmt: skip
WORDS = ["amber", "birch", "cobalt", "dune", "ember", "fjord", "garnet", "harbor"]


def system_prompt(session: int, tokenizer: Any, target_tokens: int) -> str:
    """Instructions + tool schemas, ~`target_tokens` tokens, unique from its first words."""
    head = f"Session {WORDS[session % len(WORDS)]}-{session}. You are a personal agent. "
    parts = [head]
    i = 0
    while len(tokenizer.encode("".join(parts))) < target_tokens:
        name = TOOL_NAMES[i % len(TOOL_NAMES)]
        schema = {
            "name": f"{name}_{i}",
            "description": f"Tool {i}: {name.replace('_', ' ')} for the user; check arguments, "
            "never guess paths, report errors verbatim.",
            "parameters": {"type": "object", "properties": {"target": {"type": "string"},
                           "limit": {"type": "integer", "minimum": 1}}, "required": ["target"]},
        }  # fmt: skip
        parts.append(f"Rule {i}: be brief and exact. Tool: {json.dumps(schema)}\n")
        i += 1
    return "".join(parts)


def ask(client: Any, messages: list[dict[str, str]], max_tokens: int) -> tuple[float, str, int]:
    """(time to first content token in s, answer text, prompt tokens) of one streamed turn."""
    t0 = time.perf_counter()
    first: float | None = None
    text, prompt_tokens = [], 0
    stream = client.chat.completions.create(
        model="clawrl", messages=messages, temperature=0, max_tokens=max_tokens, stream=True,
        stream_options={"include_usage": True},
    )  # fmt: skip
    for chunk in stream:
        if chunk.usage is not None:
            prompt_tokens = chunk.usage.prompt_tokens
        delta = chunk.choices[0].delta if chunk.choices else None
        if delta is not None and (delta.content or delta.tool_calls):  # a call streams no text
            first = first if first is not None else time.perf_counter() - t0
            text.append(delta.content or "")
    return (first if first is not None else time.perf_counter() - t0), "".join(text), prompt_tokens


def run_sessions(
    cache_mb: int | None, sessions: int, prompt_tokens: int, max_tokens: int, first_session: int
) -> tuple[list[dict[str, float]], dict[str, int]]:
    """Serve the embedded model (no trainer) and time `sessions` two-turn sessions."""
    import openai

    model = resolve_model(None, app_paths())  # the user's cache: converted once
    env = {
        "CLAWRL_MODEL__PATH": str(model.path),
        "CLAWRL_SERVER__PORT": "0",
        "CLAWRL_TRAIN__ENABLED": "false",  # serving only: no trainer competing for the CPU
    }
    if cache_mb is not None:
        env["CLAWRL_SERVER__PREFIX_CACHE_MB"] = str(cache_mb)
    settings = load_settings(env=env).settings
    home = tempfile.mkdtemp(prefix="clawrl-bench-")
    et = EngineThread(settings, app_paths(home)).start()
    rows = []
    try:
        client = openai.OpenAI(base_url=et.url, api_key="unused", max_retries=0, timeout=600)
        tok = et.engine.service.formatter.tokenizer
        ask(client, [{"role": "user", "content": "Hi"}], 2)  # warm-up: first-call costs
        for k in range(first_session, first_session + sessions):
            turn1 = [
                {"role": "system", "content": system_prompt(k, tok, prompt_tokens)},
                {"role": "user", "content": "In one sentence: what can you do for me?"},
            ]
            ttft1, answer, n1 = ask(client, turn1, max_tokens)
            turn2 = [*turn1, {"role": "assistant", "content": answer},
                     {"role": "user", "content": "Say it again, shorter."}]  # fmt: skip
            time.sleep(0.5)  # a user reads the answer; the engine stores turn 1's KV
            ttft2, _, n2 = ask(client, turn2, max_tokens)
            rows.append({"turn1_s": ttft1, "turn2_s": ttft2, "tokens1": n1, "tokens2": n2})
            print(f"  session {k}: turn 1 {ttft1:.2f} s ({n1} tokens), "
                  f"turn 2 {ttft2:.2f} s ({n2} tokens); answer 1 {answer[:40]!r}",
                  flush=True)  # fmt: skip
        stats = et.engine.status()["serving"].get("prefix_cache", {})
    finally:
        et.stop()
        shutil.rmtree(home, ignore_errors=True)  # its F16 copy of the model alone is ~270 MB
    return rows, stats


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--sessions", type=int, default=3, help="two-turn sessions per setting")
    ap.add_argument("--prompt-tokens", type=int, default=2000, help="system prompt size")
    ap.add_argument("--max-tokens", type=int, default=32, help="answer length per turn")
    ap.add_argument("--no-baseline", action="store_true", help="skip the cache-off run")
    args = ap.parse_args(argv)
    print("prefix cache on (the plan's default bound):", flush=True)
    on, stats = run_sessions(None, args.sessions, args.prompt_tokens, args.max_tokens, 0)
    off: list[dict[str, float]] = []
    if not args.no_baseline:
        print("prefix cache off (server.prefix_cache_mb = 0):", flush=True)
        off, _ = run_sessions(0, args.sessions, args.prompt_tokens, args.max_tokens, 100)
    print_table(on, off, stats)


def print_table(on: list[dict[str, float]], off: list[dict[str, float]], stats: Any) -> None:
    def med(rows: list[dict[str, float]], key: str) -> float:
        return statistics.median(r[key] for r in rows)

    ratio_on = statistics.median(r["turn2_s"] / r["turn1_s"] for r in on)
    print("\n| measure (median of sessions) | cache on | cache off | goal |")
    print("|---|---|---|---|")
    print(f"| prompt tokens, turn 1 / turn 2 | {med(on, 'tokens1'):.0f} / {med(on, 'tokens2'):.0f}"
          " | | |")  # fmt: skip
    base1 = f"{med(off, 'turn1_s'):.2f} s" if off else "-"
    base2 = f"{med(off, 'turn2_s'):.2f} s" if off else "-"
    print(f"| time to first token, turn 1 | {med(on, 'turn1_s'):.2f} s | {base1} | |")
    print(f"| time to first token, turn 2 | {med(on, 'turn2_s'):.2f} s | {base2} | |")
    ratio_off = (
        f"{statistics.median(r['turn2_s'] / r['turn1_s'] for r in off):.3f}x" if off else "-"
    )
    print(f"| turn 2 / turn 1 | {ratio_on:.3f}x | {ratio_off} | <= 0.25x |")
    if stats:
        print(f"| prefix cache (cache on) | {stats['hits']} hits, {stats['misses']} misses, "
              f"{stats['tokens_reused']} tokens reused, {stats['entries']} entries, "
              f"{stats['bytes'] / 2**20:.0f} MiB | | |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
