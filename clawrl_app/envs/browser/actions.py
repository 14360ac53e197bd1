"""The browser env's closed action vocabulary (ENVS.md §5.7 D) as OpenAI tools, and the
code that performs one action on a Playwright page.

Nothing the model writes is ever run as code: it names an element by a snapshot ref
(`e7`), a point on a 0-999 grid, a key from a fixed set, or a site-relative path. A bad
argument or an unknown ref is the policy's fault (`ActionError`, shown to it as an error
observation); a browser that went away is not (`BrowserCrashed`, the episode aborts).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from clawrl_app.envs.base import ToolSpec
from clawrl_app.envs.browser.snapshot import REF_ATTR

ACTION_TIMEOUT_MS = 2000
NAV_TIMEOUT_MS = 5000
MAX_TYPE_CHARS = 2000
MAX_KEYS = 10
MAX_WAIT_S = 3.0
GRID = 1000  # click x, y are on a 0..999 grid over the viewport (upstream's computer_use)
REF_RE = re.compile(r"e[1-9][0-9]{0,5}")
_KEY_NAMES = (
    "Enter|Tab|Escape|Backspace|Delete|Space|ArrowUp|ArrowDown|ArrowLeft|ArrowRight|"
    "Home|End|PageUp|PageDown|Insert|F[1-9]|F1[0-2]"
)
KEY_RE = re.compile(rf"(?:(?:Control|Shift|Alt|Meta)\+){{0,3}}(?:{_KEY_NAMES}|[ -~])")
SCHEME_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:")

_ref = {"type": "string", "description": "an element ref from the latest snapshot, e.g. e7"}
TOOLS = [
    ToolSpec("click", "Click an element by its ref (or a point: x, y on a 0-999 grid).",
             {"type": "object", "properties": {"ref": _ref, "x": {"type": "integer"},
                                               "y": {"type": "integer"}}, "required": []}),
    ToolSpec("type", "Replace the text of a text box; submit=true presses Enter after.",
             {"type": "object", "properties": {"ref": _ref, "text": {"type": "string"},
                                               "submit": {"type": "boolean"}},
              "required": ["ref", "text"]}),
    ToolSpec("select", "Choose an option of a drop-down (combobox) by its label or value.",
             {"type": "object", "properties": {"ref": _ref, "value": {"type": "string"}},
              "required": ["ref", "value"]}),
    ToolSpec("check", "Set a checkbox, switch or radio button on (true) or off (false).",
             {"type": "object", "properties": {"ref": _ref, "on": {"type": "boolean"}},
              "required": ["ref", "on"]}),
    ToolSpec("press", "Press keys in order, e.g. [\"Tab\", \"Enter\", \"Control+a\"].",
             {"type": "object", "properties": {"keys": {"type": "array",
                                                        "items": {"type": "string"}}},
              "required": ["keys"]}),
    ToolSpec("scroll", "Scroll the page by dy pixels (negative: up).",
             {"type": "object", "properties": {"dy": {"type": "integer"}}, "required": ["dy"]}),
    ToolSpec("goto", "Open a page of this site by its path, e.g. /index.html.",
             {"type": "object", "properties": {"path": {"type": "string"}},
              "required": ["path"]}),
    ToolSpec("back", "Go back to the previous page.",
             {"type": "object", "properties": {}, "required": []}),
    ToolSpec("wait", "Wait up to 3 seconds for the page to change.",
             {"type": "object", "properties": {"seconds": {"type": "number"}},
              "required": ["seconds"]}),
    ToolSpec("terminate", "End the task: success if it is done, failure if it cannot be done.",
             {"type": "object", "properties": {"status": {"type": "string",
                                                          "enum": ["success", "failure"]}},
              "required": ["status"]}),
]  # fmt: skip
TOOL_NAMES = frozenset(t.name for t in TOOLS)


class ActionError(Exception):
    """The policy's mistake (bad argument, unknown ref, element not actionable)."""


class BrowserCrashed(Exception):
    """The browser or the page went away: an infrastructure failure."""


