"""The prompt format: the system prompt and how observations are written for the model."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rollout_core.settings import DEFAULT_STEP_BUDGET

if TYPE_CHECKING:
    from rollout_core.environment import SQLObservation

__all__ = [
    "DEFAULT_STEP_BUDGET",
    "format_observation",
    "format_question",
    "get_system_prompt",
    "initial_messages",
]

_SYSTEM_PROMPT = """\
You answer a question about a SQLite database by taking one action per turn.
Write exactly one action:
DESCRIBE <table> - columns, types, keys and row count of a table
SAMPLE <table> - the first rows of a table
QUERY <sql> - run one SELECT statement and see its rows
ANSWER <value> - submit your final answer; the episode ends
Give several values as a JSON list: ANSWER ["a", "b"] or ANSWER [[1, "x"], [2, "y"]].
You have {budget} actions."""


def get_system_prompt(step_budget: int = DEFAULT_STEP_BUDGET) -> str:
    """The system message every episode starts with."""
    return _SYSTEM_PROMPT.format(budget=step_budget)


def format_question(
    question: str, tables: list[str], evidence: str | None = None, db_id: str | None = None
) -> str:
    """The first user message: the question, BIRD's evidence if any, and the table names."""
    lines = [f"Question: {question}"]
    if evidence:
        lines.append(f"Evidence: {evidence}")
    if db_id:
        lines.append(f"Database: {db_id}")
    lines.append("Tables: " + ", ".join(tables))
    return "\n".join(lines)


def format_observation(obs: SQLObservation) -> str:
    """The user message that answers the agent's last action (or opens the episode)."""
    if obs.step == 0:
        return format_question(obs.question, obs.tables, obs.evidence, obs.db_id)
    if obs.error is not None:
        return f"Error: {obs.error}"
    return obs.result


def initial_messages(obs: SQLObservation, step_budget: int) -> list[dict[str, str]]:
    """System prompt plus the opening user message for a freshly reset episode."""
    return [
        {"role": "system", "content": get_system_prompt(step_budget)},
        {"role": "user", "content": format_observation(obs)},
    ]
