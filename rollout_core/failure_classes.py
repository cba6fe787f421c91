"""Failure classes: one class per finished episode, from its outcome and its steps.

The first rule that holds gives the class:

0. `abandoned`        its player left before it ended (the outcome says so).
1. `env_error`        the episode ended in `error`: its gold query or database failed, or its
                      answer could not be graded (the environment's fault, not the agent's).
2. `correct`          the answer was graded correct.
3. `wrong_after_gold` the answer was wrong, but a QUERY had returned the gold rows before it
                      (the best result overlap reached 1.0: the right result was on screen).
4. `wrong_answer`     any other wrong answer.
   An episode that answered is classed by its answer; the rules below class the episodes that
   ran out of steps without one.
5. `unparsed`         at least half of its steps had no action line (`parsed` false).
6. `action_loop`      at least half of its steps, and at least two, repeat an earlier step's
                      action and argument (case and spacing ignored: the environment's rule for
                      a repeated action).
7. `sql_errors`       at least half of its steps are QUERYs that failed (an SQL error or a
                      sandbox refusal).
8. `budget_exhausted` any other episode without an answer.

Unparsed output falls back to QUERY and usually fails as SQL, so `unparsed` comes before
`sql_errors`; a loop of the same failing query is a loop first. The runner classifies each
episode as it finishes; a store classifies older episodes (the migration that added the
class) with the same `classify_episode`, reading the steps only where `needs_steps` says so.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from rollout_core.records import FailureClass, Outcome
from rollout_core.rewards import PROGRESS_SCALE

FAILURE_LABELS: dict[FailureClass, str] = {
    "correct": "correct",
    "wrong_after_gold": "wrong answer after the right result",
    "wrong_answer": "wrong answer",
    "sql_errors": "stuck on SQL errors",
    "unparsed": "unparsed output",
    "action_loop": "repeated-action loop",
    "budget_exhausted": "budget exhausted",
    "env_error": "environment error",
    "abandoned": "abandoned by its player",
}
"""How people read each class (tables, charts, filters)."""

MAJORITY = 0.5
"""A step kind marks an episode when it makes up at least this share of the steps."""
MIN_LOOP_REPEATS = 2
"""One repeated action is a hesitation; two or more in half the steps is a loop."""
# Progress rewards telescope to PROGRESS_SCALE x the best overlap; float sums of a few terms
# stay within 1e-12 of it, and the next possible overlap below 1.0 is further than 1e-6 away.
_GOLD_TOLERANCE = 1e-6


@dataclass(frozen=True, slots=True)
class StepFacts:
    """What the classifier reads from one step."""

    action: str | None
    """None for an imported or Recorder step that took no action."""
    argument: str | None
    parsed: bool
    error: str | None


class Acted(Protocol):
    """A step's action and argument: a record, a stored step or `StepFacts`."""

    @property
    def action(self) -> str | None: ...
    @property
    def argument(self) -> str | None: ...


def action_key(action: str | None, argument: str) -> tuple[str, str]:
    """What makes two actions the same: the kind and the argument, case and spacing ignored
    (a step that took no action: "" and its output)."""
    return action or "", " ".join(argument.split()).lower()


def needs_steps(outcome: Outcome) -> bool:
    """Whether classifying an episode with this outcome reads its steps (only without an
    answer: every other class follows from the outcome and whether the gold rows were seen)."""
    return outcome == "budget_exhausted"


def gold_seen_from_progress(progress: float | None) -> bool:
    """Whether a QUERY returned the gold rows, from an episode's stored progress reward (the
    progress rewards sum to PROGRESS_SCALE x the best overlap reached)."""
    return progress is not None and progress >= PROGRESS_SCALE * (1.0 - _GOLD_TOLERANCE)


def classify_episode(
    outcome: Outcome, steps: Sequence[StepFacts], *, gold_seen: bool
) -> FailureClass:
    """The failure class of a finished episode (rules in this module's docstring).

    `gold_seen`: a QUERY's result equalled the gold rows (best overlap 1.0). `steps` in order;
    only read when `needs_steps(outcome)`.
    """
    if outcome == "error":
        return "env_error"
    if outcome == "abandoned":
        return "abandoned"
    if outcome == "correct":
        return "correct"
    if outcome == "wrong":
        return "wrong_after_gold" if gold_seen else "wrong_answer"
    n = len(steps)
    if n == 0:
        return "budget_exhausted"
    if _share(sum(not s.parsed for s in steps), n):
        return "unparsed"
    repeats = repeated_actions(steps)
    if repeats >= MIN_LOOP_REPEATS and _share(repeats, n):
        return "action_loop"
    if _share(sum(s.action == "QUERY" and s.error is not None for s in steps), n):
        return "sql_errors"
    return "budget_exhausted"


def _share(count: int, total: int) -> bool:
    return count >= MAJORITY * total


def repeated_actions(steps: Iterable[Acted]) -> int:
    """Steps whose action and argument an earlier step already took (a step that took no
    action repeats none)."""
    seen: set[tuple[str, str]] = set()
    repeats = 0
    for s in steps:
        if s.action is None or s.argument is None:
            continue
        key = action_key(s.action, s.argument)
        repeats += key in seen
        seen.add(key)
    return repeats
