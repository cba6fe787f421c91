"""Which questions flipped during training: right at the first step a question was drawn and
wrong at its last, or the reverse."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from app.dashboard.analysis import SOLVED_RATE
from storage.training import TrainingStep


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

    @property
    def question_ids(self) -> list[str]:
        """The flipped questions' ids."""
        return [f.question_id for f in (*self.to_wrong, *self.to_right)]

    def with_texts(self, texts: Mapping[str, str]) -> Flips:
        """These flips with their questions' texts (question id -> text)."""

        def named(flips: list[QuestionFlip]) -> list[QuestionFlip]:
            return [dataclasses.replace(f, question=texts.get(f.question_id, "")) for f in flips]

        return Flips(self.questions, named(self.to_wrong), named(self.to_right))


def flips_of(steps: Iterable[TrainingStep]) -> Flips:
    """The flips among a training run's steps (all of them), largest change first, without
    the questions' texts (`Flips.with_texts`).

    A question is right at a step as on Compare and the question map: with at least
    `SOLVED_RATE` of its samples there correct.
    """
    by_question: dict[str, dict[int, tuple[int, int]]] = {}
    for s in steps:
        for d in s.drawn:
            by_question.setdefault(d.question_id, {})[s.train_step] = (d.correct, d.episodes)
    found = Flips(questions=sum(len(drawn) > 1 for drawn in by_question.values()))
    for qid, drawn in by_question.items():
        if len(drawn) < 2:
            continue
        first, last = min(drawn), max(drawn)
        (first_correct, first_n), (last_correct, last_n) = drawn[first], drawn[last]
        flip = QuestionFlip(qid, "", first, first_correct, first_n, last, last_correct, last_n)
        right_first, right_last = flip.rate_first >= SOLVED_RATE, flip.rate_last >= SOLVED_RATE
        if right_first and not right_last:
            found.to_wrong.append(flip)
        elif right_last and not right_first:
            found.to_right.append(flip)
    for flips in (found.to_wrong, found.to_right):
        flips.sort(key=lambda f: (-abs(f.rate_last - f.rate_first), f.question_id))
    return found
