"""The README stays a short guide and every link in it and in docs/ resolves."""

from __future__ import annotations

import re
from pathlib import Path

MAX_README_LINES = 300

# [text](target) and ![alt](target); the target ends at whitespace or ")" (an optional
# "title" after a space is ignored). Images inside link text are found on their own.
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+[\"'][^)]*)?\)")
_FENCE = re.compile(r"^(```|~~~)")
_CODE_SPAN = re.compile(r"`+[^`]*`+")


def _repo_root() -> Path:
    for folder in Path(__file__).resolve().parents:
        if (folder / "pyproject.toml").is_file():
            return folder
    raise AssertionError(f"no pyproject.toml above {__file__}")


ROOT = _repo_root()
README = ROOT / "README.md"
DOCS = ROOT / "docs"


def _markdown_files() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def _prose(text: str) -> str:
    """The text without fenced code blocks and inline code spans (no links live there)."""
    lines, in_fence = [], False
    for line in text.splitlines():
        if _FENCE.match(line.strip()):
            in_fence = not in_fence
            continue
        if not in_fence:
            lines.append(_CODE_SPAN.sub("", line))
    return "\n".join(lines)


def _links(path: Path) -> list[str]:
    return _LINK.findall(_prose(path.read_text(encoding="utf-8")))


def _is_local(target: str) -> bool:
    lowered = target.lower()
    return not (lowered.startswith(("http://", "https://", "mailto:", "#")) or "://" in lowered)


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_readme_is_short() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, (
        f"README.md has {len(lines)} lines (at most {MAX_README_LINES}): "
        "move reference text into docs/ and link it"
    )


def test_readme_names_the_two_commands() -> None:
    text = README.read_text(encoding="utf-8")
    missing = [cmd for cmd in ("make run", "make test") if cmd not in text]
    assert not missing, f"README.md does not mention {missing}"


def test_every_doc_is_linked_from_the_readme() -> None:
    linked = set()
    for target in _links(README):
        if _is_local(target):
            linked.add((README.parent / target.split("#", 1)[0]).resolve())
    docs = sorted(DOCS.rglob("*.md"))
    assert docs, "docs/ holds no .md file"
    unlinked = [_rel(doc) for doc in docs if doc.resolve() not in linked]
    assert not unlinked, "README.md does not link these docs:\n  " + "\n  ".join(unlinked)


def test_every_relative_link_resolves() -> None:
    broken = []
    for path in _markdown_files():
        for target in _links(path):
            if not _is_local(target):
                continue
            file_part = target.split("#", 1)[0].split("?", 1)[0]
            if not file_part:
                continue
            if not (path.parent / file_part).exists():
                broken.append(f"{_rel(path)}: ({target})")
    assert not broken, f"{len(broken)} broken relative links:\n  " + "\n  ".join(broken)


def test_the_link_finder_sees_links_and_images(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        'See [a](a.md#x), ![pic](img/p.svg "title") and [web](https://example.org).\n'
        "`[not](a link)`\n```\n[nor](this.md)\n```\n",
        encoding="utf-8",
    )
    assert _links(page) == ["a.md#x", "img/p.svg", "https://example.org"]
    assert [t for t in _links(page) if _is_local(t)] == ["a.md#x", "img/p.svg"]
