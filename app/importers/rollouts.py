"""One rollout as another framework (or a loop of one's own) gives it, and the records it
becomes: the adapter between other people's rollouts and the one sink.

Every importer reads its files into `Rollout`s, and the Recorder builds them from what a loop
hands it; `Numbering` gives each its place in the run (sample index, GRPO group) and
`episode_records` makes the start, step and finish records the sink writes, so an imported
episode reads as one rollscope played: turns become steps with their actions, the file's score
is the episode's reward, its reward columns are kept by name.
"""

from __future__ import annotations

import hashlib
import math
import re
import time
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING

from app.importers.turns import Turn, asked_question, turn_action
from rollout_core.actions import SQLAction
from rollout_core.failure_classes import StepFacts, classify_episode, gold_seen_from_progress
from rollout_core.keys import key_problem
from rollout_core.records import (
    ChatMessage,
    EpisodeRecord,
    EpisodeStart,
    Outcome,
    Regrade,
    SourceRow,
    StepRecord,
)
from storage.training import counters

if TYPE_CHECKING:
    from storage.store import Store

CORRECT_AT = 1.0
"""A rollout whose file gives no correctness counts as correct when its reward is at least
this (the usual 1 of a rule-based reward); `--correct-at` changes it."""


@dataclass(slots=True)
class Rollout:
    """One rollout before it is an episode: what the model was asked, its turns, its rewards."""

    prompt: Sequence[ChatMessage]
    """The messages before the model's first turn (a decoded prompt as one user message)."""
    turns: Sequence[Turn]
    question: str
    """The question: the prompt's last user message, unless the file names it."""
    reward: float
    """The rollout's total reward as the file gives it (its score)."""
    rewards: Mapping[str, float] = field(default_factory=dict)
    """Every reward column or function of the file, by its own name."""
    correct: bool | None = None
    """The file's own verdict, when it has one (rLLM's `is_correct`)."""
    question_id: str | None = None
    """The question's id, when the file names one."""
    db_id: str = ""
    gold_sql: str = ""
    """The reference SQL, when the file holds it (verl's `gts`, SkyRL's ground truth)."""
    train_step: int | None = None
    group: Hashable | None = None
    """The framework's own group id (a uid), when it writes one; else the group is the
    question's samples at the step."""
    model: str | None = None
    step_rewards: Sequence[float] | None = None
    """A reward per turn, when the file has them (rLLM); else the total is the last step's."""
    truncated: bool | None = None
    """The last turn was cut at the trainer's length limit, as the file says (SkyRL's
    `stop_reason` "length", verifiers' `is_truncated`, rLLM's termination reason); None where
    it says nothing (TRL's and verl's files)."""
    seconds: float | None = None
    """How long the rollout took, when its producer timed it (verifiers' and rLLM's timing, a
    Recorder's loop)."""
    turn_seconds: Sequence[tuple[float | None, float | None]] | None = None
    """Each turn's (model, environment) seconds, one pair a turn, when the file times each turn
    (verifiers' timing spans, rLLM's step timing)."""
    tokens_out: int | None = None
    """Tokens the model wrote over the rollout, when the file counts them (verifiers'
    `token_usage`, a v1 trace's calls)."""
    mean_logprob: float | None = None
    """Mean log-probability of those tokens, when the file holds each token's (a v1 trace a
    trainer sampled)."""
    error: str | None = None
    """Why the rollout failed, when the file says it did (verifiers' `error`, rLLM's `error`
    or `timeout` termination)."""
    agent: str | None = None
    """The agent whose trace it is, when the file names one (a v1 episode's line holds one a
    trained agent)."""
    advantage: float | None = None
    """The advantage the trainer gave the rollout, when the file holds it (TRL's)."""

    def __post_init__(self) -> None:
        # Checked here, where every reader (and the Recorder) makes its rollouts: the store
        # keys on these names, and a write of one it cannot keep would fail its whole batch.
        if not math.isfinite(self.reward):  # readers check each reward: this is their sum
            raise ValueError(f"its rewards sum to {self.reward}, past what a float holds")
        if self.question_id is not None and (problem := key_problem(self.question_id)):
            raise ValueError(f"question_id {problem}")
        if problem := key_problem(self.db_id):
            raise ValueError(f"db_id {problem}")
        for name in self.rewards:
            if problem := key_problem(name):
                raise ValueError(f"the reward named {name[:40]!r} {problem}")


