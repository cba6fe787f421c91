"""A rollout's text as turns: what the model wrote, what answered it, and which action it took.

Frameworks that keep only decoded text (verl, SkyRL, TRL's log of a `rollout_func` that plays
several turns) flatten a multi-turn rollout into one string: the model's turns with the
environment's replies between them, framed by what is left of the chat template (`user`,
`assistant` on their own lines when special tokens were skipped, `<|im_start|>user` or
`<|start_header_id|>user<|end_header_id|>` when they were not). A reply may also be wrapped in
a tag (`<observation>` for SkyRL-SQL, `<tool_response>` for verl's tool agents, `<information>`
for search agents). `split_turns` cuts at the tagged replies, or else at the template's reply
turns, and trims the frames; `prompt_messages` reads a decoded prompt back into chat messages.

Llama 3's template leaves no line of its own once its special tokens are skipped: each turn
reads `{role}\n\n{text}`, glued to the text before it (`...a SQL agent.user\n\nHow many?`). A
role and a blank line right after non-space text count as a turn only where the text is in
that form: a prompt that opens with `system\n\n` or `user\n\n`, or an output where such a
reply turn is later followed by such an `assistant` turn; prose elsewhere is left whole.

`turn_action` names the action a turn took, so that an imported step reads as one of
rollscope's: a tag (`<sql>` QUERY, `<solution>` or `<answer>` ANSWER, as SkyRL-SQL and R1-style
agents write them), a tool call with a SQL argument, rollscope's own action line, or a fenced or
bare SQL statement (an ANSWER when it ends the rollout unanswered). Anything else took no
action, and is recorded with none.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from rollout_core.actions import SQLAction, tool_call_text
from rollout_core.parse import parse_model_output
from rollout_core.records import ChatMessage

REPLY_TAGS = ("observation", "tool_response", "information")
_REPLY = re.compile(r"<(observation|tool_response|information)>(.*?)</\1>", re.S)
# What a chat template leaves around a reply: end-of-turn and start-of-turn markers (ChatML,
# Llama 3) with or without their special tokens, and the role's name on its own line.
_END_MARKS = ("<|im_end|>", "<|eot_id|>", "<|endoftext|>", "</s>", "<|im_start|>")
_ROLE_OPENERS = ("\n", "<|im_start|>", "<|start_header_id|>")
_REPLY_ROLES = ("user", "tool", "ipython")
_LEADING_ROLE = re.compile(
    r"\A(?:<\|im_end\|>|<\|eot_id\|>|<\|im_start\|>|<\|start_header_id\|>|\s)*"
    r"assistant(?:<\|end_header_id\|>)?[ \t]*\n"
)
_ROLE_MARK = re.compile(
    r"(?:<\|im_start\|>|<\|start_header_id\|>)(?P<special>\w+)(?:<\|end_header_id\|>)?[ \t]*\n?"
    r"|(?:(?<=\n)|\A)(?P<bare>user|assistant|tool|ipython)[ \t]*(?:\n|\Z)"
)
"""A turn's opening: the role with its special tokens, or the role's name alone on a line (what
is left of it when special tokens were skipped)."""
_LLAMA3_HEADER = re.compile(r"(?:(?<=\S)|\A)(?P<role>system|user|assistant|ipython|tool)\n\n")
"""A Llama 3 turn's opening with its special tokens skipped: the template trims each message, so
the role follows the text before it with no space, and `<|end_header_id|>\n\n` leaves a blank
line."""
_LLAMA3_REPLY_END = re.compile(r"(?:(?<=\S)|\A)(?:user|tool|ipython)\n\n\Z")
_LLAMA3_MODEL_START = "assistant\n\n"
_FENCE = re.compile(r"```[ \t]*(sql|sqlite)?[ \t]*\n(.*?)```", re.S | re.I)
_BARE_SQL = re.compile(r"\s*(?:SELECT|WITH)\b", re.I)
_ANSWER_TOOLS = re.compile(r"answer|submit|final|solution", re.I)
_SQL_KEYS = ("sql", "query", "sql_query", "statement")
_ROLES = ("system", "user", "assistant", "tool")


@dataclass(frozen=True, slots=True)
class _RoleMark:
    """Where the chat template opens a turn in a decoded text."""

    role: str
    start: int
    end: int
    bare: bool
    """The role's name alone on a line, which a reply's own text may hold too."""


@dataclass(frozen=True, slots=True)
class Turn:
    """One model turn and the reply that followed it."""

    output: str
    """What the model wrote, as the file holds it (tool calls rendered as JSON lines)."""
    reply: str | None
    """The environment's or tool's answer to it; None when the file holds none."""
    messages: tuple[ChatMessage, ...]
    """The chat messages the turn adds to the conversation: the model's, then the reply's."""
    tool_calls: tuple[Mapping[str, Any], ...] = ()
    """The turn's tool calls (OpenAI format), when it made any."""


