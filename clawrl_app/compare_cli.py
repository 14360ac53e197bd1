"""`clawrl-app compare A B`: two versions' greedy answers to the same prompts, side by side.

The replay runs inside the engine (`POST /admin/compare`, see `clawrl_app.engine.publishing.compare`):
a running `clawrl-app serve` when there is one, else an engine started in this process.
Its answers are never recorded and wait behind user requests."""

from __future__ import annotations

import argparse
import shutil
import sys
import textwrap
from pathlib import Path
from typing import Any

from clawrl_app.compare_text import guard_text
from clawrl_app.config import LoadedSettings
from clawrl_app.paths import AppPaths

_STYLE = {"a": ("\x1b[1;31m", "\x1b[0m"), "b": ("\x1b[1;32m", "\x1b[0m")}
_PLAIN = {"a": ("[-", "-]"), "b": ("{+", "+}")}


def add_compare_parser(sub: Any) -> None:
    p = sub.add_parser(
        "compare",
        help="answers of two versions to the same prompts, side by side with the differences",
        description="Replay the last real user prompts (or a file's) through two versions, "
        "greedily, as unrecorded background traffic, and print the answers side by side with "
        "the words that differ highlighted, and both versions' regression-guard scores. An "
        "older checkpoint the engine has not loaded is loaded for the comparison.",
    )
    p.add_argument("a", metavar="VERSION_A", help="base, v3, clawrl-v3, or clawrl (the served)")
    p.add_argument("b", metavar="VERSION_B", help="the version to compare with")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--last", type=int, default=5, help="the last N recorded prompts (default 5)")
    src.add_argument(
        "--prompts", type=Path, metavar="FILE",
        help='prompts, one per line, or JSONL lines {"messages": [...]}',
    )  # fmt: skip
    p.add_argument("--max-tokens", type=int, default=128, help="per answer (default 128)")
    p.add_argument("--no-color", action="store_true", help="mark differences as [-a-] / {+b+}")


def wrap_segments(segments: list[list[Any]], width: int) -> list[list[tuple[str, bool]]]:
    """Lines of at most `width` characters, each a list of (word, changed)."""
    lines: list[list[tuple[str, bool]]] = [[]]
    used = 0
    for text, changed in segments:
        for word in str(text).split():
            for piece in textwrap.wrap(word, width) or [word]:
                if used and used + 1 + len(piece) > width:
                    lines.append([])
                    used = 0
                lines[-1].append((piece, bool(changed)))
                used += len(piece) + (1 if used else 0)
    return lines


def _render(line: list[tuple[str, bool]], side: str, width: int, color: bool) -> str:
    start, end = (_STYLE if color else _PLAIN)[side]
    shown = " ".join(w for w, _ in line)
    text = " ".join(f"{start}{w}{end}" if ch else w for w, ch in line)
    pad = max(0, width - len(shown if color else text))  # plain markers take room
    return text + " " * pad


def side_by_side(item: dict[str, Any], width: int, color: bool) -> list[str]:
    """One prompt's two answers in two columns of `width`, differing words highlighted."""
    left = wrap_segments(item["a_segments"], width)
    right = wrap_segments(item["b_segments"], width)
    rows = max(len(left), len(right))
    left += [[]] * (rows - len(left))
    right += [[]] * (rows - len(right))
    return [
        f"{_render(la, 'a', width, color)} │ {_render(rb, 'b', width, color)}".rstrip()
        for la, rb in zip(left, right, strict=True)
    ]


def format_report(result: dict[str, Any], width: int, color: bool) -> list[str]:
    """The whole comparison as printed lines (headers, columns, scores, summary)."""
    a, b = result["a"], result["b"]
    out = []
    for n, item in enumerate(result["items"], 1):
        sa, sb = item["scores"]["a"], item["scores"]["b"]
        mark = "identical" if item["same"] else "differ"
        out.append(f"── {n}. {item['prompt']}  ({mark})")
        out.append(f"{('A ' + a).ljust(width)} │ B {b}")
        out.extend(side_by_side(item, width, color))
        score_a = f"{sa['words']} words, {sa['chars']} chars"
        out.append(f"{score_a.ljust(width)} │ {sb['words']} words, {sb['chars']} chars")
        out.append("")
    s = result["summary"]
    out.append(
        f"{a} vs {b}: {s['prompts']} prompts, {s['identical']} identical, "
        f"{s['prompts'] - s['identical']} differ; mean length {s['a_words_mean']:.1f} vs "
        f"{s['b_words_mean']:.1f} words (greedy, max {result['max_tokens']} tokens)"
    )
    guard = guard_text(result, "; ")
    if guard:
        out.append(f"regression guard: {guard} (held-out preference agreement; code-checked)")
    return out


def cmd_compare(args: argparse.Namespace, loaded: LoadedSettings, paths: AppPaths) -> int:
    import httpx

    from clawrl_app.engine.publishing.compare import CompareError, parse_prompts
    from clawrl_app.env_cli import _engine

    body: dict[str, Any] = {"a": args.a, "b": args.b, "max_tokens": args.max_tokens}
    try:
        if args.prompts is not None:
            body["prompts"] = parse_prompts(args.prompts.read_text(encoding="utf-8"))
        else:
            body["last"] = args.last
        with _engine(loaded, paths) as ep:
            headers = {"Authorization": f"Bearer {ep.api_key}"} if ep.api_key else {}
            r = httpx.post(f"{ep.base}/admin/compare", json=body, headers=headers, timeout=900)
    except (OSError, CompareError, httpx.HTTPError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if r.status_code != 200:
        print(f"error: {r.json().get('error', {}).get('message', r.text)}", file=sys.stderr)
        return 1
    width = max(20, (shutil.get_terminal_size((120, 40)).columns - 3) // 2)
    color = sys.stdout.isatty() and not args.no_color
    print("\n".join(format_report(r.json(), width, color)))
    return 0
