"""Task checks on the live page after an episode, OSWorld style: a getter reads a value
from the page, a metric compares it with the task's expected value, and the checks of a
task are combined by `and` (the mean: 1 only when all pass) or `or` (the best one).

    {"conj": "and", "checks": [
        {"getter": "dom_text", "selector": "#status", "metric": "equals", "expected": "Saved"},
        {"getter": "local_storage", "key": "users", "metric": "json_contains",
         "expected": {"plan": "pro"}}]}

Getters: dom_text, dom_texts, dom_value, dom_count, dom_exists (`selector`), url, title,
local_storage (`key`), js (`expr`: only from trusted, shipped task files; never from the
model). Metrics: equals, contains, regex, json_contains, number_close (`tolerance`),
list_equal.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

# Our own page reads (trusted code); a selector is data passed in as an argument.
_DOM_JS = {
    "dom_text": "s => { const e = document.querySelector(s); return e ? e.innerText.trim() : null; }",
    "dom_texts": "s => Array.from(document.querySelectorAll(s)).map(e => e.innerText.trim())",
    "dom_value": (
        "s => { const e = document.querySelector(s); if (!e) return null;"
        " if (e.type === 'checkbox' || e.type === 'radio') return e.checked;"
        " return 'value' in e ? e.value : e.innerText.trim(); }"
    ),
    "dom_count": "s => document.querySelectorAll(s).length",
    "dom_exists": "s => document.querySelector(s) !== null",
}
_STORAGE_JS = "k => window.localStorage.getItem(k)"
_URL_JS = "() => location.pathname + location.search + location.hash"


def get_value(page: Any, check: dict[str, Any]) -> Any:
    """The value a check's getter reads from `page` (a Playwright sync Page)."""
    getter = check["getter"]
    if getter in _DOM_JS:
        return page.evaluate(_DOM_JS[getter], str(check["selector"]))
    if getter == "url":
        return page.evaluate(_URL_JS)
    if getter == "title":
        return page.title()
    if getter == "local_storage":
        raw = page.evaluate(_STORAGE_JS, str(check["key"]))
        try:
            return json.loads(raw) if raw is not None else None
        except ValueError:
            return raw
    if getter == "js":
        return page.evaluate(str(check["expr"]))  # trusted: shipped task files only
    raise ValueError(f"unknown getter {getter!r}")


def json_contains(actual: Any, expected: Any) -> bool:
    """Whether `expected` is inside `actual`: a dict's keys match recursively, a list
    holds every expected item, or (a list against a dict) one element contains it."""
    if isinstance(expected, dict):
        if isinstance(actual, list):
            return any(json_contains(a, expected) for a in actual)
        return isinstance(actual, dict) and all(
            k in actual and json_contains(actual[k], v) for k, v in expected.items()
        )
    if isinstance(expected, list):
        return isinstance(actual, list) and all(
            any(json_contains(a, e) for a in actual) for e in expected
        )
    return bool(actual == expected)


def _number_close(actual: Any, expected: Any, check: dict[str, Any]) -> bool:
    try:
        a = float(str(actual).replace(",", "").replace("$", "").strip())
        return abs(a - float(expected)) <= float(check.get("tolerance", 1e-6))
    except (TypeError, ValueError):
        return False


def _contains(actual: Any, expected: Any) -> bool:
    if isinstance(actual, list):
        return expected in actual
    return actual is not None and str(expected) in str(actual)


METRICS: dict[str, Callable[[Any, Any, dict[str, Any]], bool]] = {
    "equals": lambda a, e, c: a == e,
    "contains": lambda a, e, c: _contains(a, e),
    "regex": lambda a, e, c: a is not None and re.search(str(e), str(a)) is not None,
    "json_contains": lambda a, e, c: json_contains(a, e),
    "number_close": _number_close,
    "list_equal": lambda a, e, c: isinstance(a, list) and list(a) == list(e),
}
GETTERS = frozenset(["url", "title", "local_storage", "js", *_DOM_JS])


def validate_spec(spec: Any) -> None:
    """ValueError naming what is wrong with an evaluator spec (checked at task load)."""
    if not isinstance(spec, dict) or spec.get("conj", "and") not in ("and", "or"):
        raise ValueError("evaluator must be {conj: and|or, checks: [...]}")
    checks = spec.get("checks")
    if not isinstance(checks, list) or not checks:
        raise ValueError("evaluator needs at least one check")
    for c in checks:
        if c.get("getter") not in GETTERS:
            raise ValueError(f"unknown getter {c.get('getter')!r}")
        if c.get("metric") not in METRICS:
            raise ValueError(f"unknown metric {c.get('metric')!r}")
        need = {"local_storage": "key", "js": "expr"}.get(c["getter"])
        if c["getter"] in _DOM_JS:
            need = "selector"
        if need and need not in c:
            raise ValueError(f"getter {c['getter']} needs `{need}`")
        if "expected" not in c:
            raise ValueError("a check needs `expected`")


def evaluate_spec(page: Any, spec: dict[str, Any]) -> tuple[float, list[dict[str, Any]]]:
    """The score in [0, 1] of `spec` on `page`, and one detail per check (getter, value
    read, expected, passed). A getter that fails (bad selector) fails its check."""
    details: list[dict[str, Any]] = []
    for check in spec["checks"]:
        detail: dict[str, Any] = {"getter": check["getter"], "metric": check["metric"],
                                  "expected": check["expected"]}  # fmt: skip
        try:
            value = get_value(page, check)
            detail["value"] = value
            detail["passed"] = bool(METRICS[check["metric"]](value, check["expected"], check))
        except Exception as exc:  # the page's state, not an infra failure
            detail["error"], detail["passed"] = f"{type(exc).__name__}: {exc}"[:300], False
        details.append(detail)
    passed = [1.0 if d["passed"] else 0.0 for d in details]
    score = max(passed) if spec.get("conj", "and") == "or" else sum(passed) / len(passed)
    return score, details
