"""What the swe agent sees and writes: the system prompts of both protocols, the parsing of
text-protocol replies (exactly one ```bash block) and the upstream observation format
(`<returncode>N</returncode>` + `<output>...</output>`, head and tail kept)."""

from __future__ import annotations

import re

from clawrl_app.envs.base import Action, ToolSpec
from clawrl_app.envs.parsing import ParseResult

SENTINEL = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
OUTPUT_CHARS = 5000  # head + tail kept of a command's output (upstream's cap)
BASH_BLOCK = re.compile(r"```bash[ \t]*\n(.*?)\n?```", re.DOTALL)
TOOLS = [
    ToolSpec("bash", "Run one bash command in a fresh shell in /workspace; returns its exit "
             "code and output (stdout and stderr).",
             {"type": "object", "properties": {"command": {"type": "string"}},
              "required": ["command"], "additionalProperties": False}),
    ToolSpec("submit", "Submit your changes to the repository as the final result.",
             {"type": "object", "properties": {}, "required": [],
              "additionalProperties": False}),
]  # fmt: skip

COMMON = (
    "You are a software engineer fixing an issue in a Python repository at /workspace (a git "
    "repository; the package is importable from there). Each command runs in a new shell in "
    "/workspace: `cd`, variables and background processes do NOT carry over between "
    "commands (chain with && or write files instead). There is no network. Commands are "
    "killed after {timeout} s. Run the visible tests with `python -m pytest -q tests`. "
    "Change only non-test source files: edits to tests, conftest.py, pytest/packaging "
    "configuration, sitecustomize/.pth files are discarded, and hidden tests decide the "
    "result. You have at most {turns} turns.\n\n"
)
TEXT = COMMON + (
    "Every reply has two parts: a THOUGHT section explaining your reasoning, then EXACTLY "
    "ONE bash code block with ONE command (or commands joined with && or ||), like:\n\n"
    "THOUGHT: I need to find where slugify is defined.\n\n```bash\ngrep -rn 'def slugify' "
    ".\n```\n\nA reply with no bash block or with several is a format error. Edit files "
    "with e.g. `sed -i`, `python - <<'EOF' ... EOF` or `cat > file <<'EOF'`. When you are "
    "done, submit with a command whose output starts with the line {sentinel}:\n\n"
    "```bash\necho {sentinel}\n```\n\nYou cannot continue working after submitting."
)
TOOL = COMMON + (
    "Use the tools: `bash` runs one command and returns `<returncode>` and `<output>`; "
    "call `submit` when your change is complete (you cannot continue after it). Call one "
    "tool per turn."
)


def system_prompt(protocol: str, turns: int, timeout_s: float = 30.0) -> str:
    """The system prompt of `protocol` ("text" or "tool")."""
    template = TEXT if protocol == "text" else TOOL
    return template.format(timeout=f"{timeout_s:g}", turns=turns, sentinel=SENTINEL)


def parse_text_reply(text: str) -> ParseResult:
    """The bash command of a text-protocol reply; a format error (a parse error for the
    runner) unless the reply holds exactly one ```bash block."""
    blocks = BASH_BLOCK.findall(text)
    if len(blocks) != 1:
        return ParseResult(
            error=f"Format error: your reply must contain EXACTLY ONE ```bash code block "
            f"(found {len(blocks)}). Write a THOUGHT, then one ```bash block with one "
            f"command. To finish, run `echo {SENTINEL}` as your command."
        )
    return ParseResult([Action("bash", {"command": blocks[0]})])


def cap_output(output: str, limit: int = OUTPUT_CHARS) -> str:
    """`output` within `limit` characters: the first and last halves with a note between."""
    if len(output) <= limit:
        return output
    half = limit // 2
    cut = len(output) - 2 * half
    note = (
        f"\n[... {cut} characters elided: the output was too long. Look at parts of it with "
        "head, tail, grep or sed -n ...]\n"
    )
    return output[:half] + note + output[-half:]


def format_observation(returncode: int, output: str, turns_left: int) -> str:
    """Upstream's observation, plus how many turns remain."""
    body = cap_output(output)
    if body and not body.endswith("\n"):
        body += "\n"
    plural = "turn" if turns_left == 1 else "turns"
    return (
        f"<returncode>{returncode}</returncode>\n<output>\n{body}</output>\n"
        f"{turns_left} {plural} left."
    )
