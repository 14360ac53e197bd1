"""`clawrl-app judge-eval`: score labelled next states (the shipped set or a file) with
each judge backend and print agreement, sign errors and the confusion matrix."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from clawrl_app.config import LoadedSettings
from clawrl_app.paths import AppPaths


def add_judge_eval_parser(sub: Any) -> None:
    p = sub.add_parser(
        "judge-eval",
        help="measure each judge backend against labelled next states",
        description="Score labelled next states with each judge and print agreement, sign "
        "errors (+1 judged -1 or -1 judged +1) and the confusion matrix (rows: label, columns: "
        "judge score). The file format is in docs/judge-eval.md.",
    )
    p.add_argument(
        "--backend",
        choices=["heuristic", "policy", "openai", "all"],
        default="all",
        help="which judge to evaluate (default: all: heuristic, policy, and openai when set)",
    )
    p.add_argument(
        "--file",
        metavar="PATH",
        help="a labelled JSONL file in the shipped format (default: the shipped set)",
    )
    p.add_argument(
        "--limit", type=int, default=0, help="only N items, balanced over the labels (0 = all)"
    )
    p.add_argument(
        "--model", dest="model.path", metavar="SPEC", help="policy model for --backend policy"
    )


def cmd_judge_eval(args: argparse.Namespace, loaded: LoadedSettings, paths: AppPaths) -> int:
    import asyncio
    from pathlib import Path

    from clawrl_app.engine.judging.judge import HeuristicJudge, Judge, LLMJudge, openai_generator
    from clawrl_app.judge_eval import (
        LabelledFileError,
        balanced_subset,
        format_report,
        load_items,
        stderr_progress,
    )

    try:
        items = load_items(Path(args.file) if args.file else None)
    except (LabelledFileError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if not items:
        print(f"error: {args.file}: no labelled items", file=sys.stderr)
        return 1
    if args.limit:
        items = balanced_subset(items, args.limit)
    s = loaded.settings.judge
    kinds = ["heuristic", "policy"] if args.backend == "all" else [args.backend]
    if args.backend == "all" and s.openai_url and s.openai_model:
        kinds.append("openai")
    print(
        f"{len(items)} labelled next states{f' from {args.file}' if args.file else ''} "
        f"({sum(1 for i in items if i['label'] == 1)} positive, "
        f"{sum(1 for i in items if i['label'] == 0)} neutral, "
        f"{sum(1 for i in items if i['label'] == -1)} negative)"
    )
    for kind in kinds:
        judge: Judge
        backend = None
        if kind == "heuristic":
            judge = HeuristicJudge()
        elif kind == "openai":
            if not s.openai_url or not s.openai_model:
                print(
                    "error: set judge.openai_url and judge.openai_model for the openai judge.",
                    file=sys.stderr,
                )
                return 2
            judge = LLMJudge(
                "openai", openai_generator(s.openai_url, s.openai_model, s.openai_api_key), s
            )
        else:
            judge, backend = _local_policy_judge(loaded, paths)
        report = asyncio.run(_eval_with(judge, backend, items, stderr_progress))
        print(format_report(report))
    return 0


def _local_policy_judge(loaded: LoadedSettings, paths: AppPaths) -> tuple[Any, Any]:
    """The policy judge on an in-process torch backend (the base weights)."""
    from clawrl_app.engine.backends.pytorch.backend import TorchBackend
    from clawrl_app.engine.chat.formatter import ChatFormatter
    from clawrl_app.engine.judging.judge import LLMJudge, policy_generator
    from clawrl_app.models import load_model, resolve_model

    m = resolve_model(loaded.settings.model.path, paths)
    model, tok = load_model(m)
    backend = TorchBackend(model, tok, model_name=m.name, context_length=m.context_length)
    fmt = ChatFormatter(tok)
    return LLMJudge("policy", policy_generator(backend, fmt), loaded.settings.judge), backend


async def _eval_with(judge: Any, backend: Any, items: list[Any], progress: Any) -> Any:
    from clawrl_app.judge_eval import evaluate

    if backend is not None:
        await backend.start()
    try:
        return await evaluate(judge, items, progress)
    finally:
        if backend is not None:
            await backend.stop()
