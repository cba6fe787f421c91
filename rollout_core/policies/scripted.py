"""Scripted baselines: the oracle (reads the gold SQL) and a seeded random agent."""

from __future__ import annotations

import json
import random
import re
import threading
from collections.abc import Sequence

from rollout_core.gold import GoldQueryError, gold_result
from rollout_core.grading import format_answer
from rollout_core.policies.base import Completion, PolicyRequest
from rollout_core.records import EpisodeKey, PolicyInfo
from rollout_core.settings import GenerationSettings

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class OraclePolicy:
    """DESCRIBE a table the gold query uses, QUERY the gold SQL, ANSWER its result."""

    name = "oracle"
    tokenizer = None

    def __init__(self) -> None:
        self._answers: dict[tuple[str, str], str] = {}
        self._lock = threading.Lock()

    def describe(self) -> PolicyInfo:
        return PolicyInfo(name="oracle")

    def release(self, episodes: Sequence[EpisodeKey]) -> None:
        """Stateless per episode: nothing to forget."""

    def generate(self, requests: Sequence[PolicyRequest]) -> list[Completion]:
        return [Completion(self._act(r), truncated=False) for r in requests]  # never cut

    def _act(self, r: PolicyRequest) -> str:
        # With fewer than three actions left at the start, skip the DESCRIBE (and the QUERY).
        budget = r.step_no + r.steps_left - 1
        plan = ["DESCRIBE", "QUERY", "ANSWER"][max(0, 3 - budget) :]
        kind = plan[min(r.step_no - 1, len(plan) - 1)]
        if kind == "DESCRIBE":
            return f"DESCRIBE {gold_table(r.question.gold_sql, r.tables)}"
        if kind == "QUERY":
            return "QUERY " + " ".join(r.question.gold_sql.split())
        return f"ANSWER {self._answer(r)}"

    def _answer(self, r: PolicyRequest) -> str:
        key = (str(r.db_path), r.question.gold_sql)
        with self._lock:
            if key in self._answers:
                return self._answers[key]
        try:
            gold = gold_result(r.db_path, r.question.gold_sql)
            answer = format_answer(gold.rows, len(gold.columns))
        except GoldQueryError:
            answer = "[]"
        with self._lock:
            self._answers[key] = answer
        return answer


def gold_table(sql: str, tables: Sequence[str]) -> str:
    """The first of the database's tables that the SQL names, else the first table."""
    by_lower = {t.lower(): t for t in tables}
    for word in _WORD.findall(sql):
        if word.lower() in by_lower:
            return by_lower[word.lower()]
    return tables[0] if tables else "unknown"


class RandomPolicy:
    """A seeded agent that picks actions at random: every outcome shows up, reproducibly."""

    name = "random"
    tokenizer = None

    def describe(self) -> PolicyInfo:
        return PolicyInfo(name="random")

    def release(self, episodes: Sequence[EpisodeKey]) -> None:
        """Stateless per episode: nothing to forget."""

    def generate(self, requests: Sequence[PolicyRequest]) -> list[Completion]:
        return [Completion(self._act(r), truncated=False) for r in requests]  # never cut

    def _act(self, r: PolicyRequest) -> str:
        rng = random.Random(r.seed * 1_000_003 + r.step_no)
        table = rng.choice(r.tables) if r.tables else "t"
        roll = rng.random()
        if roll < 0.2:
            return f"DESCRIBE {table}"
        if roll < 0.35:
            return f"SAMPLE {table}"
        if roll < 0.45:
            return f"DESCRIBE {table}_x"  # an unknown table: exercises the error path
        if roll < 0.55:
            return "I am not sure what to do next."  # unparsed: falls back to QUERY
        if roll < 0.8:
            return rng.choice(
                [f"QUERY SELECT COUNT(*) FROM {table}", f"QUERY SELECT * FROM {table} LIMIT 3"]
            )
        return "ANSWER " + json.dumps(rng.randint(0, 20))


def oracle_policy(arg: str | None, settings: GenerationSettings) -> OraclePolicy:
    """Registry factory of `oracle` (it has no settings)."""
    return OraclePolicy()


def random_policy(arg: str | None, settings: GenerationSettings) -> RandomPolicy:
    """Registry factory of `random` (seeded per episode and step; no other settings)."""
    return RandomPolicy()
