"""Text for synthetic episodes: questions, model outputs and observations of realistic length.

Lengths follow what agents write on Spider-style tasks: outputs from a bare action (~15
characters) to a line of reasoning and a multi-line query (~300), about 110 on average;
observations from `COUNT(*)\\n4` to a five-row sample or a table description (~700), about
250 on average. The prompts are the runner's own (JSON chat messages, `rollout_core.prompts`).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

from rollout_core.prompts import format_question, get_system_prompt
from rollout_core.records import ActionKind

DB_TABLES = {
    "concert_singer": ("stadium", "singer", "concert", "singer_in_concert"),
    "pets_1": ("student", "has_pet", "pets"),
    "car_1": ("continents", "countries", "car_makers", "model_list", "car_names", "cars_data"),
    "flight_2": ("airlines", "airports", "flights"),
    "employee_hire_evaluation": ("employee", "shop", "hiring", "evaluation"),
    "world_1": ("city", "sqlite_sequence", "country", "countrylanguage"),
}
DBS = tuple(DB_TABLES)
_COLUMNS = ("id", "name", "country", "age", "year", "capacity", "city", "price", "title", "code")
_THOUGHTS = (
    "Let me look at the table first.",
    "I need to know which columns hold the country before filtering.",
    "The question asks for a count, so I will aggregate over the matching rows.",
    "The previous query failed because the column name was wrong; the schema says otherwise.",
    "I have the rows I need; the answer is the number in the result.",
)
_POOL = 64  # variants per kind of text: enough spread, generated once per filler


def system_prompt(chars: int | None, step_budget: int) -> str:
    """The runner's system prompt, padded with plausible instructions to about `chars`."""
    base = get_system_prompt(step_budget)
    if chars is None or chars <= len(base):
        return base
    rules = [
        f"Rule {i}: prefer {c} columns named in the question; quote identifiers with spaces."
        for i, c in enumerate(_COLUMNS * (chars // 400 + 1), start=1)
    ]
    text = base
    for line in rules:
        if len(text) + len(line) + 1 > chars:
            break
        text += "\n" + line
    return text


def question_text(q: int) -> str:
    """The text of synthetic question number q."""
    return f"How many singers from country {q} performed in concert {q % 97}?"


@dataclass(frozen=True, slots=True)
class StepText:
    """What one synthetic step writes: the model's output, the parsed argument, the answer."""

    raw_output: str
    argument: str
    observation: str


class TextPools:
    """Pre-generated variants of every kind of step text, drawn from with an rng."""

    def __init__(self, rng: random.Random) -> None:
        self._outputs = {
            a: [_output(rng, a) for _ in range(_POOL)] for a in ("DESCRIBE", "SAMPLE", "QUERY")
        }
        self._outputs["ANSWER"] = [_output(rng, "ANSWER") for _ in range(_POOL)]
        self._unparsed = [_unparsed(rng) for _ in range(_POOL)]
        self._observations = {
            "DESCRIBE": [_describe(rng) for _ in range(_POOL)],
            "SAMPLE": [_sample(rng) for _ in range(_POOL)],
            "QUERY": [_rows(rng) for _ in range(_POOL)],
        }

    def step(
        self,
        rng: random.Random,
        action: ActionKind,
        *,
        parsed: bool,
        error: str | None,
        correct: bool = False,
    ) -> StepText:
        """Text of one step of `action` (parsed or not, failed with `error` or not)."""
        raw, argument = rng.choice(self._outputs[action] if parsed else self._unparsed)
        if action == "ANSWER" and parsed:
            observation = f"Answer submitted: {'correct' if correct else 'incorrect'}."
        elif error is not None:
            observation = f"Error: {error}"
        else:
            observation = rng.choice(self._observations["QUERY" if action == "ANSWER" else action])
        return StepText(raw, argument, observation)


def _output(rng: random.Random, action: ActionKind) -> tuple[str, str]:
    table = rng.choice(DB_TABLES[rng.choice(DBS)])
    if action in ("DESCRIBE", "SAMPLE"):
        argument = table
        line = f"{action} {table}" if rng.random() < 0.5 else f"{action}: {table}"
    elif action == "QUERY":
        cols = ", ".join(rng.sample(_COLUMNS, rng.randint(1, 4)))
        argument = f"SELECT {cols} FROM {table} WHERE {rng.choice(_COLUMNS)} = 'France'"
        if rng.random() < 0.4:
            argument += f"\nORDER BY {rng.choice(_COLUMNS)} DESC\nLIMIT {rng.randint(1, 20)}"
        line = f"QUERY: {argument}" if rng.random() < 0.6 else f"QUERY\n```sql\n{argument}\n```"
    else:
        argument = json.dumps(rng.sample(["France", "Spain", "4", "12", "Paris"], 2))
        argument = argument if rng.random() < 0.3 else str(rng.randint(0, 500))
        line = f"ANSWER: {argument}"
    if rng.random() < 0.5:  # a line of reasoning before the action
        line = " ".join(rng.sample(_THOUGHTS, rng.randint(1, 2))) + "\n" + line
    return line, argument


def _unparsed(rng: random.Random) -> tuple[str, str]:
    text = " ".join(rng.sample(_THOUGHTS, rng.randint(1, 3)))
    return text, text


def _describe(rng: random.Random) -> str:
    table = rng.choice(DB_TABLES[rng.choice(DBS)])
    cols = rng.sample(_COLUMNS, rng.randint(3, 8))
    lines = [f"table {table} ({rng.randint(5, 5000)} rows)", "columns:"]
    lines += [f"  {c} {rng.choice(('INTEGER', 'TEXT', 'REAL'))}" for c in cols]
    lines[2] += " (primary key)"
    return "\n".join(lines)


def _sample(rng: random.Random) -> str:
    cols = rng.sample(_COLUMNS, rng.randint(3, 6))
    rows = [" | ".join(cols)]
    for i in range(1, 6):
        rows.append(" | ".join(f"{c[:3]}{i}{rng.randint(0, 9999)}" for c in cols))
    return "\n".join(rows)


def _rows(rng: random.Random) -> str:
    cols = rng.sample(_COLUMNS, rng.randint(1, 3))
    n = rng.choice((1, 1, 1, 2, 3, 5, 10, 20))
    rows = [" | ".join(cols)]
    rows += [
        " | ".join(str(rng.randint(0, 10 ** rng.randint(1, 6))) for _ in cols) for _ in range(n)
    ]
    return "\n".join(rows)


def first_messages(system: str, question: str, db_id: str) -> list[dict[str, str]]:
    """The first step's prompt as the runner builds it: system prompt and question."""
    user = format_question(question, list(DB_TABLES[db_id]), None, db_id)
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]
