"""Render model- and dataset-written text safely: as text or code, never as HTML or markdown."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime

import streamlit as st

from app.pictured import picture_controls
from app.render import action_label, fmt_signed, message_parts
from rollout_core.records import ChatMessage
from storage.read_models import StoredStep

# Every character markdown (or its HTML pass-through) could act on gets a backslash.
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$&:])")


def escape_markdown(text: str) -> str:
    """Text that st.markdown / st.error show literally, its control characters pictured."""
    return _MD_SPECIAL.sub(r"\\\1", picture_controls(text))


MISSING = "-"
"""What a table shows for a value nobody measured or that does not exist yet (NULL in the store;
Streamlit writes "None")."""

BOX_PX = 420
"""Height of the box a long text scrolls in, so what follows it (the parsed action, the
labels, the next step) stays a scroll away, not tens of thousands of pixels."""
_BOX_LINES = 20
_LINE_CHARS = 60
"""About the characters of a wrapped line in half of a wide window: a text counted past
_BOX_LINES such lines stands taller than the box."""


def box_height(text: str) -> int | None:
    """The height a text scrolls in (BOX_PX) when it would stand taller; None when it fits."""
    lines = sum(1 + len(line) // _LINE_CHARS for line in text.splitlines())
    return BOX_PX if lines > _BOX_LINES else None


def show_text(text: str, *, language: str | None = None, key: str | None = None) -> None:
    """Untrusted text as a code block (wrapped); `language="sql"` for highlighting. A long
    one scrolls in a box of bounded height, whole and copyable (the block's copy button)."""
    if not text:
        st.caption("(empty)")
        return
    shown = picture_controls(text)
    st.code(shown, language=language, wrap_lines=True, height=box_height(shown) or "content")


def show_error(text: str) -> None:
    """An error written by the environment or a database, highlighted, shown literally."""
    st.error(escape_markdown(text), icon=":material/error:")


NO_REPLY = "(no reply: the rollout ended here)"
"""An imported or recorded last turn's observation: nothing answered it (rollscope's own
environment answers every step, an ANSWER with its verdict)."""


def no_reply(step: StoredStep) -> str:
    """What a step nothing answered shows for its observation (NULL in the store)."""
    return NO_REPLY if step.done else "(no reply)"


def show_step_action(step: StoredStep) -> None:
    """A step in brief, for steps side by side: its action, reward and marks in a caption,
    then what it acted on (a step that took no action: its output)."""
    marks = [action_label(step), f"reward {fmt_signed(step.reward, 3)}"]
    if step.fell_back:
        marks.append("unparsed")
    if step.replayed:
        marks.append("replayed")
    st.caption(" · ".join(marks))
    show_text(step.acted_on, language="sql" if step.action == "QUERY" else None)


def show_step_result(step: StoredStep) -> None:
    """What came back to a step's action: its error, the result the model read (a query's
    rows, an answer's check), or another action's observation folded away."""
    if step.error is not None:
        show_error(step.error)
    elif step.observation is None:
        st.caption(no_reply(step))
    elif step.action in ("QUERY", "ANSWER"):
        show_text(step.observation)
    elif step.observation:
        with st.expander("observation"):
            show_text(step.observation)


def show_prompt(prompt: Sequence[ChatMessage]) -> None:
    """The prompt as the model saw it: one block per chat message."""
    if not prompt:
        st.caption("(no prompt recorded: the producer did not see it)")
    for message in prompt:
        st.caption(escape_markdown(str(message.get("role", "?"))))
        text, extra = message_parts(message)
        show_text(text)
        if extra is not None:  # the tool calls the model made, which its template showed it
            show_text(extra, language="json")


COUNT_FORMAT = "%,d"
"""A table column of counts, with thousands grouped as the sentences group them (1,234)."""


def fmt_duration(seconds: float | None) -> str:
    """Seconds as '1h 02m', '3m 05s' or '4.2s'; None -> '-'."""
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"


def fmt_time(value: datetime | None) -> str:
    """A timestamp to the second; None -> '-'."""
    return "-" if value is None else value.strftime("%Y-%m-%d %H:%M:%S")


def fmt_points(value: float | None) -> str:
    """A difference of two shares in percentage points: 0.235 -> '+23.5 pts'; None -> '-'."""
    return "-" if value is None else f"{value * 100:+.1f} pts"
