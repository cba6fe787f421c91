"""Numbers the pages show: paired bootstrap, outcome matrix, first divergent step, shared-question
accuracy, accuracy intervals, the best run per dataset."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, TypeVar

import numpy as np

from rollout_core.errors import SpecError
from rollout_core.failure_classes import action_key
from rollout_core.records import RunSpec
from storage.read_models import RunCell, RunKey, RunSummary, StoredStep

Cell = Literal["both right", "only A", "only B", "both wrong"]
CELLS: tuple[Cell, ...] = ("both right", "only A", "only B", "both wrong")
BOOTSTRAP_SEED = 0
BOOTSTRAP_RESAMPLES = 2000
SOLVED_RATE = 0.5
"""With several samples per question, a run solves a question with at least this success rate."""


class HasCells(Protocol):
    """A question's per-run results: `QuestionComparison` or the compact `QuestionOutcomes`."""

    @property
    def question_id(self) -> str: ...
    @property
    def cells(self) -> Mapping[RunKey, RunCell]: ...


Row = TypeVar("Row", bound=HasCells)


@dataclass(frozen=True, slots=True)
class BootstrapInterval:
    """A difference of means with its percentile confidence interval."""

    diff: float
    low: float
    high: float
    n: int
    """Number of paired questions."""


def paired_questions(
    rows: Sequence[Row], run_a: RunKey, run_b: RunKey
) -> tuple[list[Row], np.ndarray, np.ndarray]:
    """Questions both runs played, with each run's success rate on them."""
    both = [r for r in rows if _played(r, run_a) and _played(r, run_b)]
    a = np.array([_rate(r, run_a) for r in both], dtype=float)
    b = np.array([_rate(r, run_b) for r in both], dtype=float)
    return both, a, b


def bootstrap_accuracy_diff(
    a: np.ndarray,
    b: np.ndarray,
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    level: float = 0.95,
) -> BootstrapInterval | None:
    """Mean of b - a over questions, with a paired bootstrap interval; None without pairs."""
    if len(a) != len(b):
        raise ValueError(f"paired samples differ in length ({len(a)} vs {len(b)})")
    n = len(a)
    if n == 0:
        return None
    diffs = b - a
    rng = np.random.default_rng(seed)
    # Resampling questions (not episodes) keeps each question's pair together.
    idx = rng.integers(0, n, size=(resamples, n))
    means = diffs[idx].mean(axis=1)
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return BootstrapInterval(float(diffs.mean()), float(low), float(high), n)


def outcome_cell(rate_a: float, rate_b: float) -> Cell:
    """Where a question falls; with several samples a run 'solves' it with >= half correct."""
    right_a, right_b = rate_a >= SOLVED_RATE, rate_b >= SOLVED_RATE
    if right_a and right_b:
        return "both right"
    if right_a:
        return "only A"
    if right_b:
        return "only B"
    return "both wrong"


def outcome_matrix(rows: Sequence[Row], run_a: RunKey, run_b: RunKey) -> dict[Cell, list[Row]]:
    """The paired questions grouped by the four outcome cells."""
    both, a, b = paired_questions(rows, run_a, run_b)
    cells: dict[Cell, list[Row]] = {c: [] for c in CELLS}
    for row, ra, rb in zip(both, a, b, strict=True):
        cells[outcome_cell(float(ra), float(rb))].append(row)
    return cells


def steps_before(step: int) -> str:
    """The steps a fork at `step` replays, in words: `step 1`, `steps 1-3`."""
    return "no step" if step <= 1 else "step 1" if step == 2 else f"steps 1-{step - 1}"


def fork_source(run: RunSummary) -> int | None:
    """The id of the run a fork run continues; None for any other run."""
    if run.kind != "fork":
        return None
    try:
        fork = RunSpec.from_stored(run.spec).fork
    except SpecError:
        return None
    return None if fork is None else fork.source_run_id


def first_divergence(trajectories: Sequence[Sequence[StoredStep]]) -> int | None:
    """Index (0-based) of the first step where the trajectories differ; None when identical."""
    if len(trajectories) < 2:
        return None
    longest = max(len(t) for t in trajectories)
    for i in range(longest):
        keys = {_step_key(t[i]) if i < len(t) else None for t in trajectories}
        if len(keys) > 1:
            return i
    return None


def _step_key(step: StoredStep) -> tuple[str, str]:
    return action_key(step.action, step.acted_on)


def _played(row: HasCells, run_id: RunKey) -> bool:
    cell = row.cells.get(run_id)
    return cell is not None and cell.episodes > 0


def _rate(row: HasCells, run_id: RunKey) -> float:
    return row.cells[run_id].correct / row.cells[run_id].episodes


# -- shared questions and run quality ------------------------------------------------------------


def same_questions(rows: Sequence[HasCells], a: RunKey, b: RunKey) -> bool:
    """Whether the two runs finished exactly the same questions (and at least one)."""
    qa = {r.question_id for r in rows if _played(r, a)}
    qb = {r.question_id for r in rows if _played(r, b)}
    return bool(qa) and qa == qb


def wilson_interval(correct: int, n: int, z: float = 1.96) -> tuple[float, float] | None:
    """95% Wilson score interval of a proportion (sound at 0 and n, unlike the normal one);
    None without trials. Episodes are counted as independent trials."""
    if n <= 0:
        return None
    p = correct / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * float(np.sqrt(p * (1 - p) / n + z * z / (4 * n * n))) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


BASELINE_POLICIES = ("oracle", "random")
"""Scripted baselines: the oracle bounds a dataset from above, so it is never the best model."""


def best_runs(runs: Sequence[RunSummary]) -> set[int]:
    """Per dataset played to the end by two or more model runs, the run(s) with the highest
    accuracy (ties broken by mean reward); runs still playing or cut short are not candidates,
    nor runs that name no dataset (an import without --questions: its questions are its own)."""
    by_dataset: dict[str, list[RunSummary]] = {}
    for r in runs:
        if (
            r.dataset
            and r.accuracy is not None
            and r.status == "completed"
            and r.policy not in BASELINE_POLICIES
        ):
            by_dataset.setdefault(r.dataset, []).append(r)
    best: set[int] = set()
    for group in by_dataset.values():
        if len(group) < 2:
            continue
        top = max((r.accuracy or 0.0, r.mean_reward or 0.0) for r in group)
        best.update(r.id for r in group if (r.accuracy or 0.0, r.mean_reward or 0.0) == top)
    return best
