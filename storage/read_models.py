"""What the store's read API returns: plain records for the CLI and the dashboard.

Lists return summaries; one episode's replay loads its steps (`EpisodeDetail`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, Literal, NamedTuple, TypeVar

from rollout_core.grpo import SignalSource, signal_source
from rollout_core.records import (
    FailureClass,
    Outcome,
    RunKind,
    RunStatus,
    StepRecord,
)

T = TypeVar("T")

EpisodeSort = Literal["id", "reward", "steps", "duration", "question_id"]


class RunStep(NamedTuple):
    """One training step of a run: the episodes a trainer played at that step."""

    run_id: int
    train_step: int

    def __str__(self) -> str:
        return f"{self.run_id}@{self.train_step}"


RunKey = int | RunStep
"""What Compare and the Question map set side by side: a whole run (its id), or one training
step of a run (an evaluation's checkpoint, where an imported run evaluated the same questions
at each step)."""


def run_of(key: RunKey) -> int:
    """The run a key names, or whose training step it names."""
    return key.run_id if isinstance(key, RunStep) else key


def side_label(name: str, train_step: int | None) -> str:
    """A run's name, and the training step a side of it is, if one."""
    return name if train_step is None else f"{name} @ step {train_step}"


TRAINING_KINDS: tuple[RunKind, ...] = ("training", "import", "env")
"""The kinds of run whose episodes may carry training steps and GRPO groups: an environment
server's too, whose trainer sends its step with each reset."""


@dataclass(frozen=True, slots=True)
class RunSummary:
    """One run with its metrics, as the Runs page and `rollscope runs` show it."""

    id: int
    name: str
    status: RunStatus
    """Stored status, except a `running` run with a stale heartbeat reads `interrupted`."""
    policy: str
    checkpoint: str | None
    checkpoint_fingerprint: str | None
    dataset: str | None
    """None where nothing names the benchmark (an import without `--questions`, a Recorder's)."""
    created_at: datetime
    started_at: datetime | None
    ended_at: datetime | None
    heartbeat_at: datetime | None
    episodes_planned: int | None
    """Questions x samples the run was asked for (an import's: the rows of the files begun);
    None where it sets out to play no number (an env server, a trainer's tools, a Recorder)."""
    episodes_finished: int
    correct: int
    accuracy: float | None
    """correct / finished; None when nothing finished."""
    mean_reward: float | None
    mean_steps: float | None
    parse_failure_rate: float | None
    """Share of steps whose output fell back to QUERY."""
    error: str | None
    """Why the run failed, when it did."""
    spec: dict[str, Any] = field(default_factory=dict)
    """The full RunSpec as stored (`RunSpec.from_stored` reads it back)."""
    host: str | None = None
    pid: int | None = None
    kind: RunKind = "batch"
    policy_info: dict[str, Any] | None = None
    """What the policy reported about itself (model class, size, device, dtype, fingerprint)."""
    errors: int = 0
    """Episodes that ended in `error` (a broken gold query, a grading failure)."""
    source_format: str | None = None
    """Where a run rollscope did not play comes from: an import's format (trl, verl, skyrl,
    rllm, verifiers, messages) or `recorder`; None for rollscope's own runs."""
    source_path: str | None = None
    """The file or folder an import read."""
    skipped_lines: int = 0
    """Malformed lines or rows an import left out."""
    train_step: int | None = None
    """Set when the figures (episodes, accuracy, reward, steps, parse failures) are those of
    one training step of the run, not the whole run's (`storage.training.run_at_step`)."""

    @property
    def key(self) -> RunKey:
        """The run's id, or the run and its step for the figures of one training step."""
        return self.id if self.train_step is None else RunStep(self.id, self.train_step)

    @property
    def label(self) -> str:
        """Its name, and the training step its figures are of, if any."""
        return side_label(self.name, self.train_step)

    @property
    def is_training(self) -> bool:
        """Whether its episodes may carry training steps and GRPO groups: a trainer's run, an
        import (whose files carry the step when their framework writes it), or an environment
        server's (whose clients send it when a trainer drives them)."""
        return self.kind in TRAINING_KINDS

    @property
    def played_here(self) -> bool:
        """Whether rollscope's environment played its steps: not an import's, nor a
        Recorder's (whose turns ran in another framework's environment, or nowhere)."""
        return self.source_format is None

    @property
    def plan(self) -> int | None:
        """The episodes the run set out to play; None where it set out to play no number. An
        environment server's does not (episodes come for as long as clients play), nor a
        trainer's tools, an import or a Recorder (an import's count so far is what its files
        gave: a followed training run has no end in view)."""
        return self.episodes_planned if self.episodes_planned and self.played_here else None

    @property
    def duration_seconds(self) -> float | None:
        if self.started_at is None:
            return None
        end = self.ended_at or self.heartbeat_at
        return None if end is None else (end - self.started_at).total_seconds()