def split_turns(text: str) -> list[Turn]:
    """A flattened multi-turn output as turns (one turn when it holds no reply)."""
    if "</" not in text or not any(f"</{t}>" in text for t in REPLY_TAGS):
        return _role_turns(text) or [_turn(_trim_end(text), None)]
    turns: list[Turn] = []
    start = 0
    output: str | None = None
    replies: list[str] = []
    for found in _REPLY.finditer(text):
        between = _trim_start(_trim_role_end(text[start : found.start()]))
        # Only template residue between two replies: several tool answers to one turn.
        if output is None or between.strip():
            if output is not None:
                turns.append(_turn(output, "\n".join(replies)))
            output, replies = between, []
        replies.append(found.group(2).strip("\n"))
        start = found.end()
    assert output is not None
    tail = _trim_end(_trim_start(text[start:]))
    turns.append(_turn(output, "\n".join(replies)))
    if tail.strip():
        turns.append(_turn(tail, None))
    return turns


def _role_turns(text: str) -> list[Turn] | None:
    """Turns cut where the chat template opens a reply (a user or tool turn) and the model's
    next turn; None when the text holds no reply turn, or one that is not the model's text and
    its replies (a system turn, a reply before any model turn)."""
    marks = _role_marks(text)
    if not any(m.role in _REPLY_ROLES for m in marks):
        return None
    segments: list[tuple[str, str]] = []
    role, start = "assistant", 0
    for mark in marks:
        if mark.bare and role in _REPLY_ROLES and mark.role != "assistant":
            continue  # a line reading `user` inside a reply (a result's value) is its text
        segments.append((role, text[start : mark.start]))
        role, start = mark.role, mark.end
    segments.append((role, text[start:]))
    turns: list[Turn] = []
    output: str | None = None
    replies: list[str] = []
    for at, (role, content) in enumerate(segments):
        content = _trim_end(content).strip("\n")
        if role == "assistant":
            if at == 0 and not content:
                continue  # the text opens with the model's turn
            if output is not None:
                turns.append(_turn(output, "\n".join(replies) if replies else None))
            output, replies = content, []
        elif role in _REPLY_ROLES and output is not None:
            replies.append(content)
        else:
            return None
    assert output is not None  # a reply turn came after a model turn
    # A generation prompt at the end (an empty model turn) opens no turn.
    if output or replies:
        turns.append(_turn(output, "\n".join(replies) if replies else None))
    return turns


def _role_marks(text: str) -> list[_RoleMark]:
    """Where the template opens each turn of a model's output: by its special tokens where it
    kept them, else by Llama 3's headers where the text is in that form, else by role lines."""
    found = [
        _RoleMark(m["special"] or m["bare"], m.start(), m.end(), bare=not m["special"])
        for m in _ROLE_MARK.finditer(text)
    ]
    if any(not m.bare for m in found):
        return found
    return _llama3_output_marks(text) or found


def _llama3_output_marks(text: str) -> list[_RoleMark] | None:
    """Llama 3's headers in a model's output, None unless it is in that form: the model's text
    first, then a reply's header (user, tool, ipython), later followed by an assistant's."""
    marks = [
        _RoleMark(m["role"], m.start(), m.end(), bare=False)
        for m in _LLAMA3_HEADER.finditer(text)
        if m["role"] != "system"
    ]
    if not marks or marks[0].role not in _REPLY_ROLES:
        return None
    return marks if any(m.role == "assistant" for m in marks) else None


def _trim_role_end(text: str) -> str:
    """The text before a reply, without the reply's opening (`\nuser\n`, `<|im_start|>user`,
    Llama 3's `user\n\n`) and the end of the model's turn (`<|im_end|>`)."""
    if header := _LLAMA3_REPLY_END.search(text):
        return _trim_end(text[: header.start()])
    kept = text.rstrip()
    for role in _REPLY_ROLES:
        if kept.endswith(role):
            before = kept[: -len(role)]
            if not before or before.endswith(_ROLE_OPENERS):
                kept = before.removesuffix("<|im_start|>").removesuffix("<|start_header_id|>")
                return _trim_end(kept.rstrip("\n"))
            break
    return _trim_end(text)


def _trim_start(text: str) -> str:
    if text.startswith(_LLAMA3_MODEL_START):
        return text[len(_LLAMA3_MODEL_START) :]  # Llama 3's header, glued to the reply's tag
    if not text.startswith(("\n", "<", "a", " ")):
        return text
    found = _LEADING_ROLE.match(text)
    return text[found.end() :] if found else text


