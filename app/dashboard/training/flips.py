"""Which questions flipped during training: right at the first step a question was drawn and
wrong at its last, or the reverse."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from app.dashboard.analysis import SOLVED_RATE
from storage.read_models import GroupStats


@dataclass(frozen=True, slots=True)
class QuestionFlip:
    """A question's samples at the first and the last training step that drew it."""

    question_id: str
    question: str
    first_step: int
    first_correct: int
    first_samples: int
    last_step: int
    last_correct: int
    last_samples: int

    @property
    def rate_first(self) -> float:
        return self.first_correct / self.first_samples

    @property
    def rate_last(self) -> float:
        return self.last_correct / self.last_samples


@dataclass(frozen=True, slots=True)
class Flips:
    """The questions drawn at two training steps or more, and those whose result changed."""

    questions: int
    """Questions drawn at two training steps or more (the others cannot flip)."""
    to_wrong: list[QuestionFlip] = field(default_factory=list)
    """Right at the first step (a success rate of at least `SOLVED_RATE`), not at the last."""
    to_right: list[QuestionFlip] = field(default_factory=list)


def flips_of(groups: Iterable[GroupStats], texts: Mapping[str, str]) -> Flips:
    """The flips among a training run's groups (all of them), largest change first.

    A question's groups at one step are counted together; a question is right at a step as
    on Compare and the question map: with at least `SOLVED_RATE` of its samples correct.
    """
    by_question: dict[str, dict[int, list[int]]] = {}
    for g in groups:
        if g.key.train_step is None:
            continue
        counts = by_question.setdefault(g.key.question_id, {}).setdefault(g.key.train_step, [0, 0])
        counts[0] += g.correct
        counts[1] += g.size
    found = Flips(questions=sum(len(steps) > 1 for steps in by_question.values()))
    for qid, steps in by_question.items():
        if len(steps) < 2:
            continue
        first, last = min(steps), max(steps)
        (first_correct, first_n), (last_correct, last_n) = steps[first], steps[last]
        flip = QuestionFlip(
            qid, texts.get(qid, ""), first, first_correct, first_n, last, last_correct, last_n
        )
        right_first, right_last = flip.rate_first >= SOLVED_RATE, flip.rate_last >= SOLVED_RATE
        if right_first and not right_last:
            found.to_wrong.append(flip)
        elif right_last and not right_first:
            found.to_right.append(flip)
    for flips in (found.to_wrong, found.to_right):
        flips.sort(key=lambda f: (-abs(f.rate_last - f.rate_first), f.question_id))
    return found