@dataclass(frozen=True, slots=True)
class EpisodeFilter:
    """Filters of the episode list; every field is optional and they combine with AND."""

    run_ids: tuple[int, ...] = ()
    outcomes: tuple[Outcome, ...] = ()
    db_ids: tuple[str, ...] = ()
    question_id: str | None = None
    text: str | None = None
    """Substring searched in the question, the gold SQL and the model's outputs."""
    text_newest: int | None = None
    """With `text`: search only the newest this-many (by id) of the episodes the other filters
    select; None searches them all (a word no episode holds reads every output)."""
    min_reward: float | None = None
    max_reward: float | None = None
    min_steps: int | None = None
    max_steps: int | None = None
    min_train_step: int | None = None
    """Only episodes of this training step or a later one (an episode with none is left out)."""
    max_train_step: int | None = None
    has_sql_error: bool | None = None
    has_unparsed: bool | None = None
    finished_only: bool = True
    tags: tuple[str, ...] = ()
    """Episodes annotated (on the episode or any of its steps) with any of these tags."""
    failure_classes: tuple[FailureClass, ...] = ()
    min_id: int | None = None
    """Only episodes with this id or a later one."""


@dataclass(frozen=True, slots=True)
class EpisodeSummary:
    """One row of the episode list."""

    id: int
    run_id: int
    run_name: str
    question_id: str
    sample_index: int
    db_id: str | None
    """None where nothing names the database (an import's, a Recorder's)."""
    question: str
    outcome: Outcome | None
    """None while the episode is still being played."""
    reward: float | None
    steps: int
    duration_seconds: float | None
    has_sql_error: bool | None
    """None where its SQL did not run in rollscope's environment (a Recorder's, an import's
    without its question): whether a query failed is not known."""
    has_unparsed: bool
    answer: str | None
    forked_from: int | None = None
    """For a fork's episode: the recorded episode whose first steps it replays."""
    fork_step: int | None = None
    """For a fork's episode: the first step its own policy played."""
    failure_class: FailureClass | None = None
    """Why it ended as it did (`rollout_core.failure_classes`); None while it is played."""
    train_step: int | None = None
    """The trainer's global step it was played at (a training run's, an import's)."""


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of a keyset-paged list."""

    items: list[T]
    next_cursor: str | None
    """Opaque cursor for the next page; None on the last page."""
    total: int | None = None
    """Number of matching rows, when the query asked for it."""
    total_capped: bool = False
    """True when counting stopped at the query's cap: `total` is a lower bound."""
    text_window: int | None = None
    """When the filter's `text_newest` left older episodes unsearched: that many newest were."""


@dataclass(frozen=True, slots=True)
class StoredStep(StepRecord):
    """One step as stored, for replay: the step's record with what the store adds to it."""

    id: int = 0
    """The step's row id."""
    mean_logprob: float | None = None
    """Mean log-probability of the output's tokens, when recorded."""
    mean_entropy: float | None = None
    """Mean entropy of the distributions the output's tokens were drawn from, when recorded."""


@dataclass(frozen=True, slots=True)
class Annotation:
    """A person's tag and note on an episode or one of its steps."""

    id: int
    step: int | None
    """The step labelled; None for the whole episode."""
    tag: str
    note: str | None
    author: str | None
    """Who wrote it, as far as the writer knew (a login, `$USER`, `dashboard`)."""
    created_at: datetime


@dataclass(frozen=True, slots=True)
class TagCount:
    """A tag in use, with the number of episodes carrying it."""

    tag: str
    episodes: int


