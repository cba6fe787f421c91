"""Compare's numbers: each run against the baseline on the questions both played, and which
questions the runs differ on, with one definition of each for the whole page."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from app.dashboard import analysis
from app.dashboard.analysis import BootstrapInterval, HasCells, Row
from app.plural import counted
from storage.read_models import IdApart, QuestionComparison, QuestionOutcomes, RunKey

MIN_CI_QUESTIONS = 5
"""Fewest shared questions a bootstrap interval is given for: over fewer, its resamples take a
handful of values and the interval says nothing the difference does not."""


@dataclass(frozen=True, slots=True)
class Pairing:
    """A run against the baseline over the questions both played. Accuracy is the mean
    success rate per question (a question counts once, however many samples it has), so the
    difference of the two is the centre of the paired-bootstrap interval."""

    base_id: RunKey
    run_id: RunKey
    question_ids: frozenset[str]
    base: float | None
    """The baseline's accuracy on these questions; None when there are none."""
    run: float | None
    interval: BootstrapInterval | None
    """run - base with its interval; None when they share no question."""

    @property
    def questions(self) -> int:
        return len(self.question_ids)

    @property
    def delta(self) -> float | None:
        """The one estimate of run - base the page shows."""
        return None if self.interval is None else self.interval.diff


def pairing(rows: Sequence[HasCells], base: RunKey, run: RunKey) -> Pairing:
    """`run` against `base` over the questions both finished."""
    both, rates_base, rates_run = analysis.paired_questions(rows, base, run)
    interval = analysis.bootstrap_accuracy_diff(rates_base, rates_run)
    return Pairing(
        base,
        run,
        frozenset(r.question_id for r in both),
        float(rates_base.mean()) if both else None,
        float(rates_run.mean()) if both else None,
        interval,
    )


def solved(row: HasCells, run_id: RunKey) -> bool | None:
    """Whether the run solves the question (half or more of its samples correct, as the
    outcome matrix counts); None when it did not play it."""
    cell = row.cells.get(run_id)
    if cell is None or cell.success_rate is None:
        return None
    return cell.success_rate >= analysis.SOLVED_RATE


def played_by(row: HasCells, run_ids: Sequence[RunKey]) -> int:
    """How many of the runs played the question."""
    return sum(solved(row, i) is not None for i in run_ids)


DIFFERS_LEGEND = "≠: one run solves the question (half or more of its samples right), another not"
"""What the ≠ beside a question means, wherever Compare marks one."""


def runs_differ(row: HasCells, run_ids: Sequence[RunKey]) -> bool:
    """Whether one of the runs solves the question and another that played it does not."""
    return len({s for i in run_ids if (s := solved(row, i)) is not None}) > 1


def shared_first(rows: Sequence[Row], run_ids: Sequence[RunKey]) -> list[Row]:
    """The questions all the runs played first, then those fewer played (in their order)."""
    return sorted(rows, key=lambda r: -played_by(r, run_ids))


Rows = TypeVar("Rows", QuestionOutcomes, QuestionComparison)


def leave_apart(rows: Sequence[Rows], ids_apart: Sequence[IdApart]) -> list[Rows]:
    """The rows without the cell of each side whose episodes ask another question under the
    id than the side it is set against: the id pairs only the sides that ask one question."""
    apart: dict[str, set[RunKey]] = {}
    for a in ids_apart:
        apart.setdefault(a.question_id, set()).add(a.key)
    return [
        row
        if row.question_id not in apart
        else dataclasses.replace(
            row, cells={k: c for k, c in row.cells.items() if k not in apart[row.question_id]}
        )
        for row in rows
    ]


def apart_between(ids_apart: Sequence[IdApart], key: RunKey, against: RunKey) -> list[IdApart]:
    """The ids on which `key` asks another question than `against`."""
    return [a for a in ids_apart if a.key == key and a.against == against]


QUOTED_CHARS = 60
"""Characters of a question quoted in the line about ids apart (a prompt can be pages)."""


def ids_apart_line(
    apart: Sequence[IdApart],
    side: str,
    against: str,
    shown: Callable[[str], str],
    fate: str = "left out",
) -> str:
    """What Compare says of the ids it leaves out between two sides, in the terminal and on
    the page alike (`fate`: what the page does with them instead); `shown` makes a name or a
    question safe to show there."""
    first = apart[0]
    ids = counted(len(apart), "question id")
    verb = "names" if len(apart) == 1 else "name"
    return (
        f"{ids} {verb} different questions in {shown(side)} and {shown(against)} (the first: "
        f"{shown(first.question_id)}, '{shown(_clipped(first.question))}' against "
        f"'{shown(_clipped(first.against_question))}'): {fate}; give the questions ids of "
        "their own"
    )


def _clipped(question: str) -> str:
    """The question on one line, its first `QUOTED_CHARS` characters."""
    line = " ".join(question.split())
    return line if len(line) <= QUOTED_CHARS else line[: QUOTED_CHARS - 1] + "…"
