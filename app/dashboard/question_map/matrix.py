"""The question x checkpoint map: success rates as a matrix, flips between consecutive runs,
and each run's accuracy with a bootstrap confidence interval, from per-question counts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from app.dashboard.analysis import BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, SOLVED_RATE
from storage.read_models import OutcomeMatrix, RunKey

# Resamples drawn per block: bounds the count matrix at ~block x questions floats.
_BLOCK = 250


@dataclass(frozen=True)
class QuestionMap:
    """Success rates of runs (columns, in the order given) on questions (rows, easiest first:
    highest mean success rate over the runs that played them, then by id)."""

    run_ids: list[RunKey]
    """The runs, or training steps of runs, in the order given."""
    question_ids: list[str]
    rates: np.ndarray
    """(questions, runs) success rates; NaN where a run did not play the question."""
    episodes: np.ndarray
    """(questions, runs) finished episodes behind each rate."""
    asked: dict[str, str] = field(default_factory=dict)
    """Rows of a question id a run asks another question under than an earlier run: their
    label -> the question id (`OutcomeMatrix.asked`)."""

    def row(self, question_id: str) -> int:
        return self.question_ids.index(question_id)

    @property
    def complete(self) -> bool:
        """Every run played every question: no blank cell."""
        return not np.isnan(self.rates).any()


@dataclass(frozen=True)
class Flip:
    """A question solved by one run and not by the next (or the reverse)."""

    question_id: str
    rate_before: float
    rate_after: float


@dataclass(frozen=True)
class PairFlips:
    """What changed between two consecutive runs, over the questions both played."""

    run_before: RunKey
    run_after: RunKey
    regressions: list[Flip]
    """Solved before (success rate >= SOLVED_RATE), not after."""
    improvements: list[Flip]
    shared: int
    """Questions both runs played."""


@dataclass(frozen=True)
class AccuracyPoint:
    """A run's accuracy (mean success rate over the questions it played) with its interval."""

    run_id: RunKey
    accuracy: float | None
    low: float | None
    high: float | None
    questions: int


def build_map(matrix: OutcomeMatrix) -> QuestionMap:
    """The rate matrix of the runs (in the matrix's order) over every question it holds."""
    shape = (len(matrix.question_ids), len(matrix.run_ids))
    episodes = np.array(matrix.episodes, dtype=np.int64).reshape(shape)
    correct = np.array(matrix.correct, dtype=np.int64).reshape(shape)
    played = episodes > 0
    rates = np.where(played, correct / np.maximum(episodes, 1), np.nan)
    n_played = played.sum(axis=1)
    mean = np.where(
        n_played > 0, np.where(played, rates, 0.0).sum(axis=1) / np.maximum(n_played, 1), -1.0
    )
    # easiest first; a stable sort on -mean after ordering by id breaks ties by id
    qids = matrix.question_ids
    by_id = np.argsort(np.array(qids, dtype=object), kind="stable")
    order = by_id[np.argsort(-mean[by_id], kind="stable")]
    return QuestionMap(
        run_ids=list(matrix.run_ids),
        question_ids=[qids[i] for i in order],
        rates=rates[order],
        episodes=episodes[order],
        asked=matrix.asked,
    )


def played_by_all(qmap: QuestionMap) -> QuestionMap:
    """The map over only the questions every run played, in the same order."""
    keep = ~np.isnan(qmap.rates).any(axis=1)
    return QuestionMap(
        run_ids=qmap.run_ids,
        question_ids=[q for q, k in zip(qmap.question_ids, keep.tolist(), strict=True) if k],
        rates=qmap.rates[keep],
        episodes=qmap.episodes[keep],
        asked=qmap.asked,
    )


def flips(qmap: QuestionMap) -> list[PairFlips]:
    """Regressions and improvements between each run and the next."""
    out = []
    for j in range(len(qmap.run_ids) - 1):
        before, after = qmap.rates[:, j], qmap.rates[:, j + 1]
        both = ~np.isnan(before) & ~np.isnan(after)
        solved_before, solved_after = before >= SOLVED_RATE, after >= SOLVED_RATE
        lost = np.flatnonzero(both & solved_before & ~solved_after)
        gained = np.flatnonzero(both & ~solved_before & solved_after)
        out.append(
            PairFlips(
                run_before=qmap.run_ids[j],
                run_after=qmap.run_ids[j + 1],
                regressions=[_flip(qmap, int(i), j) for i in lost],
                improvements=[_flip(qmap, int(i), j) for i in gained],
                shared=int(both.sum()),
            )
        )
    return out


def _flip(qmap: QuestionMap, i: int, j: int) -> Flip:
    return Flip(qmap.question_ids[i], float(qmap.rates[i, j]), float(qmap.rates[i, j + 1]))


def accuracy_intervals(
    qmap: QuestionMap,
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    level: float = 0.95,
) -> list[AccuracyPoint]:
    """Each run's accuracy with a percentile bootstrap interval over questions.

    Questions (not episodes) are resampled, the same draws for every run, so a question's
    samples stay together and the runs' intervals are comparable. Each draw's question counts
    times the rate matrix gives every run's resampled accuracy in one product.
    """
    n, runs = qmap.rates.shape
    played = ~np.isnan(qmap.rates)
    filled = np.where(played, qmap.rates, 0.0)
    weights = played.astype(np.float64)
    complete = bool(played.all())  # then every draw's denominator is n
    points = [AccuracyPoint(r, None, None, None, 0) for r in qmap.run_ids]
    if n == 0:
        return points
    rng = np.random.default_rng(seed)
    means = np.empty((resamples, runs))
    for start in range(0, resamples, _BLOCK):
        b = min(_BLOCK, resamples - start)
        idx = rng.integers(0, n, size=(b, n)) + (np.arange(b) * n)[:, None]
        counts = np.bincount(idx.ravel(), minlength=b * n).reshape(b, n).astype(np.float64)
        if complete:
            means[start : start + b] = (counts @ filled) / n
        else:
            with np.errstate(invalid="ignore", divide="ignore"):
                means[start : start + b] = (counts @ filled) / (counts @ weights)
    tail = (1.0 - level) / 2.0
    out = []
    for j, run_id in enumerate(qmap.run_ids):
        k = int(played[:, j].sum())
        if k == 0:
            out.append(points[j])
            continue
        col = means[:, j]
        low, high = np.nanquantile(col, [tail, 1.0 - tail])
        out.append(AccuracyPoint(run_id, float(filled[:, j].sum() / k), float(low), float(high), k))
    return out


def first_with_flips(pairs: Sequence[PairFlips]) -> int:
    """The index of the first pair of runs with a flip; 0 when no pair has one."""
    return next((i for i, p in enumerate(pairs) if p.regressions or p.improvements), 0)
