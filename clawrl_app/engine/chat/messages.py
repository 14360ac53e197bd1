"""The text of an OpenAI message's content, whatever its form (a string or a list of parts)."""

from __future__ import annotations

from typing import Any


def message_text(content: Any) -> str:
    """Flatten OpenAI content (a string or a list of parts) to text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict):
                if part.get("type") in (None, "text", "input_text"):
                    parts.append(str(part.get("text", "")))
                elif part.get("type") in ("image_url", "input_image"):
                    parts.append("[image]")
                elif part.get("type") in ("input_audio", "audio"):
                    parts.append("[audio]")
                elif part.get("type") == "file":
                    parts.append("[file]")
            elif isinstance(part, str):
                parts.append(part)
        return "\n".join(p for p in parts if p)
    return str(content)
