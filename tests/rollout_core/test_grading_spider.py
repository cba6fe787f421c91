"""The oracle's answers on all Spider dev questions grade correct; perturbed ones do not."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rollout_core.gold import gold_result
from rollout_core.grading import GoldResult, format_answer, grade_answer
from rollout_core.sandbox import Sandbox


@pytest.fixture(scope="module")
def golds(spider: Path) -> list[tuple[str, str, GoldResult]]:
    """(question id, gold SQL, gold result) for every dev question."""
    questions = json.loads((spider / "questions.json").read_text(encoding="utf-8"))
    out = []
    with Sandbox() as sandbox:  # default limits, as a run gets them
        for q in questions:
            db = spider / "database" / q["db_id"] / f"{q['db_id']}.sqlite"
            # Raises GoldQueryError (naming the failure) on an error or a truncated result.
            out.append((q["id"], q["query"], gold_result(db, q["query"], sandbox)))
    return out


def test_all_questions_ran(golds: list[tuple[str, str, GoldResult]]) -> None:
    assert len(golds) == 972
    assert sum(1 for _, _, g in golds if not g.rows) == 49  # the empty results datasets.md lists


def test_oracle_answers_grade_correct(golds: list[tuple[str, str, GoldResult]]) -> None:
    misses = [
        (qid, sql, format_answer(g.rows, len(g.columns))[:120])
        for qid, sql, g in golds
        if not grade_answer(format_answer(g.rows, len(g.columns)), g)
    ]
    assert misses == [], f"{len(misses)} of {len(golds)} oracle answers graded wrong: {misses[:10]}"


def _changed(cell: Any) -> Any:
    """A value no grading rule can take for `cell`."""
    if cell is None:
        return "x"
    if isinstance(cell, bytes):
        return cell + b"zz"
    if isinstance(cell, int | float):
        return cell + 1 + abs(cell)
    return f"{cell}zz"


def _norm(rows: list[tuple[Any, ...]]) -> list[tuple[str, ...]]:
    return [tuple(str(c).strip().casefold() for c in row) for row in rows]


def test_perturbed_answers_grade_wrong(golds: list[tuple[str, str, GoldResult]]) -> None:
    wrongly_accepted = []
    for qid, _, g in golds:
        width = len(g.columns)
        perturbed: list[tuple[str, list[tuple[Any, ...]]]] = []
        if g.rows:
            first = g.rows[0]
            perturbed.append(("changed", [(_changed(first[0]), *first[1:]), *g.rows[1:]]))
            perturbed.append(("dropped", g.rows[1:]))
            perturbed.append(("extra", [*g.rows, g.rows[0]]))
        else:
            perturbed.append(("invented", [tuple(range(width))]))
        if g.ordered and _norm(g.rows[::-1]) != _norm(g.rows):
            perturbed.append(("reversed", g.rows[::-1]))
        for kind, rows in perturbed:
            if grade_answer(format_answer(rows, width), g):
                wrongly_accepted.append((qid, kind))
        if g.rows and grade_answer("no rows", g):
            wrongly_accepted.append((qid, "no rows"))
    assert wrongly_accepted == []
