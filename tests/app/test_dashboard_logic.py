"""The dashboard's statistics (app/dashboard/analysis.py): bootstrap, outcome matrix, divergence."""

from __future__ import annotations

import numpy as np
import pytest

from app.dashboard import analysis
from storage.read_models import QuestionComparison, RunCell, StoredStep

# -- analysis ------------------------------------------------------------------------------------


def _row(qid: str, a: tuple[int, int] | None, b: tuple[int, int] | None) -> QuestionComparison:
    cells = {}
    for run_id, res in ((1, a), (2, b)):
        if res is not None:
            cells[run_id] = RunCell(run_id, res[1], res[0], list(range(res[1])))
    return QuestionComparison(qid, "db", f"question {qid}", cells)


def test_bootstrap_is_seeded_and_brackets_the_mean_difference() -> None:
    rng = np.random.default_rng(1)
    a = (rng.random(200) < 0.4).astype(float)
    b = (rng.random(200) < 0.6).astype(float)
    ci = analysis.bootstrap_accuracy_diff(a, b)
    assert ci is not None and ci.n == 200
    assert ci.low < ci.diff < ci.high
    assert ci.diff == pytest.approx(b.mean() - a.mean())
    assert analysis.bootstrap_accuracy_diff(a, b) == ci


def test_bootstrap_of_identical_runs_is_a_zero_width_interval() -> None:
    a = np.array([1.0, 0.0, 1.0])
    ci = analysis.bootstrap_accuracy_diff(a, a.copy())
    assert ci is not None and (ci.low, ci.diff, ci.high) == (0.0, 0.0, 0.0)
    assert analysis.bootstrap_accuracy_diff(np.array([]), np.array([])) is None
    with pytest.raises(ValueError, match="differ in length"):
        analysis.bootstrap_accuracy_diff(a, a[:2])


def test_outcome_matrix_pairs_questions_and_uses_success_rates() -> None:
    rows = [
        _row("both", (1, 1), (1, 1)),
        _row("a", (1, 1), (0, 1)),
        _row("b", (2, 4), (4, 4)),  # 2/4 counts as solved
        _row("none", (0, 2), (1, 4)),
        _row("only-a-played", (1, 1), None),
    ]
    cells = analysis.outcome_matrix(rows, 1, 2)
    assert {k: [r.question_id for r in v] for k, v in cells.items()} == {
        "both right": ["both", "b"],
        "only A": ["a"],
        "only B": [],
        "both wrong": ["none"],
    }
    _, a, b = analysis.paired_questions(rows, 1, 2)
    assert a.tolist() == [1.0, 1.0, 0.5, 0.0] and b.tolist() == [1.0, 0.0, 1.0, 0.25]


def _steps(*actions: tuple[str, str]) -> list[StoredStep]:
    return [
        StoredStep(
            "q",
            0,
            step_no=i + 1,
            prompt=(),
            raw_output="",
            action=kind,
            argument=arg,  # type: ignore[arg-type]
            parsed=True,
            observation="",
            error=None,
            reward=0.0,
            done=False,
            id=i,
        )
        for i, (kind, arg) in enumerate(actions)
    ]


def test_first_divergence_ignores_whitespace_and_case_and_sees_length() -> None:
    a = _steps(("DESCRIBE", "singer"), ("QUERY", "SELECT 1"), ("ANSWER", "1"))
    b = _steps(("DESCRIBE", "Singer"), ("QUERY", "select  1"), ("ANSWER", "2"))
    assert analysis.first_divergence([a, b]) == 2
    assert analysis.first_divergence([a, a[:2]]) == 2
    assert analysis.first_divergence([a, a]) is None
    assert analysis.first_divergence([a]) is None
