"""Rewards: the answer reward, the shaped QUERY progress reward and the error penalty.

    reward(ANSWER)  = 1.0 if correct else 0.0
    reward(QUERY)   = PROGRESS_SCALE * max(0, overlap(result, gold) - best overlap so far)
                      + ERROR_PENALTY if the query failed
    reward(other)   = ERROR_PENALTY if the action failed (unknown table), else 0.0

`overlap` is the F1 of the result rows against the gold rows, compared as multisets of
normalised rows, so it lies in [0, 1]; because only increases over the best-so-far pay, the
progress rewards of one episode sum to at most PROGRESS_SCALE (0.1), far below a correct answer.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

ANSWER_CORRECT = 1.0
ANSWER_WRONG = 0.0
PROGRESS_SCALE = 0.1
ERROR_PENALTY = -0.01


def _norm_cell(value: Any) -> Any:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        number = float(value)
        return round(number, 4) if math.isfinite(number) else str(number)
    if isinstance(value, bytes):
        return value.hex()
    if value is None:
        return None
    text = str(value).strip().lower()
    try:
        number = float(text)
    except ValueError:
        return text
    return round(number, 4) if math.isfinite(number) else text


def _norm_rows(rows: Iterable[Sequence[Any]]) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(_norm_cell(c) for c in row) for row in rows)


def overlap(result_rows: Sequence[Sequence[Any]], gold_rows: Sequence[Sequence[Any]]) -> float:
    """F1 of result rows against gold rows (multisets of normalised rows), in [0, 1]."""
    if not gold_rows and not result_rows:
        return 1.0
    if not gold_rows or not result_rows:
        return 0.0
    got, want = _norm_rows(result_rows), _norm_rows(gold_rows)
    common = sum((got & want).values())
    return 2 * common / (sum(got.values()) + sum(want.values()))


def progress_reward(new_overlap: float, best_so_far: float) -> float:
    """The shaped reward for a QUERY whose result reached `new_overlap`."""
    return PROGRESS_SCALE * max(0.0, new_overlap - best_so_far)