@dataclass(frozen=True, slots=True)
class EpisodeDetail:
    """One episode with everything replay needs."""

    summary: EpisodeSummary
    gold_sql: str | None
    """None where nothing gives the reference SQL (an import's, a Recorder's)."""
    seed: int | None
    """None for a rollout rollscope did not play (an import's, a Recorder's)."""
    progress: float | None
    operational: float | None
    error: str | None
    steps: list[StoredStep]
    run: RunSummary
    annotations: list[Annotation] = field(default_factory=list)
    """Tags and notes on the episode and its steps, oldest first."""
    group_index: int | None = None
    """Its GRPO group, numbered over the run; None where its question's samples are its group
    (a batch run)."""
    tokens_out: int | None = None
    """Tokens the model wrote over the episode, when its policy or file counted them."""
    mean_logprob: float | None = None
    """Their mean log-probability, when recorded."""
    trainer_advantage: float | None = None
    """The advantage its trainer gave it, when the trainer reported one (TRL's files)."""


@dataclass(frozen=True, slots=True)
class RunCell:
    """One run's result on one question (all its samples)."""

    run_id: int
    episodes: int
    correct: int
    episode_ids: list[int]

    @property
    def success_rate(self) -> float | None:
        return None if self.episodes == 0 else self.correct / self.episodes


@dataclass(frozen=True, slots=True)
class QuestionComparison:
    """One question across the compared runs."""

    question_id: str
    db_id: str | None
    question: str
    cells: dict[RunKey, RunCell]
    """run id (or run and training step) -> its result; a run that did not play the question
    has no entry."""


@dataclass(frozen=True, slots=True)
class QuestionOutcomes:
    """One question's finished results per run, without its text or episode ids: enough for
    statistics over every question two runs played."""

    question_id: str
    cells: dict[RunKey, RunCell]
    """run id (or run and training step) -> its result (`episode_ids` left empty); a run that
    did not play it is absent."""


@dataclass(frozen=True, slots=True)
class IdApart:
    """A question id two compared sides share whose episodes ask different questions (two
    files that number their questions by position, say): Compare pairs neither with the
    other."""

    question_id: str
    key: RunKey
    """The side whose question under this id differs."""
    question: str
    against: RunKey
    """The side it is set against: the first given that played the id (the baseline, where
    it did)."""
    against_question: str


@dataclass(frozen=True, slots=True)
class Distribution:
    """Per-run counts for the Runs page charts."""

    run_id: int
    action_mix: dict[str, int]
    """Counts of DESCRIBE / SAMPLE / QUERY / ANSWER / UNPARSED steps."""
    reward_histogram: list[tuple[float, int]]
    """(bin centre, count) of episode rewards: each counted at its nearest multiple of 0.1."""
    steps_histogram: list[tuple[int, int]]
    """(steps, count) of finished episodes."""
    outcome_counts: dict[str, int]
    failure_counts: dict[str, int] = field(default_factory=dict)
    """Finished episodes per failure class (every class, zeros included)."""
    train_step: int | None = None
    """Set when the counts are of one training step of the run, not the whole run's."""

    @property
    def key(self) -> RunKey:
        return self.run_id if self.train_step is None else RunStep(self.run_id, self.train_step)


class GroupKey(NamedTuple):
    """Names one GRPO group within a run (`storage.groups` turns it into columns and back):
    in a batch run, the finished samples of one question; in a training run, the samples of
    one question the trainer drew together at one step, as GRPOTrainer groups them (without
    a group number, the question's samples at `train_step`).

    A tuple, as `GroupStats` is: a long training run has a record of each for every one of
    its tens of thousands of groups, and tuples are several times cheaper to make."""

    question_id: str
    group_index: int | None = None
    """A training run's group number (`Episode.group_index`); None in a batch run."""
    train_step: int | None = None
    """The training step the group was played at. Part of the match for a training run's
    group without a number (None: the question's samples without a step, a group of their
    own); shown, not matched, for a numbered one."""

    def __str__(self) -> str:
        if self.group_index is None and self.train_step is None:
            return self.question_id
        return f"{self.question_id} at step {self.train_step}"


