"""Turn a model completion into one `SQLAction`.

Rules: the first line that starts with an action word (DESCRIBE, SAMPLE, QUERY, ANSWER; any
case; leading whitespace, `**bold**` and an optional colon allowed) wins. The word must stand
alone: `ANSWERS: 5` and `DESCRIBEsinger` are not actions. DESCRIBE and SAMPLE take the rest of
their line as a table name; QUERY and ANSWER continue on the following lines up to a blank line,
a closing code fence or the next action line (inside a fenced block that is closed, only the
closing fence ends the argument). Markdown code fences around the action or its
argument are dropped. An empty argument is no action. Text without any action falls back to
QUERY with the whole text, flagged `parsed=False`.
"""

from __future__ import annotations

import re
from typing import cast

from rollout_core.actions import SQLAction
from rollout_core.records import ActionKind

# `[ \t]*` rather than `\s*`: lines are already split, and a bounded class keeps matching linear.
_ACTION_LINE = re.compile(
    r"[ \t]*(?:```[ \t]*)?(?:\*\*|__)?(DESCRIBE|SAMPLE|QUERY|ANSWER)(?:\*\*|__)?(?=[\s:]|$)",
    re.IGNORECASE,
)
_FENCE = re.compile(r"[ \t]*```")
_OPENING_FENCE = re.compile(r"```[ \t]*[A-Za-z0-9_+-]*[ \t]*")
_NAME_QUOTES = "\"'`[]"
_MULTILINE: frozenset[str] = frozenset({"QUERY", "ANSWER"})


def parse_model_output(text: str) -> SQLAction:
    """Parse a completion; never raises, whatever the text."""
    if not isinstance(text, str):
        text = str(text)
    try:
        found = _find_action(_split_lines(text))
    except Exception:  # defensive: a parser bug must not end a whole batch
        found = None
    return found if found is not None else SQLAction("QUERY", text.strip(), parsed=False)


def _split_lines(text: str) -> list[str]:
    """Split on newlines only (not on the form feeds and separators `splitlines` knows)."""
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def _find_action(lines: list[str]) -> SQLAction | None:
    """Return the first action line with a non-empty argument."""
    # Found once, so that deciding whether a block is closed stays linear over many action lines.
    last_fence = next((i for i in range(len(lines) - 1, -1, -1) if _FENCE.match(lines[i])), -1)
    for index, line in enumerate(lines):
        match = _ACTION_LINE.match(line)
        if match is None:
            continue
        kind = cast(ActionKind, match.group(1).upper())
        rest = _after_word(line[match.end() :])
        if kind in _MULTILINE:
            argument = _multiline_argument(rest, lines, index + 1, last_fence)
        else:
            argument = _table_argument(rest, lines, index + 1)
        if argument:
            return SQLAction(kind, argument)
    return None


def _after_word(rest: str) -> str:
    """Drop the colon and bold markers between the action word and its argument."""
    rest = rest.strip()
    if rest.startswith(":"):
        rest = rest[1:]
    rest = rest.strip()
    for marker in ("**", "__"):
        if rest.startswith(marker):
            rest = rest[len(marker) :].strip()
    return rest


def _multiline_argument(rest: str, lines: list[str], start: int, last_fence: int) -> str:
    """Collect a QUERY/ANSWER argument: this line plus continuation lines.

    `last_fence` is the index of the text's last fence line (-1 for none).
    """
    fenced = False
    if rest.startswith("```"):
        fenced = True
        rest = _OPENING_FENCE.sub("", rest, count=1) if _is_fence_only(rest) else rest[3:]
    elif not rest:
        # `QUERY:` alone, then (after optional blank lines) a fenced block holding the SQL.
        probe = start
        while probe < len(lines) and not lines[probe].strip():
            probe += 1
        if probe < len(lines) and _is_fence_only(lines[probe].strip()):
            fenced, start = True, probe + 1
    parts = [rest] if rest else []
    if not (fenced and rest.rstrip().endswith("```")):
        # Inside a block that is closed later, an action word is content (`ANSWER:` then a
        # fenced `Sample`); an unclosed block still ends at the next action line.
        closed = fenced and last_fence >= start
        for position in range(start, len(lines)):  # not `lines[start:]`: no copy per action line
            line = lines[position]
            stripped = line.strip()
            if _FENCE.match(line) or (not closed and _ACTION_LINE.match(line)):
                break
            if not stripped:
                if fenced:
                    continue  # blank lines inside a fenced block belong to it
                break
            parts.append(line.rstrip())
    return _strip_inline_code("\n".join(parts).strip())


def _table_argument(rest: str, lines: list[str], start: int) -> str:
    """A DESCRIBE/SAMPLE argument: one table name, maybe inside a fence on the next line."""
    if rest.startswith("```") and _is_fence_only(rest):
        rest = ""
    if not rest:
        if start < len(lines) and _is_fence_only(lines[start].strip()) and start + 1 < len(lines):
            rest = lines[start + 1].strip()
        else:
            return ""
    rest = rest.replace("```", " ").strip().rstrip(";.,").strip()
    while rest and rest[0] in _NAME_QUOTES and rest[-1] in _NAME_QUOTES and len(rest) >= 2:
        rest = rest[1:-1].strip()
    return rest.rstrip(";").strip()


def _is_fence_only(text: str) -> bool:
    """True for a line that is only a fence, maybe with a language tag (```sql)."""
    return _OPENING_FENCE.fullmatch(text.strip()) is not None


def _strip_inline_code(argument: str) -> str:
    """Drop fences at either end and one pair of backticks wrapping the whole argument."""
    while argument.endswith("```"):
        argument = argument.rstrip("`").rstrip()
    while argument.startswith("```"):
        argument = argument.lstrip("`").lstrip()
    if (
        len(argument) >= 2
        and argument[0] == "`"
        and argument[-1] == "`"
        and "`" not in argument[1:-1]
    ):
        argument = argument[1:-1].strip()
    return argument
