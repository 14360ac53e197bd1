"""Hypothesis strategies for requests to every route, the sender and the verdicts.

A `Case` is one HTTP request: method, path, headers, body bytes. "Valid-ish" cases look
like what a real client sends (`Content-Type: application/json`, no Origin, a body close
to the OpenAI shape, answers capped at a few tokens so a run stays fast); the others
mutate them (wrong types, missing fields, junk keys, edge numbers, broken JSON, random
paths, methods and headers). Shared by tests/reliability/test_fuzz_routes.py and
bench/chaos.py.

Never generated: a long answer. Any integer a count field could accept (max_tokens,
max_completion_tokens) is either at most MAX_ANSWER or far outside what the app takes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from hypothesis import strategies as st

MAX_ANSWER = 4
SESSIONS = ["fuzz-a", "fuzz-b"]
"""Session ids the valid-ish chats use, so feedback and admin cases can name real ones."""
ROLES = ["system", "developer", "user", "assistant", "tool", "function"]
JSON_TYPES = ["application/json", "application/json; charset=utf-8"]
OTHER_TYPES = [
    "text/plain",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x",
    "application/xml",
    "",
]
METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "PROPFIND"]
ROUTES = [
    ("POST", "/v1/chat/completions"),
    ("POST", "/v1/feedback"),
    ("GET", "/v1/models"),
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("GET", "/admin/status"),
    ("GET", "/admin/sessions"),
    ("GET", "/admin/checkpoints"),
    ("GET", "/admin/metrics"),
    ("GET", "/admin/events"),
    ("POST", "/admin/rollback"),
]


@dataclass(frozen=True)
class Case:
    """One request; `route` names what it aims at, `valid` marks a valid-ish one."""

    route: str
    method: str
    path: str
    headers: tuple[tuple[str, str], ...]
    body: bytes | None
    valid: bool

    def short(self) -> str:
        body = (self.body or b"")[:300].decode(errors="replace")
        return f"{self.method} {self.path} {dict(self.headers)} {body}"


# -- values ------------------------------------------------------------------------------
def _not_a_long_answer(v: Any) -> bool:
    """False for values a token-count field would accept as more than MAX_ANSWER tokens."""
    if isinstance(v, bool):
        return True
    if isinstance(v, int | float):
        return not (MAX_ANSWER < v < 20_000)
    if isinstance(v, str):
        try:
            return _not_a_long_answer(float(v))
        except ValueError:
            return True
    return True


SPECIAL = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>", "</tool_call>",
           "{{ x }}", "{% if %}", "\x00", "\u2028", "\ufeff", "\u202e", "\U0001f600"]  # fmt: skip
texts = st.lists(  # any code point, lone surrogates and chat-template markers included
    st.one_of(st.text(max_size=8), st.characters(categories=["Cs"]), st.sampled_from(SPECIAL)),
    max_size=5,
).map("".join)
edge_ints = st.sampled_from([0, -1, -(2**31), 2**31, 2**63, 2**64 + 1, 10**30, -(10**30)])
ints = st.one_of(st.integers(-(10**6), MAX_ANSWER), edge_ints, st.integers(20_000, 2**80))
floats = st.floats(allow_nan=True, allow_infinity=True).filter(_not_a_long_answer)
scalars = st.one_of(st.none(), st.booleans(), ints, floats, texts.filter(_not_a_long_answer))
junk = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=8,
)


def header_text(max_size: int = 40) -> st.SearchStrategy[str]:
    """Header values h11 lets through: printable latin-1, no surrounding blanks."""
    chars = st.characters(min_codepoint=0x21, max_codepoint=0xFF, exclude_categories=["Cc"])
    return st.text(chars, max_size=max_size)


# -- chat completions ----------------------------------------------------------------------
def rarely(common: st.SearchStrategy[Any], rare: st.SearchStrategy[Any], one_in: int = 12) -> Any:
    """`common`, and `rare` about once in `one_in` draws."""
    return st.integers(1, one_in).flatmap(lambda k: rare if k == 1 else common)


content_part = st.one_of(
    st.fixed_dictionaries(
        {"type": st.sampled_from(["text", "input_text", "image_url", "input_audio", "file"])},
        optional={"text": rarely(texts, junk), "image_url": junk},
    ),
    rarely(texts, junk, 4),
    st.fixed_dictionaries({"type": rarely(texts, st.none(), 3)}, optional={"text": junk}),
)
BIG = st.sampled_from([12_000, 40_000]).map(lambda n: "word " * n)  # over the context
content = st.one_of(
    texts, texts, texts, st.lists(content_part, max_size=3), rarely(st.none(), BIG, 3)
)
tool_call = st.fixed_dictionaries(
    {
        "id": texts,
        "type": st.just("function"),
        "function": st.fixed_dictionaries(
            {"name": texts, "arguments": st.one_of(texts, junk, st.just('{"a": 1}'))}
        ),
    }
)


@st.composite
def message(draw: Any) -> dict[str, Any]:
    role = draw(rarely(st.sampled_from(ROLES), texts, 20))
    msg: dict[str, Any] = {"role": role, "content": draw(rarely(content, junk))}
    if role == "assistant" and draw(st.booleans()):
        msg["tool_calls"] = draw(rarely(st.lists(tool_call, max_size=2), junk, 5))
    if role == "tool" and draw(st.booleans()):
        msg["tool_call_id"] = draw(rarely(texts, junk, 5))
    if draw(st.integers(0, 4)) == 0:
        msg["name"] = draw(rarely(texts, junk, 5))
    return msg


tool = st.fixed_dictionaries(
    {
        "type": st.just("function"),
        "function": st.fixed_dictionaries(
            {"name": st.text(min_size=1, max_size=20)},
            optional={"description": texts, "parameters": st.one_of(junk, st.just({}))},
        ),
    }
)
tool_choice = st.one_of(
    st.sampled_from(["auto", "none", "required"]),
    st.fixed_dictionaries(
        {"type": st.just("function"), "function": st.fixed_dictionaries({"name": texts})}
    ),
)


@st.composite
def chat_body(draw: Any) -> dict[str, Any]:
    """A body a real client could send: every optional field sometimes, small answers."""
    body: dict[str, Any] = {
        "model": draw(st.sampled_from(["clawrl", "clawrl", "clawrl-base"])),
        "messages": draw(st.lists(message(), min_size=1, max_size=4)),
        draw(st.sampled_from(["max_tokens", "max_completion_tokens"])): draw(
            st.integers(1, MAX_ANSWER)
        ),
    }
    optional = {
        "stream": st.booleans(),
        "stream_options": st.fixed_dictionaries({"include_usage": st.booleans()}),
        "temperature": st.one_of(st.floats(0, 2), st.sampled_from([0, 1e-9, 2])),
        "top_p": st.one_of(st.floats(1e-6, 1), st.sampled_from([1e-12, 1])),
        "stop": st.one_of(texts, st.lists(texts, max_size=4)),
        "seed": st.one_of(st.integers(-(2**63), 2**64 - 1), st.just(0)),
        "logprobs": st.booleans(),
        "top_logprobs": st.integers(0, 20),
        "tools": st.lists(tool, max_size=2),
        "tool_choice": tool_choice,
        "n": st.just(1),
        "user": texts,
        "session_id": st.sampled_from(SESSIONS),
        "turn_type": st.sampled_from(["main", "side"]),
        "session_done": st.booleans(),
    }
    for key in draw(st.lists(st.sampled_from(sorted(optional)), max_size=6, unique=True)):
        body[key] = draw(optional[key])
    return body


COUNT_FIELDS = ("max_tokens", "max_completion_tokens")


@st.composite
def mutated(draw: Any, body: dict[str, Any]) -> Any:
    """Break a body: drop keys, give fields junk (count fields: junk or edge numbers)."""
    body = dict(body)
    for _ in range(draw(st.integers(1, 3))):
        action = draw(st.sampled_from(["drop", "junk", "junk", "extra"]))
        keys = sorted(body)
        if action == "drop" and keys:
            body.pop(draw(st.sampled_from(keys)))
        elif action == "junk" and keys:
            key = draw(st.sampled_from([*keys, *COUNT_FIELDS]))
            body[key] = draw(st.one_of(edge_ints, junk) if key in COUNT_FIELDS else junk)
        else:
            body[draw(texts)] = draw(junk)
    return body


@st.composite
def raw_body(draw: Any) -> bytes:
    """Bytes that are not the JSON object a route wants."""
    kind = draw(st.sampled_from(["binary", "text", "deep", "numbers", "empty", "json"]))
    if kind == "binary":
        return bytes(draw(st.binary(max_size=200)))
    if kind == "text":
        return str(draw(texts)).encode("utf-8", "surrogatepass")
    if kind == "deep":  # nesting deeper than any parser's recursion limit
        depth = draw(st.sampled_from([1_000, 100_000]))
        return b'{"messages": ' + b"[" * depth + b"]" * depth + b"}"
    if kind == "numbers":
        return draw(st.sampled_from([b"1e999", b"-0", b"NaN", b"Infinity", b"9" * 5000]))
    if kind == "empty":
        return b""
    return json.dumps(draw(junk)).encode()


def url_part(text: Any, safe: str = "") -> str:
    """Percent-encoded; a lone surrogate becomes bytes that are not UTF-8 (as a raw client's)."""
    return quote(str(text), safe=safe, errors="surrogatepass")


# -- the other routes ----------------------------------------------------------------------
def feedback_body() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {"session_id": rarely(st.sampled_from(SESSIONS), st.one_of(texts, junk), 4)},
        optional={
            "turn": st.one_of(st.integers(-3, 3), ints, junk),
            "turn_id": st.one_of(st.integers(1, 20), ints, junk),
            "rating": st.one_of(st.sampled_from([1, -1]), junk),
            "hint": st.one_of(texts, junk),
        },
    )