def site_url(origin: str, path: Any) -> str:
    """The absolute URL of a site-relative `path`; ActionError for anything else (a scheme
    such as file:, chrome:, javascript:, data:, http:, a `//host`, backslashes)."""
    if not isinstance(path, str) or not path.strip():
        raise ActionError("goto needs a site path such as /index.html")
    p = path.strip()
    if any(ord(c) < 32 for c in p) or "\\" in p or p.startswith("//") or SCHEME_RE.match(p):
        raise ActionError(
            f"goto only opens pages of this site (a path like /index.html), not {p!r}"
        )
    url = origin + "/" + p.lstrip("/")
    parts, own = urlsplit(url), urlsplit(origin)
    if (parts.scheme, parts.netloc) != (own.scheme, own.netloc):
        raise ActionError(f"goto only opens pages of this site, not {p!r}")
    return url


def _ref_locator(page: Any, ref: Any) -> Any:
    if not isinstance(ref, str) or not REF_RE.fullmatch(ref):
        raise ActionError(f"{ref!r} is not a ref; use one from the snapshot, like e7")
    loc = page.locator(f'[{REF_ATTR}="{ref}"]')
    if loc.count() == 0:
        raise ActionError(f"no element [{ref}] on this page; use a ref from the latest snapshot")
    return loc.first


def _click(page: Any, args: dict[str, Any]) -> str:
    if args.get("ref") is not None:
        _ref_locator(page, args["ref"]).click(timeout=ACTION_TIMEOUT_MS)
        return f"clicked [{args['ref']}]"
    x, y = args.get("x"), args.get("y")
    if not (isinstance(x, int) and isinstance(y, int) and 0 <= x < GRID and 0 <= y < GRID):
        raise ActionError("click needs a ref, or x and y integers on the 0-999 grid")
    size = page.viewport_size or {"width": 1280, "height": 800}
    page.mouse.click(x * size["width"] / GRID, y * size["height"] / GRID)
    return f"clicked at ({x}, {y})"


def _type(page: Any, args: dict[str, Any]) -> str:
    text = args.get("text")
    if not isinstance(text, str) or len(text) > MAX_TYPE_CHARS:
        raise ActionError(f"type needs a text of at most {MAX_TYPE_CHARS} characters")
    loc = _ref_locator(page, args.get("ref"))
    loc.fill(text, timeout=ACTION_TIMEOUT_MS)
    if args.get("submit"):
        loc.press("Enter", timeout=ACTION_TIMEOUT_MS)
    return f"typed into [{args['ref']}]" + (" and pressed Enter" if args.get("submit") else "")


# Our own read of the options (trusted code): the model's value is only compared with them.
_OPTIONS_JS = (
    "e => e.tagName === 'SELECT' ? Array.from(e.options).map(o => [o.value, o.label]) : null"
)


def _select(page: Any, args: dict[str, Any]) -> str:
    value = args.get("value")
    if not isinstance(value, str):
        raise ActionError("select needs a value (an option's label or value)")
    loc = _ref_locator(page, args.get("ref"))
    options = loc.evaluate(_OPTIONS_JS)
    if options is None:
        raise ActionError(f"[{args['ref']}] is not a drop-down; use click or type")
    wanted = value.strip().casefold()
    match = next((v for v, lab in options if value in (v, lab)), None) or next(
        (v for v, lab in options if wanted in (v.casefold(), lab.strip().casefold())), None
    )
    if match is None:
        labels = ", ".join(repr(lab) for _, lab in options)
        raise ActionError(f"[{args['ref']}] has no option {value!r}; its options: {labels}")
    loc.select_option(value=match, timeout=ACTION_TIMEOUT_MS)
    return f"selected {value!r} in [{args['ref']}]"


# [checked, kind] of a checkbox, radio or aria-checked element; null for anything else.
_CHECKED_JS = (
    "e => (e.type === 'checkbox' || e.type === 'radio') ? [e.checked, e.type]"
    " : e.hasAttribute('aria-checked') ? [e.getAttribute('aria-checked') === 'true', 'aria']"
    " : null"
)


