"""The agent's action: what it asked the environment to do, and with which argument."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from rollout_core.records import ActionKind


@dataclass(frozen=True, slots=True)
class SQLAction:
    """One parsed action line, e.g. `QUERY: SELECT count(*) FROM singer`."""

    action_type: ActionKind
    """DESCRIBE, SAMPLE, QUERY or ANSWER."""
    argument: str
    """Table name, SQL text or answer text, stripped of fences and surrounding whitespace."""
    parsed: bool = True
    """False when no action line was found and the whole text fell back to QUERY."""


def tool_call_text(name: Any, arguments: Any) -> str:
    """A tool call as a step's raw output writes it: one JSON line of its name and arguments
    (what a model's call holds; a trainer's tools receive it without the text around it)."""
    return json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
