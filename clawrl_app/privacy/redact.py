"""Redaction of secrets and personal data before anything is stored, judged or trained on.

A pure module: `Redactor(extra_patterns).redact(text)` returns the text with each finding
replaced by a marker such as `[REDACTED:email]`, plus how many of each kind it replaced;
`redact_value` walks JSON-shaped data (a request's messages, an answer's tool calls).

Kinds, applied in this order (a later rule never sees what an earlier one replaced, and a
marker contains nothing a rule matches):

- `custom`: the user's `privacy.redact_patterns` (first, so the user's intent wins)
- `private_key`: PEM private-key blocks
- `url_password`: the password of `scheme://user:pass@host` (the user name stays)
- `jwt`: JSON Web Tokens (`eyJ...`.`eyJ...`.`...`)
- `openai_key` (`sk-...`), `github_token` (`ghp_`, `gho_`, ..., `github_pat_`),
  `aws_key` (`AKIA...`/`ASIA...`), `slack_token` (`xoxb-`, `xoxp-`, ...)
- `bearer_token`: the token after `Bearer ` (the word stays)
- `secret`: the value after a name ending in key/token/secret/password/... and `=` or `:`
  (`api_key=...`, `"password": "..."`, `OPENAI_API_KEY: ...`); for key/token/secret only
  long hex/base64-like values (16+ characters with letters and digits), for passwords any
  value of 4+ characters that is not a call (`get_password()`)
- `email`: e-mail addresses (not `git@host`)
- `card`: payment card numbers (13-19 digits, optionally in groups) that pass the Luhn
  check, so order and tracking numbers stay; never digits inside a word (ids, hashes)
- `phone`: `+` followed by 8-15 digits (separators allowed), or 10-11 digits written in
  2+ groups (`(555) 123-4567`, `030 1234 5678`); never dates, times, versions, IPs or prices

Meant to catch what people and agents paste by accident, not to be a complete DLP tool:
the README says so, and `privacy.redact_patterns` adds what it misses.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

MARKER = "[REDACTED:{kind}]"
NOT_TRAINABLE_REASON = "redacted: token ids dropped for privacy (not trainable)"
"""Why the sample of a turn that had something redacted is skipped: its stored token ids
were dropped (they decode to the original text) and re-tokenizing the redacted text would
not match the behaviour log-probs the model actually sampled with."""
Replacer = Callable[["re.Match[str]"], "str | None"]
"""Returns the replacement for a match, or None to keep the match as it is."""


def marker(kind: str) -> str:
    """The text that replaces a finding of `kind`."""
    return MARKER.format(kind=kind)


def luhn_ok(digits: str) -> bool:
    """True when the digit string passes the Luhn checksum (every payment card does)."""
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2 == 1:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


@dataclass(frozen=True)
class Redacted:
    """Text after redaction and how many findings of each kind were replaced."""

    text: str
    counts: Mapping[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        """All findings together."""
        return sum(self.counts.values())


@dataclass(frozen=True)
class _Rule:
    kind: str
    pattern: re.Pattern[str]
    replace: Replacer


def _whole(kind: str) -> Replacer:
    return lambda m: marker(kind)


def _group(kind: str, group: str) -> Replacer:
    """Replace only the named group (keep `Bearer `, `api_key=`, `user:` around it)."""

    def replace(m: re.Match[str]) -> str:
        start, end = m.span(group)
        text = m.group(0)
        base = m.start(0)
        return text[: start - base] + marker(kind) + text[end - base :]

    return replace


def _secret(m: re.Match[str]) -> str | None:
    name, value = m.group("name").lower(), m.group("value")
    randomish = len(value) >= 16 and re.search(r"\d", value) and re.search(r"[A-Za-z]", value)
    if not re.search(r"pass|pwd", name) and not randomish:  # key/token/secret: long values only
        return None
    return _group("secret", "value")(m)


def _card(m: re.Match[str]) -> str | None:
    digits = re.sub(r"\D", "", m.group(0))
    return marker("card") if 13 <= len(digits) <= 19 and luhn_ok(digits) else None


_IPV4 = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}")
_DATE = re.compile(r"\d{4}[-/.]\d{1,2}[-/.]\d{1,2}|\d{1,2}[-/.]\d{1,2}[-/.]\d{4}")


def _phone(m: re.Match[str]) -> str | None:
    text = m.group(0)
    digits = re.sub(r"\D", "", text)
    ok = 8 <= len(digits) <= 15 if text.startswith("+") else 10 <= len(digits) <= 11
    if not ok or _IPV4.fullmatch(text) or _DATE.match(text):
        return None
    return marker("phone")


_SECRET_NAME = r"[A-Za-z0-9_.-]*(?:key|token|secret|password|passwd|pwd|credentials?)"
_BUILTIN: tuple[tuple[str, str, Replacer], ...] = (
    (
        "private_key",
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----[\s\S]*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----",
        _whole("private_key"),
    ),
    (
        "url_password",
        r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@]+:(?P<pw>[^\s/@]+)@",
        _group("url_password", "pw"),
    ),
    (
        "jwt",
        r"\beyJ[A-Za-z0-9_-]{6,}\.eyJ[A-Za-z0-9_-]{6,}\.[A-Za-z0-9_-]{6,}",
        _whole("jwt"),
    ),
    ("openai_key", r"\bsk-(?:[A-Za-z0-9]+-)*[A-Za-z0-9_-]{20,}", _whole("openai_key")),
    (
        "github_token",
        r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,})",
        _whole("github_token"),
    ),
    ("aws_key", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b", _whole("aws_key")),
    ("slack_token", r"\bxox[abposr]-[A-Za-z0-9-]{10,}", _whole("slack_token")),
    (
        "bearer_token",
        r"\b[Bb]earer\s+(?P<token>[A-Za-z0-9._~+/-]{16,}=*)",
        _group("bearer_token", "token"),
    ),
    (
        "secret",
        rf"(?i)(?<![A-Za-z0-9])(?P<name>{_SECRET_NAME})\b[\"']?\s*[:=]\s*[\"']?"
        r"(?P<value>[^\s\"'`,;()\[\]{}<>]{4,})(?![\w(\[])",
        _secret,
    ),
    (
        "email",
        r"(?<![\w.+-])(?!git@)[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b",
        _whole("email"),
    ),
    # standing alone, like a phone number: a digit run inside a word (the hex of an id or a
    # hash, `call_aa54f2971155451388ca8931`) is no card, even when it passes the Luhn check
    ("card", r"(?<![\w.,-])\d(?:[ -]?\d){12,18}(?!\w|[.,-]\d)", _card),
    (
        "phone",
        r"(?<![\w.+/:-])(?:\+\d{1,3}[ .-]?(?:\(\d{1,4}\)[ .-]?)?\d{2,4}(?:[ .-]?\d{2,4}){1,4}"
        r"|(?:\(\d{2,4}\)[ .-]?|\d{2,4}[ .-])\d{2,4}(?:[ .-]\d{2,4}){1,3})(?![\w:/]|[.,-]\d)",
        _phone,
    ),
)
KINDS: tuple[str, ...] = ("custom", *(kind for kind, _, _ in _BUILTIN))
"""Every kind a redaction can have, in the order the rules run."""


class InvalidPattern(ValueError):
    """A user pattern is not a valid regular expression (the message names it)."""


def compile_patterns(patterns: Sequence[str]) -> list[re.Pattern[str]]:
    """Compile the user's patterns; `InvalidPattern` naming the first bad one."""
    out = []
    for p in patterns:
        try:
            out.append(re.compile(p))
        except re.error as exc:
            raise InvalidPattern(f"{p!r} is not a valid regular expression: {exc}") from None
        if out[-1].search("") is not None:
            raise InvalidPattern(f"{p!r} matches the empty string; it would redact nothing")
    return out