@dataclass(frozen=True, slots=True)
class Checked:
    """What rollscope found by running an episode's SQL again (`--questions`)."""

    observations: Mapping[int, str]
    """Step number -> observation, for the steps whose observation the file lacked."""
    errors: Mapping[int, str | None]
    """Step number -> the error of the step's action when run again."""
    progress: float | None
    """The episode's progress reward in rollscope's environment; None when its question
    could not be played there."""
    operational: float | None
    regraded: Regrade | None


# A group's samples ask one question, one after the other: its key is made once, not per sample.
@lru_cache(maxsize=4096)
def question_key(text: str) -> str:
    """The question's id when the file names none: from its text, normalised (case, spaces),
    so that the same question gets the same id in every run."""
    normal = " ".join(text.split()).casefold()
    return "q-" + hashlib.sha1(normal.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def ids_by_text(questions: Iterable[tuple[str, str]]) -> dict[str, str]:
    """`question_key` of a text -> the id the store knows it by, for texts with one id only
    (the same text under two ids, say in two datasets, is no match)."""
    found: dict[str, str | None] = {}
    for text, qid in questions:
        key = question_key(text)
        found[key] = qid if found.get(key, qid) == qid else None
    return {k: v for k, v in found.items() if v is not None}


def match_by_text(store: Store, run_id: int, own_ids: Mapping[str, str]) -> tuple[int, int]:
    """Give a run's episodes held under an id made from a question's text (`question_key`)
    the id rollscope's own runs know that text by (`own_ids`, from `ids_by_text`), as an
    episode recorded now would take it: Compare and the Question map line the runs up
    whichever came first. (questions, episodes) moved."""
    renamed = {
        qid: own for qid in store.run_question_ids(run_id) if (own := own_ids.get(qid, qid)) != qid
    }
    return len(renamed), store.rekey_questions(run_id, renamed)


class OwnQuestions:
    """The ids rollscope's own runs know questions by (`ids_by_text`), for a run fed as it
    goes (an import, a follow, a Recorder): read again, and the run's earlier episodes
    matched to them, when those runs have played more."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._mark = store.own_runs_mark()
        self.ids = ids_by_text(store.own_questions())
        self._next_read = 0.0

    def id_of(self, key: str) -> str:
        """The id for a question whose text gives `key` (`question_key`): theirs, or the key."""
        return self.ids.get(key, key)

    def refresh(self) -> bool:
        """Read the ids again if rollscope's runs played more since; whether they did."""
        # The runs table says whether they did. Their questions, read whole, can take seconds
        # in a large store, and a run playing beside a Recorder changes the table every
        # second: at most a tenth of the time goes to reading them.
        if time.monotonic() < self._next_read:
            return False
        mark = self.store.own_runs_mark()
        if mark == self._mark:
            return False
        started = time.monotonic()
        self._mark = mark
        self.ids = ids_by_text(self.store.own_questions())
        self._next_read = started + 10 * (time.monotonic() - started)
        return True

    def match(self, run_id: int) -> tuple[int, int]:
        """`match_by_text` for the run: (questions, episodes) moved to these ids."""
        return match_by_text(self.store, run_id, self.ids)


RECENT_STEPS = 8
"""Training steps whose groups `Numbering` keeps in memory."""


class Numbering:
    """Where each new episode of a run goes: a sample index per question over the run, a
    GRPO group per question (or framework group) at each training step, numbered over the
    run. Groups of a step already in the store are found there (`known_groups`)."""

    def __init__(
        self,
        next_sample: dict[str, int],
        next_group: int,
        known_groups: Callable[[int], Mapping[str, int]],
    ) -> None:
        self._next_sample = next_sample
        self._next_group = next_group
        self._known_groups = known_groups
        self._step: int | None = None
        self._steps: dict[int, _StepGroups] = {}
        """The groups of the last `RECENT_STEPS` steps, least recently used first."""

    @classmethod
    def of_run(cls, store: Store, run_id: int) -> Numbering:
        """Where the run's next episodes go, after those the store holds."""
        numbers = counters(store, run_id)
        return cls(
            numbers.next_sample, numbers.next_group, lambda step: store.step_groups(run_id, step)
        )

    def sample(self, question_id: str) -> int:
        index = self._next_sample.get(question_id, 0)
        self._next_sample[question_id] = index + 1
        return index

    def group(self, train_step: int | None, question_id: str, group: Hashable | None) -> int | None:
        """The episode's GRPO group; None without a training step (its question's samples
        are its group, as in a batch run)."""
        if train_step is None:
            return None
        groups = self._groups_at(train_step)
        key = (question_id, group)
        found = groups.found.get(key)
        if found is None:
            found = groups.stored.pop(question_id, None) if reads_on(group) else None
            if found is None:
                found = self._next_group
                self._next_group += 1
            groups.found[key] = found
        return found

    def _groups_at(self, train_step: int) -> _StepGroups:
        if train_step != self._step:
            # Files come in step order, but a loop's rollouts may come back late: a few
            # recent steps' groups are kept (memory stays flat), older ones read back.
            groups = self._steps.pop(train_step, None)
            if groups is None:
                if len(self._steps) >= RECENT_STEPS:
                    del self._steps[next(iter(self._steps))]
                groups = _StepGroups(stored=dict(self._known_groups(train_step)))
            self._steps[train_step] = groups
            self._step = train_step
        return self._steps[train_step]


@dataclass(slots=True)
class _StepGroups:
    """A training step's GRPO groups: those given here, by (question, framework group id),
    and those the store held, by question, each read on into by the first rollout of its
    question that comes (an import started again, a Recorder resumed)."""

    found: dict[tuple[str, Hashable], int] = field(default_factory=dict)
    stored: dict[str, int] = field(default_factory=dict)
    """The store keeps a question's last group at the step, not the framework's id for it:
    of a question with several framework groups at a step, the first to come reads on."""


REWRITTEN = "rewritten file"
"""What the importer's group key of a rollout from a rewritten file begins with (its
`_REWRITE`): `(REWRITTEN, group)`."""


def reads_on(group: Hashable | None) -> bool:
    """Whether rollouts under this group key join their question's group the store holds at
    the step: a rewritten file's are another play of the step, in groups of their own."""
    return not (isinstance(group, tuple) and group[:1] == (REWRITTEN,))


def episode_records(
    rollout: Rollout,
    question_id: str,
    sample_index: int,
    group_index: int | None,
    *,
    source: SourceRow | None = None,
    checked: Checked | None = None,
    correct_at: float = CORRECT_AT,
    actions: Sequence[SQLAction] | None = None,
) -> tuple[EpisodeStart, list[StepRecord], EpisodeRecord]:
    """The records of one rollout, written together (`actions`: its turns' actions, when
    the caller has them already)."""
    start = EpisodeStart(
        question_id,
        sample_index,
        None,
        rollout.db_id,
        # As a person reads it: a templated prompt's question, not its schema and rules.
        asked_question(rollout.question),
        rollout.gold_sql,
        train_step=rollout.train_step,
        group_index=group_index,
        sql_run_here=checked is not None and checked.progress is not None,
    )
    turns = rollout.turns
    last = len(turns) - 1
    if actions is None:
        actions = turn_actions(turns)
    step_rewards = rollout.step_rewards
    if step_rewards is None or len(step_rewards) != len(turns):
        step_rewards = [0.0] * last + [rollout.reward] if turns else []
    prompt: tuple[ChatMessage, ...] = tuple(rollout.prompt)
    steps: list[StepRecord] = []
    facts: list[StepFacts] = []
    timed = rollout.turn_seconds
    if timed is None or len(timed) != len(turns):
        timed = [(None, None)] * len(turns)
    for i, (turn, action, reward, (model_seconds, env_seconds)) in enumerate(
        zip(turns, actions, step_rewards, timed, strict=True)
    ):
        n = i + 1
        observation = turn.reply
        error = None
        if checked is not None:
            observation = checked.observations.get(n, observation)
            error = checked.errors.get(n)
        # A turn without an action took none: nothing ran its text as a QUERY here.
        kind, argument = (action.action_type, action.argument) if action.parsed else (None, None)
        steps.append(
            StepRecord(
                question_id,
                sample_index,
                step_no=n,
                prompt=prompt,
                raw_output=turn.output,
                action=kind,
                argument=argument,
                parsed=action.parsed,
                observation=observation,
                error=error,
                reward=float(reward),
                done=i == last,
                # Files tell how the last turn ended; an earlier turn's cut is not known.
                truncated=rollout.truncated if i == last else None,
                policy_seconds=model_seconds,
                env_seconds=env_seconds,
            )
        )
        facts.append(StepFacts(kind, argument, action.parsed, error))
        prompt = prompt + tuple(turn.messages)
    answered = bool(actions) and actions[-1].action_type == "ANSWER"
    outcome = _outcome(rollout, answered, correct_at)
    # rollscope's own shaping signals: known only for an episode whose SQL it ran again.
    progress = checked.progress if checked is not None else None
    operational = checked.operational if checked is not None else None
    finish = EpisodeRecord(
        question_id,
        sample_index,
        outcome=outcome,
        reward=float(rollout.reward),
        progress=progress,
        operational=operational,
        steps=len(steps),
        answer=actions[-1].argument if answered else None,
        duration_seconds=rollout.seconds,
        tokens_out=rollout.tokens_out,
        mean_logprob=rollout.mean_logprob,
        error=rollout.error,
        failure_class=classify_episode(outcome, facts, gold_seen=gold_seen_from_progress(progress)),
        rewards=dict(rollout.rewards) or None,
        trainer_advantage=rollout.advantage,
        source=source,
    )
    return start, steps, finish


def turn_actions(turns: Sequence[Turn]) -> list[SQLAction]:
    """The action each turn took (the last one ends the rollout)."""
    last = len(turns) - 1
    actions = [turn_action(t, final=i == last) for i, t in enumerate(turns)]
    if not turns or actions[-1].parsed or turns[-1].reply is not None:
        return actions
    answer = turns[-1].output.strip()
    if answer and any(t.tool_calls for t in turns):
        # In a tool-calling conversation the model's last message without a call is its
        # answer, whatever it says: the protocol's end of the model's turn, not a turn limit.
        actions[-1] = SQLAction("ANSWER", answer)
    return actions


def _outcome(rollout: Rollout, answered: bool, correct_at: float) -> Outcome:
    """An error where the file says the rollout failed; else correct by the file's own verdict
    (or its reward); otherwise wrong when the rollout ended on an answer or was one turn (a
    completion is its answer, whatever it holds), out of budget when its turns ended without
    one (the trainer's turn limit)."""
    if rollout.error is not None:
        return "error"
    correct = rollout.correct if rollout.correct is not None else rollout.reward >= correct_at
    if correct:
        return "correct"
    return "wrong" if answered or len(rollout.turns) <= 1 else "budget_exhausted"


def final_sql(action: SQLAction) -> bool:
    """Whether an ANSWER's argument is a SQL statement (graded by the rows it returns)."""
    return re.match(r"\s*(?:SELECT|WITH)\b", action.argument, re.I) is not None