rollback_body = st.fixed_dictionaries(
    {},
    optional={
        "version": st.one_of(st.sampled_from(["base", "v1"]), texts, junk),
        "before_session": st.one_of(st.sampled_from(SESSIONS), texts, junk),
    },
)


@st.composite
def admin_request(draw: Any) -> tuple[str, str, Any]:
    """(method, path with query, JSON body or None) for one admin route."""
    sid = url_part(draw(st.one_of(st.sampled_from(SESSIONS), texts)))
    q = url_part(draw(st.one_of(texts, st.sampled_from(["pending", "approved", "excluded"]))))
    since = url_part(draw(st.one_of(st.integers(-5, 5), ints, texts)))
    return draw(
        st.sampled_from(
            [
                ("GET", "/admin/status", None),
                ("GET", f"/admin/sessions?review_state={q}", None),
                ("GET", f"/admin/sessions/{sid}", None),
                ("POST", f"/admin/sessions/{sid}/review", {"state": q}),
                ("GET", "/admin/checkpoints", None),
                ("GET", f"/admin/metrics?names={q}", None),
                ("GET", f"/admin/events?since={since}", None),
                ("POST", "/admin/rollback", draw(rollback_body)),
            ]
        )
    )


@st.composite
def headers(draw: Any, valid: bool) -> tuple[tuple[str, str], ...]:
    out: list[tuple[str, str]] = []
    if valid:
        out.append(("Content-Type", draw(st.sampled_from(JSON_TYPES))))
    else:
        ctype = st.one_of(st.sampled_from(JSON_TYPES + OTHER_TYPES), header_text())
        if draw(st.booleans()):
            out.append(("Content-Type", draw(ctype)))
        if draw(st.integers(0, 5)) == 0:
            origin = st.sampled_from(["http://evil.example", "null", "http://localhost:1"])
            out.append(("Origin", draw(origin)))
        if draw(st.integers(0, 9)) == 0:
            out.append(("Host", draw(st.sampled_from(["evil.example", "localhost:1", "[::1]"]))))
    extra = {
        "X-Session-Id": st.one_of(st.sampled_from(SESSIONS), header_text(200)),
        "X-Turn-Type": st.one_of(st.sampled_from(["main", "side", "MAIN"]), header_text(10)),
        "X-Session-Done": st.one_of(st.sampled_from(["1", "true", "no"]), header_text(10)),
        "User-Agent": st.sampled_from(["openclaw/1.0", "python-httpx", "x"]),
        "Authorization": st.sampled_from(["Bearer local", "Bearer", "Basic eA=="]),
    }
    for name in draw(st.lists(st.sampled_from(sorted(extra)), max_size=3, unique=True)):
        out.append((name, draw(extra[name])))
    return tuple(out)