def _check(page: Any, args: dict[str, Any]) -> str:
    on, ref = args.get("on"), args.get("ref")
    if not isinstance(on, bool):
        raise ActionError("check needs on: true or false")
    loc = _ref_locator(page, ref)
    state = loc.evaluate(_CHECKED_JS)
    if state is None:
        raise ActionError(f"[{ref}] is not a checkbox, switch or radio button")
    if state[0] == on:
        return f"[{ref}] was already {'on' if on else 'off'}"
    if not on and state[1] == "radio":
        raise ActionError("a radio button is turned off by choosing another one")
    # A click, as a user would; not set_checked, which re-reads the element afterwards and
    # fails when the page re-renders it (a todo list does).
    loc.click(timeout=ACTION_TIMEOUT_MS)
    return f"set [{ref}] {'on' if on else 'off'}"


def _press(page: Any, args: dict[str, Any]) -> str:
    keys = args.get("keys")
    if isinstance(keys, str):
        keys = [keys]
    if not isinstance(keys, list) or not 0 < len(keys) <= MAX_KEYS:
        raise ActionError(f"press needs a list of 1 to {MAX_KEYS} keys")
    for k in keys:
        if not isinstance(k, str) or not KEY_RE.fullmatch(k):
            raise ActionError(f"unknown key {k!r}; e.g. Enter, Tab, Escape, ArrowDown, Control+a")
    for k in keys:
        page.keyboard.press(" " if k == "Space" else k)
    return "pressed " + " ".join(keys)


def _scroll(page: Any, args: dict[str, Any]) -> str:
    dy = args.get("dy")
    if not isinstance(dy, int) or isinstance(dy, bool) or abs(dy) > 10_000:
        raise ActionError("scroll needs an integer dy between -10000 and 10000")
    page.mouse.wheel(0, dy)
    return f"scrolled by {dy}"


def _goto(page: Any, args: dict[str, Any], origin: str) -> str:
    url = site_url(origin, args.get("path"))
    response = page.goto(url, wait_until="load", timeout=NAV_TIMEOUT_MS)
    if response is not None and response.status >= 400:
        raise ActionError(f"HTTP {response.status}: no page {args['path']!r} on this site")
    return f"opened {urlsplit(url).path}"


def _back(page: Any, args: dict[str, Any]) -> str:
    if page.go_back(wait_until="load", timeout=NAV_TIMEOUT_MS) is None:
        raise ActionError("there is no previous page")
    return "went back"


def _wait(page: Any, args: dict[str, Any]) -> str:
    s = args.get("seconds")
    if isinstance(s, bool) or not isinstance(s, (int, float)) or not 0 <= s <= MAX_WAIT_S:
        raise ActionError(f"wait takes 0 to {MAX_WAIT_S:g} seconds")
    page.wait_for_timeout(float(s) * 1000)
    return f"waited {s:g} s"


_ACTIONS = {"click": _click, "type": _type, "select": _select, "check": _check,
            "press": _press, "scroll": _scroll, "back": _back, "wait": _wait}  # fmt: skip


def perform(page: Any, tool: str, args: dict[str, Any], origin: str) -> str:
    """Run one action (not `terminate`) on `page`; a one-line summary of what was done.
    ActionError for the policy's mistakes, BrowserCrashed when the browser went away."""
    from playwright.sync_api import Error as PlaywrightError

    try:
        if tool == "goto":
            return _goto(page, args, origin)
        fn = _ACTIONS.get(tool)
        if fn is None:
            raise ActionError(
                f"unknown tool {tool!r}; the tools are: {', '.join(sorted(TOOL_NAMES))}"
            )
        return fn(page, args)
    except PlaywrightError as exc:
        if browser_gone(page):
            raise BrowserCrashed(f"the browser went away: {_first_line(exc)}") from exc
        raise ActionError(f"{tool} failed: {_first_line(exc)}") from exc


def browser_gone(page: Any) -> bool:
    """Whether `page`'s browser is gone (closed page, lost connection), as opposed to a
    failed action on a live page."""
    try:
        browser = page.context.browser
        return bool(page.is_closed() or browser is None or not browser.is_connected())
    except Exception:
        return True


def _first_line(exc: BaseException) -> str:
    """Playwright's messages carry a call log after the first line; the model needs one."""
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]
