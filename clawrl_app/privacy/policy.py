"""What the endpoint records at all: incognito rules and the redactor, from the settings.

Pure: `PrivacyPolicy.from_settings(settings.privacy)` compiles the user's patterns once;
`incognito_reason` says why a request must not be recorded (None: record it, redacted).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from clawrl_app.privacy.redact import Redactor, compile_patterns

if TYPE_CHECKING:
    from clawrl_app.config import PrivacySettings

INCOGNITO_HEADER = "X-Session-Incognito"
"""`X-Session-Incognito: true` (1, yes, on): answer the request, record nothing of it."""


def first_user_text(messages: Sequence[dict[str, Any]]) -> str:
    """The text of the first user message (string content or its text parts), "" if none."""
    for m in messages:
        if m.get("role") != "user":
            continue
        content = m.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            return "\n".join(
                str(p.get("text", "")) for p in content if isinstance(p, dict) and "text" in p
            )
        return ""
    return ""


@dataclass(frozen=True)
class PrivacyPolicy:
    """The redactor (None: store text as sent) and the compiled incognito rules."""

    redactor: Redactor | None = field(default_factory=Redactor)
    incognito_patterns: tuple[re.Pattern[str], ...] = ()
    """Searched in the first user message."""
    incognito_sources: tuple[re.Pattern[str], ...] = ()
    """Searched in the User-Agent and X-Session-Source header values."""

    @classmethod
    def from_settings(cls, s: PrivacySettings) -> PrivacyPolicy:
        """Compile the `[privacy]` settings (already validated by the config)."""
        return cls(
            Redactor(s.redact_patterns) if s.redact else None,
            tuple(compile_patterns(s.incognito_patterns)),
            tuple(compile_patterns(s.incognito_sources)),
        )

    def incognito_reason(
        self, messages: Sequence[dict[str, Any]], sources: Sequence[str | None] = ()
    ) -> str | None:
        """Why this request must not be recorded by a rule (None: no rule matches)."""
        if self.incognito_sources:
            for value in sources:
                if value and any(p.search(value) for p in self.incognito_sources):
                    return "privacy.incognito_sources"
        if self.incognito_patterns:
            text = first_user_text(messages)
            if text and any(p.search(text) for p in self.incognito_patterns):
                return "privacy.incognito_patterns"
        return None