def _dump(body: Any) -> bytes:
    # lone surrogates (valid JSON escapes) stay escaped, as a JSON library would send them
    return json.dumps(body).encode()


@st.composite
def cases(draw: Any) -> Case:
    """One request to some route; about half of them valid-ish."""
    route = draw(
        st.sampled_from(["chat"] * 6 + ["feedback"] * 2 + ["admin"] * 2 + ["get", "random"])
    )
    valid = draw(st.booleans())
    body: bytes | None = None
    if route == "chat":
        method, path = "POST", "/v1/chat/completions"
        doc = draw(chat_body())
        if not valid:
            choice = draw(st.integers(0, 3))
            body = draw(raw_body()) if choice == 0 else _dump(draw(mutated(doc)))
        else:
            body = _dump(doc)
    elif route == "feedback":
        method, path = "POST", "/v1/feedback"
        body = _dump(draw(feedback_body())) if valid else draw(raw_body())
    elif route == "admin":
        method, path, doc = draw(admin_request())
        body = None if doc is None else (_dump(doc) if valid else draw(raw_body()))
    elif route == "get":
        method, path = "GET", draw(st.sampled_from(["/v1/models", "/healthz", "/readyz"]))
    else:  # a random method on a known route, or a random path
        method, path = draw(st.sampled_from(ROUTES))
        method = draw(st.one_of(st.just(method), st.sampled_from(METHODS)))
        if draw(st.booleans()):
            path = "/" + url_part(draw(texts), safe="/?=&%")
        body = draw(st.one_of(st.none(), raw_body()))
        valid = False
    return Case(route, method, path, draw(headers(valid)), body, valid)