def _trim_end(text: str) -> str:
    """Without end-of-turn markers (and the whitespace around them) at its end."""
    kept = text
    while True:
        stripped = kept.rstrip()
        for mark in _END_MARKS:
            if stripped.endswith(mark):
                kept = stripped[: -len(mark)]
                break
        else:
            return text if kept is text else kept.rstrip()


def _turn(output: str, reply: str | None) -> Turn:
    said: tuple[ChatMessage, ...] = ({"role": "assistant", "content": output},)
    if reply is not None:
        said += ({"role": "user", "content": reply},)
    return Turn(output, reply, said)


def message_turns(messages: Sequence[Mapping[str, Any]]) -> tuple[list[ChatMessage], list[Turn]]:
    """Chat messages as (the prompt: the messages before the first assistant turn, the turns);
    each turn's reply is the text of the tool or user messages after it."""
    prompt: list[ChatMessage] = []
    turns: list[Turn] = []
    said: list[ChatMessage] = []
    output: str | None = None
    calls: tuple[Mapping[str, Any], ...] = ()
    replies: list[str] = []
    for m in messages:
        if not isinstance(m, Mapping):
            raise ValueError(f"a message is {type(m).__name__}, not an object with a role")
        role = m.get("role")
        if role == "assistant":
            if output is not None:
                turns.append(_message_turn(output, replies, said, calls))
            output, calls = assistant_text(m)
            said, replies = [dict(m)], []
        elif output is None:
            prompt.append(dict(m))
        else:
            said.append(dict(m))
            replies.append(content_text(m.get("content")))
    if output is not None:
        turns.append(_message_turn(output, replies, said, calls))
    return prompt, turns


def _message_turn(
    output: str,
    replies: list[str],
    said: list[ChatMessage],
    calls: tuple[Mapping[str, Any], ...],
) -> Turn:
    return Turn(output, "\n".join(replies) if replies else None, tuple(said), calls)


def assistant_text(message: Mapping[str, Any]) -> tuple[str, tuple[Mapping[str, Any], ...]]:
    """An assistant message's text with its tool calls after it, one JSON line each (the
    calls as the message holds them), and the calls."""
    text = content_text(message.get("content"))
    calls = message.get("tool_calls") or ()
    if not isinstance(calls, list | tuple):
        return text, ()
    shown = [_call_text(c) for c in calls]
    joined = "\n".join(part for part in (text, *shown) if part)
    return joined, tuple(c for c in calls if isinstance(c, Mapping))


def _call_text(call: Any) -> str:
    function = call.get("function") if isinstance(call, Mapping) else None
    if isinstance(function, Mapping):
        return tool_call_text(function.get("name"), function.get("arguments"))
    return json.dumps(dict(call) if isinstance(call, Mapping) else call, ensure_ascii=False)


def content_text(content: Any) -> str:
    """A message's content as text: a string as it is, a list of parts as their texts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list | tuple):
        parts = []
        for part in content:
            if isinstance(part, Mapping):
                parts.append(str(part.get("text", "")))
            else:
                parts.append(str(part))
        return "".join(parts)
    return str(content)


def prompt_messages(text: str) -> list[ChatMessage]:
    """A decoded prompt as chat messages: its ChatML turns (with their special tokens, or as
    the role lines left when those were skipped), Llama 3's turns with its special tokens
    skipped, else the whole text as one user message. The generation prompt at its end (an
    empty assistant turn) is left out."""
    messages: list[ChatMessage] = [{"role": r, "content": c} for r, c in _prompt_pairs(text)]
    while messages and messages[-1]["role"] == "assistant" and not messages[-1]["content"]:
        messages.pop()
    return messages or [{"role": "user", "content": text}]


def _prompt_pairs(text: str) -> list[tuple[str, str]]:
    """(role, text) of each turn of a decoded prompt; none where no chat template shows."""
    if "<|im_start|>" in text:
        found = re.findall(r"<\|im_start\|>(\w+)\n(.*?)(?:<\|im_end\|>|\Z)", text, re.S)
        return [(r, c.rstrip("\n")) for r, c in found]
    if (llama3 := _llama3_prompt_pairs(text)) is not None:
        return llama3
    if text.split("\n", 1)[0] in ("system", "user"):
        return _role_line_pairs(text)
    return []


def _role_line_pairs(text: str) -> list[tuple[str, str]]:
    """(role, text) of each turn of a ChatML prompt whose special tokens were skipped: each
    role's name is left on a line of its own."""
    roles: list[str] = []
    lines: list[list[str]] = []
    for line in text.split("\n"):
        if line in _ROLES:
            roles.append(line)
            lines.append([])
        else:
            lines[-1].append(line)
    return [(r, "\n".join(c).strip("\n")) for r, c in zip(roles, lines, strict=True)]