class GroupStats(NamedTuple):
    """One GRPO group's rewards, as `rollout_core.grpo` defines its statistics."""

    run_id: int
    key: GroupKey
    size: int
    """Finished episodes in the group."""
    correct: int
    mean: float
    std: float
    """Sample standard deviation (n - 1); exactly 0 when every reward is equal."""
    lowest: float
    highest: float
    trainer_advantage: float | None = None
    """The largest |advantage| the trainer gave a sample, where it reported one for every
    sample (`Episode.trainer_advantage`); None where it did not."""

    @property
    def has_signal(self) -> bool:
        """False for a group every advantage of which is 0: GRPO learns nothing from it."""
        return self.source != "none"

    @property
    def source(self) -> SignalSource:
        """Where the group's spread comes from (`rollout_core.grpo.signal_source`)."""
        return signal_source(self.size, self.correct, self.std, self.trainer_advantage)


@dataclass(frozen=True, slots=True)
class GroupOverview:
    """A run's GRPO groups summed up, with the groups the run-level view lists
    (`storage.groups.overview`). Every count covers all the run's groups, listed or not."""

    run_id: int
    groups: list[GroupStats]
    """The groups listed: the highest standard deviation first (ties by question, then
    training step), as many as were asked for, or every group of the question asked for."""
    questions: dict[str, str]
    """Question id -> text, for the listed groups."""
    total: int
    """Groups in the run."""
    by_source: dict[SignalSource, int]
    """Groups by where their reward spread comes from (`rollout_core.grpo.signal_source`),
    every source present."""
    none_correct: int
    """Groups without a correct sample, whatever their rewards."""
    all_correct: int
    """Groups whose samples are all correct, whatever their rewards."""
    episodes: int
    """Finished episodes in the run's groups."""
    largest: int
    """Samples in the largest group (1: the run has no groups to learn from)."""
    std_counts: dict[SignalSource, tuple[int, ...]]
    """The groups with a spread (sources "correctness" and "shaping only") by reward standard
    deviation, in bins of `std_bin` from 0, save those in `std_beyond`; the others have std 0,
    or, judged by the trainer's advantages, gave no advantage."""
    std_bin: float
    """The width of the `std_counts` bins: `storage.groups.STD_BIN` for rewards of ordinary
    size, a wider round one where the stds would take too many (`storage.groups.std_bin_width`)."""
    std_beyond: dict[SignalSource, int]
    """The groups with a spread whose std their rewards are too large to compute (their sums
    overflow a float), by source: in no bin, and listed with std inf."""
    trainer_judged: int = 0
    """Groups whose source the trainer's advantages decided (it reported one for each sample;
    `rollout_core.grpo.signal_source`)."""

    @property
    def with_signal(self) -> int:
        """Groups with reward variance, from either source."""
        return self.total - self.by_source["none"]

    @property
    def signal_fraction(self) -> float | None:
        """Share of groups with reward variance; None for a run without groups."""
        return self.with_signal / self.total if self.total else None

    @property
    def mean_samples(self) -> float | None:
        """Finished samples a group, on average; None for a run without groups."""
        return self.episodes / self.total if self.total else None


@dataclass(frozen=True, slots=True)
class GroupMember:
    """One episode of a group with its GRPO advantage."""

    detail: EpisodeDetail
    advantage: float


@dataclass(frozen=True, slots=True)
class GroupDetail:
    """One group with its members' episodes (steps included), by sample index."""

    stats: GroupStats
    members: list[GroupMember]


@dataclass(frozen=True, slots=True)
class OutcomeMatrix:
    """Finished episodes and correct ones per question (rows, by id) and run (columns, in
    the order asked): the question x checkpoint map's input, as dense rows."""

    run_ids: list[RunKey]
    """The runs (or training steps of runs) in the order asked."""
    question_ids: list[str]
    episodes: list[list[int]]
    """[question][run]: finished episodes; 0 where the run did not play the question."""
    correct: list[list[int]]
    apart: list[IdApart] = field(default_factory=list)
    """The ids a run shares with an earlier one but asks another question under: that run's
    counts of it are a row of their own (`asked`), paired with no other run's."""
    asked: dict[str, str] = field(default_factory=dict)
    """The rows of ids apart: each row's label (`<id> · <run>`) -> its question id."""