class Redactor:
    """The built-in rules plus the user's patterns; thread-safe, caches recent texts (an
    agent resends the same 40k-character system prompt with every request)."""

    def __init__(self, extra_patterns: Sequence[str] = (), cache_size: int = 256) -> None:
        self.rules = [
            _Rule("custom", p, _whole("custom")) for p in compile_patterns(extra_patterns)
        ]
        self.rules += [_Rule(kind, re.compile(p), fn) for kind, p, fn in _BUILTIN]
        self._cached = lru_cache(maxsize=cache_size)(self._redact)

    def redact(self, text: str) -> Redacted:
        """`text` with every finding replaced by its marker, and the counts per kind."""
        if not text:
            return Redacted(text, {})
        return self._cached(text)

    def _redact(self, text: str) -> Redacted:
        counts: Counter[str] = Counter()
        for rule in self.rules:

            def sub(m: re.Match[str], rule: _Rule = rule) -> str:
                new = rule.replace(m)
                if new is None:
                    return m.group(0)
                counts[rule.kind] += 1
                return new

            text = rule.pattern.sub(sub, text)
        return Redacted(text, dict(counts))

    def redact_value(self, value: Any) -> tuple[Any, dict[str, int]]:
        """A copy of JSON-shaped `value` with every string redacted (keys kept), and the
        counts per kind over all of them."""
        counts: Counter[str] = Counter()

        def walk(v: Any) -> Any:
            if isinstance(v, str):
                r = self.redact(v)
                counts.update(r.counts)
                return r.text
            if isinstance(v, dict):
                return {k: walk(x) for k, x in v.items()}
            if isinstance(v, list | tuple):
                return [walk(x) for x in v]
            return v

        return walk(value), dict(counts)