def _llama3_prompt_pairs(text: str) -> list[tuple[str, str]] | None:
    """(role, text) of each turn of a prompt in Llama 3's form with its special tokens skipped:
    it opens with a system or user header, as that template always renders, and holds another
    (a role line `system` over a blank line in a ChatML prompt has none). None otherwise."""
    headers = list(_LLAMA3_HEADER.finditer(text))
    if len(headers) < 2 or headers[0].start() != 0 or headers[0]["role"] not in ("system", "user"):
        return None
    ends = [h.start() for h in headers[1:]] + [len(text)]
    return [
        (h["role"], text[h.end() : end].strip("\n")) for h, end in zip(headers, ends, strict=True)
    ]


_QUESTION_HEADING = re.compile(r"^[ \t#*]*Question(?:[ \t]+\d+)?[ \t*]*:[ \t*]*", re.M)
_NEXT_LABEL = re.compile(r"[ \t]*(?:#|[*]*[A-Z][A-Za-z ]{0,40}:)")


@lru_cache(maxsize=1024)
def asked_question(text: str) -> str:
    """The question a prompt's user message asks. Where the message is a template with a
    `Question:` section (OmniSQL's, which SkyRL-SQL and Arctic-Text2SQL-R1 train with; `#
    Question:`; rollscope's own `Question: ...` line), that section: from the last such
    heading (a few-shot template's examples come before it) to a blank line, the next
    `Label:` line or a Markdown heading. Else the whole message."""
    headings = list(_QUESTION_HEADING.finditer(text))
    if not headings:
        return text
    last = headings[-1]
    asked: list[str] = []
    for line in text[last.end() :].split("\n"):
        if not asked and not line.strip():
            continue  # the heading on a line of its own
        if not line.strip() or (asked and _NEXT_LABEL.match(line)):
            break
        asked.append(line)
    return "\n".join(asked).strip() or text


def last_user_text(messages: Sequence[Mapping[str, Any]]) -> str:
    """The text of the last user message (the question, in a rollout's prompt)."""
    for m in reversed(messages):
        if m.get("role") == "user":
            return content_text(m.get("content"))
    return content_text(messages[-1].get("content")) if messages else ""


def turn_action(turn: Turn, *, final: bool) -> SQLAction:
    """The action a turn took; `final`: it ends the rollout (an unanswered last turn)."""
    text = turn.output
    unanswered = final and turn.reply is None
    if "</" in text:
        for tag in ("solution", "answer"):
            if (inside := _last_tagged(text, tag)) is not None:
                return SQLAction("ANSWER", inside)
        if sql := _last_tagged(text, "sql"):
            return SQLAction("QUERY", sql)
    for call in turn.tool_calls:
        if (action := _call_action(call)) is not None:
            return action
    parsed = parse_model_output(text)
    if parsed.parsed:
        return parsed
    if "```" in text and (found := _last(_FENCE, text)):
        sql = found.group(2).strip()
        if sql and (found.group(1) or _BARE_SQL.match(sql)):
            return SQLAction("ANSWER" if unanswered else "QUERY", sql)
    if _BARE_SQL.match(text):
        return SQLAction("ANSWER" if unanswered else "QUERY", text.strip())
    return parsed


def _last_tagged(text: str, tag: str) -> str | None:
    """The text inside the last `<tag>...</tag>` of `text`, stripped; None when there is none."""
    end = text.rfind(f"</{tag}>")
    if end < 0:
        return None
    start = text.rfind(f"<{tag}>", 0, end)
    return None if start < 0 else text[start + len(tag) + 2 : end].strip()


def _last(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    found = None
    for found in pattern.finditer(text):  # noqa: B007 (the last match is wanted)
        pass
    return found


def _call_action(call: Mapping[str, Any]) -> SQLAction | None:
    function = call.get("function")
    spec = function if isinstance(function, Mapping) else call
    name = str(spec.get("name") or "")
    args: Any = spec.get("arguments")
    if isinstance(args, str):
        with contextlib.suppress(ValueError, RecursionError):
            args = json.loads(args)
    value: str | None = None
    if isinstance(args, Mapping):
        for key in (*_SQL_KEYS, "answer", "table", "table_name"):
            if isinstance(args.get(key), str):
                value = args[key]
                break
    elif isinstance(args, str):
        value = args
    if not value:
        return None
    lowered = name.lower()
    if _ANSWER_TOOLS.search(lowered):
        return SQLAction("ANSWER", value.strip())
    if "describe" in lowered or "schema" in lowered:
        return SQLAction("DESCRIBE", value.strip())
    if "sample" in lowered:
        return SQLAction("SAMPLE", value.strip())
    if "sql" in lowered or "query" in lowered or _BARE_SQL.match(value):
        return SQLAction("QUERY", value.strip())
    return None
