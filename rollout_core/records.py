"""The contract between the engine and whatever records it: plain, frozen records and a Sink.

The runner builds these records and hands them to a `Sink` it is given; it knows nothing of
stores, files or pages. `storage.Store` implements the sink; tests use `ListSink`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, NamedTuple, Protocol

from rollout_core.settings import EnvironmentSettings, GenerationSettings, TrainingSettings

ActionKind = Literal["DESCRIBE", "SAMPLE", "QUERY", "ANSWER"]
ACTION_KINDS: tuple[ActionKind, ...] = ("DESCRIBE", "SAMPLE", "QUERY", "ANSWER")

Outcome = Literal["correct", "wrong", "budget_exhausted", "error", "abandoned"]
"""How an episode ended: `abandoned` when its player left before it ended (a client of the
environment server that disconnected)."""
OUTCOMES: tuple[Outcome, ...] = ("correct", "wrong", "budget_exhausted", "error", "abandoned")

FailureClass = Literal[
    "correct",
    "wrong_after_gold",
    "wrong_answer",
    "sql_errors",
    "unparsed",
    "action_loop",
    "budget_exhausted",
    "env_error",
    "abandoned",
]
"""Why a finished episode ended as it did; the rules are in `rollout_core.failure_classes`."""
FAILURE_CLASSES: tuple[FailureClass, ...] = (
    "correct",
    "wrong_after_gold",
    "wrong_answer",
    "sql_errors",
    "unparsed",
    "action_loop",
    "budget_exhausted",
    "env_error",
    "abandoned",
)

RunKind = Literal["batch", "training", "fork", "import", "env"]
"""Where a run's episodes come from: `rollscope run` or Launch (`batch`), a trainer
(`training`), a fork of recorded episodes (`fork`), files another framework wrote (`import`),
the sessions of the environment server (`env`)."""
RUN_KINDS: tuple[RunKind, ...] = ("batch", "training", "fork", "import", "env")

ChatMessage = Mapping[str, Any]
"""One chat message as a model receives it: at least `role` and `content`."""

RunStatus = Literal["queued", "running", "completed", "failed", "cancelled", "interrupted"]
RUN_STATUSES: tuple[RunStatus, ...] = (
    "queued",
    "running",
    "completed",
    "failed",
    "cancelled",
    "interrupted",
)


class EpisodeKey(NamedTuple):
    """Names one episode within a run: which question, and which of its samples.

    A named tuple, not a dataclass: the sink hashes and compares keys several times per step,
    and a tuple does that in C.
    """

    question_id: str
    sample_index: int
    """0-based index of this sample among the question's samples (a GRPO group's members)."""

    def __str__(self) -> str:
        return f"{self.question_id}#{self.sample_index}"


@dataclass(frozen=True, slots=True)
class EpisodeRef:
    """The start of every record that belongs to one episode of a run."""

    question_id: str
    sample_index: int
    """0-based index of this sample among the question's samples (a GRPO group's members)."""

    @property
    def key(self) -> EpisodeKey:
        return EpisodeKey(self.question_id, self.sample_index)


@dataclass(frozen=True, slots=True)
class TokenTrace:
    """What a policy knows about each token it generated, in order (one entry per token).

    `text` pieces concatenate to the completion's text exactly (pieces of special tokens, or of
    whitespace trimmed from the ends, are empty), so a viewer can shade the output token by
    token without a tokenizer.
    """

    text: tuple[str, ...]
    """Each token's piece of the completion text."""
    logprobs: tuple[float, ...] | None = None
    """Log-probability of the sampled token under the distribution it was sampled from
    (after temperature, before top-p truncation); None when the backend gives none."""
    entropies: tuple[float, ...] | None = None
    """Entropy (nats) of that distribution at each position; None when unknown."""
    ids: tuple[int, ...] | None = None
    """Token ids, when the backend exposes them."""
    top: tuple[tuple[tuple[str, float], ...], ...] | None = None
    """Per token, the most likely alternatives as (text, log-probability), when recorded."""


@dataclass(frozen=True, slots=True)
class PolicyInfo:
    """What a policy reports about itself once built. Recorded apart from the run's settings
    and never fed back as input (a resumed run rebuilds its policy from the settings alone)."""

    name: str
    """Registry name: `oracle`, `random`, `hf`, ..."""
    model_class: str | None = None
    parameters: int | None = None
    dtype: str | None = None
    """The dtype chosen (e.g. `float32`), when `auto` was asked."""
    device: str | None = None
    """The device chosen (e.g. `cuda:0`)."""
    fingerprint: str | None = None
    """Short hash of the checkpoint's config and weights index."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Anything else worth showing (server model name, attention implementation, ...)."""


@dataclass(frozen=True, slots=True)
class Question:
    """One benchmark item: a question about one SQLite database, with its gold SQL."""

    id: str
    """Stable id: the file's `id`/`question_id`, else derived from the position."""
    db_id: str
    """Name of the database folder (`<db_dir>/<db_id>/<db_id>.sqlite`)."""
    question: str
    """The natural-language question shown to the agent."""
    gold_sql: str
    """The reference query whose result a correct ANSWER must match."""
    evidence: str | None = None
    """BIRD's hint in natural language; shown with the question when present."""
    difficulty: str | None = None
    """BIRD's difficulty label, kept as a tag."""


ForkRule = Literal["step", "first-error"]
FORK_RULES: tuple[ForkRule, ...] = ("step", "first-error")


@dataclass(frozen=True, slots=True)
class ForkPoint:
    """One recorded episode a fork continues, and the step where its new policy takes over."""

    episode_id: int
    """The recorded episode's id in the store."""
    step: int
    """First step the new policy plays (1-based); steps 1 .. step-1 are replayed as recorded."""
    question_id: str
    sample_index: int
    """The recorded episode's sample index (its forks are samples index*samples .. +samples-1)."""


@dataclass(frozen=True, slots=True)
class ForkSpec:
    """What a `fork` run continues: episodes of one recorded run, each from a given step."""

    source_run_id: int
    source_run: str
    """The source run's name when the fork was made."""
    rule: ForkRule
    """`step`: the step was chosen; `first-error`: each failed episode at its first failing step."""
    points: tuple[ForkPoint, ...]


@dataclass(frozen=True, slots=True)
class RunSpec:
    """Everything that defines a run, recorded with it; a resumed run is rebuilt from this alone.

    Build one with `rollout_core.specs.build_spec` (it validates and fills the defaults); read a
    stored one with `RunSpec.from_stored`.
    """

    name: str
    """Human name of the run, unique in a store (e.g. `ckpt-1000-demo`)."""
    policy: str
    """Policy spec as given: `oracle`, `random`, `hf:/path/to/checkpoint`, ..."""
    dataset: str
    """Dataset name (`demo`, `demo:test`) or the questions file path."""
    questions_path: str
    """Resolved path of the questions JSON file."""
    db_dir: str
    """Resolved directory holding `<db_id>/<db_id>.sqlite`."""
    generation: GenerationSettings = field(default_factory=GenerationSettings)
    """How the policy generates: sampling, batch size, seed, device."""
    environment: EnvironmentSettings = field(default_factory=EnvironmentSettings)
    """What the environment enforces: step budget, observation caps, sandbox limits."""
    samples: int = 1
    """Episodes per question (GRPO group size)."""
    limit: int | None = None
    """Number of questions taken from the dataset, from the start; None for all."""
    question_ids: tuple[str, ...] | None = None
    """Explicit question selection (overrides `limit` when given)."""
    questions_sha256: str | None = None
    """SHA-256 of the questions the run plays as its file gave them when the run was made
    (`rollout_core.specs.questions_digest`): `--resume` refuses a file that now gives others.
    None for a fork (it plays recorded episodes) and for runs made before it was kept."""
    checkpoint: str | None = None
    """Checkpoint path or model id, for model policies."""
    kind: RunKind = "batch"
    """`batch` (rollscope run, Launch), `training` (played inside a trainer), `fork`."""
    fork: ForkSpec | None = None
    """For a `fork` run: the recorded episodes it continues and from which step."""
    training: TrainingSettings | None = None
    """The trainer's arguments, for a `training` run."""
    evaluation_of: str | None = None
    """For the run of a trainer's evaluation rollouts: the name of the training run whose
    checkpoints it evaluates (its episodes carry the step evaluated)."""

    def to_stored(self, *, played_here: bool = True) -> dict[str, Any]:
        """The JSON-able form kept in the store; `played_here` False for a run rollscope did
        not play, which keeps no generation or environment settings (`PLAYED_ONLY`)."""
        from rollout_core.stored_spec import spec_to_dict

        return spec_to_dict(self, played_here=played_here)

    @classmethod
    def from_stored(cls, data: Any) -> RunSpec:
        """A spec from its stored form, older layouts included; SpecError in one line else."""
        from rollout_core.stored_spec import spec_from_dict

        return spec_from_dict(data)


@dataclass(frozen=True, slots=True)
class EpisodeStart(EpisodeRef):
    """An episode that has just been reset; the store creates its row from this."""

    seed: int | None
    """Seed of this episode's sampling, derived from the run seed, question and sample; None
    for a rollout rollscope did not sample (an import's, a Recorder's, a trainer's tool calls):
    no seed of its is known. An env-server episode's is the one its client reset with."""
    db_id: str
    question: str
    gold_sql: str
    forked_from: int | None = None
    """For a fork: the id of the recorded episode whose first steps this one replays."""
    fork_step: int | None = None
    """For a fork: the first step its own policy plays (the steps before are replayed)."""
    train_step: int | None = None
    """For a training run: the trainer's global step when the episode was played."""
    group_index: int | None = None
    """For a training run: its GRPO group (one prompt's samples in one generation batch),
    numbered over the run."""
    started_at: datetime | None = None
    """When rollscope reset the episode (UTC); None for a rollout played elsewhere (an
    import's, a Recorder's): no time of its start is known."""
    sql_run_here: bool = True
    """Whether rollscope's environment ran the episode's SQL; False for a rollout played
    elsewhere that it did not run again (a Recorder's, an import's without its question):
    whether a query of it failed is not known, and the store's `has_sql_error` is NULL."""


@dataclass(frozen=True, slots=True)
class StepRecord(EpisodeRef):
    """One agent step: what the model saw, what it wrote, and what the environment answered."""

    step_no: int
    """1-based step index within the episode."""
    prompt: Sequence[ChatMessage]
    """The chat messages the model received for this step, in order (empty when the producer
    does not see the prompt, e.g. a trainer's tool calls)."""
    raw_output: str
    """The model's completion exactly as generated."""
    action: ActionKind | None
    """The action the environment took; None for a step with no action that nothing ran (an
    imported or Recorder turn without SQL: its framework's environment, not rollscope's,
    answered it)."""
    argument: str | None
    """The action's argument (table name, SQL, answer); None where `action` is."""
    parsed: bool
    """False when no action line was found: rollscope's environment ran the text as a QUERY,
    an imported or Recorder step has no action."""
    observation: str | None
    """The environment's answer as shown to the model next turn; None where nothing answered
    (an imported or Recorder turn with no reply after it, as a rollout's last turn)."""
    error: str | None
    """Error text when the action failed (SQL error, refusal, unknown table)."""
    reward: float
    done: bool
    tokens_in: int | None = None
    tokens_out: int | None = None
    policy_seconds: float | None = None
    """This step's share of the batched policy call's wall time, or its model call's as an
    imported file times it; None where nobody timed it (an import of a file without timings,
    an env-server client, a trainer's own generation)."""
    env_seconds: float | None = None
    """Wall time of `env.step` for this step, or of the environment's response as an imported
    file times it; None where nobody timed it."""
    tokens: TokenTrace | None = None
    """Per-token log-probabilities and entropies of the output, when the policy records them."""
    truncated: bool | None = None
    """True when the output was cut by `max_new_tokens` (finish reason `length`); None where
    nobody could tell (a trainer's tool call, an env-server client's text, a file that does
    not say)."""
    cached_tokens: int | None = None
    """Prompt tokens served from a cache (prefix cache, server prompt cache), when known."""
    replayed: bool = False
    """True for a fork's step copied from its source episode: the recorded action re-executed
    in the environment, not generated by this run's policy."""

    @property
    def fell_back(self) -> bool:
        """No action line, so rollscope's environment ran the text as a QUERY (an imported
        step without one took no action)."""
        return not self.parsed and self.action is not None

    @property
    def acted_on(self) -> str:
        """What the step acted on: its argument, or the output of a step that took no action."""
        return self.argument if self.argument is not None else self.raw_output


Regrade = Literal["correct", "wrong", "error"]
"""rollscope's own grade of an imported episode's final answer against the gold SQL: `error`
when the gold query or the answer's SQL could not be run."""
REGRADES: tuple[Regrade, ...] = ("correct", "wrong", "error")


@dataclass(frozen=True, slots=True)
class SourceRow:
    """Where an imported episode was read, and what rollscope checked of it."""

    file_id: int
    """The store's `import_files` row of the file."""
    line: int
    """1-based line of a JSONL file, row of a Parquet file, 1 for a file holding one episode."""
    sha256: bytes
    """SHA-256 of the row's bytes as read (a Parquet row: its values as JSON)."""
    regraded: Regrade | None = None
    """rollscope's grade of the final answer, when asked for (`--questions`); never the
    file's own score."""
    filled_steps: tuple[int, ...] = ()
    """Steps whose observation the file lacked and rollscope filled by running their SQL."""
    agent: str | None = None
    """The agent whose trace the row gave this episode from, when the file names one."""


@dataclass(frozen=True, slots=True)
class EpisodeRecord(EpisodeRef):
    """A finished episode's outcome; written in the same transaction as its last step."""

    outcome: Outcome
    reward: float
    """Total reward of the episode (answer reward + shaped progress + penalties)."""
    progress: float | None
    """Sum of the positive QUERY progress rewards; None where rollscope's environment did not
    play the episode's SQL (an import without `--questions`, a Recorder's loop)."""
    operational: float | None
    """Successful steps minus repeated actions; None where `progress` is."""
    steps: int
    answer: str | None
    """The submitted answer, if any."""
    duration_seconds: float | None
    """Wall time from start to finish; None where nobody timed it (an imported rollout whose
    file has no timings, a Recorder's not given `seconds`, an env-server episode a killed
    server left open)."""
    error: str | None = None
    """Why the episode ended in `error`, if it did."""
    failure_class: FailureClass | None = None
    """Its failure class (`rollout_core.failure_classes`); the step player always sets it, and
    a store classifies a record that comes without one from the steps it holds."""
    tokens_out: int | None = None
    """Tokens the model wrote over the episode, when its policy reported them."""
    mean_logprob: float | None = None
    """Mean log-probability of those tokens, when the policy recorded log-probabilities."""
    rewards: Mapping[str, float] | None = None
    """The episode's rewards by name (one per reward function or column of the file it came
    from), when its producer has them; `reward` is their total as the producer gave it."""
    trainer_advantage: float | None = None
    """The advantage its trainer gave it, when the trainer reports one (TRL's completions
    files); GRPO groups computes its own from the rewards beside it."""
    source: SourceRow | None = None
    """For an imported episode: the file row it was read from."""
    ended_at: datetime | None = None
    """When it ended (UTC); None where nobody saw it end: a rollout played elsewhere, an
    env-server episode a killed server left open."""


@dataclass(frozen=True, slots=True)
class IterationBatch:
    """What one lockstep iteration produced: a sink writes it whole or not at all (alone, or
    with the batches after it)."""

    started: Sequence[EpisodeStart] = ()
    steps: Sequence[StepRecord] = ()
    finished: Sequence[EpisodeRecord] = ()


class Sink(Protocol):
    """Receives the runner's records. Implementations must write each batch atomically; they
    may write several consecutive batches in one transaction."""

    def write(self, batch: IterationBatch) -> None:
        """Persist one iteration: new episodes, their steps, and finished episodes."""
        ...


class ListSink:
    """A sink that keeps everything in memory; for tests and `rollout_func`."""

    def __init__(self) -> None:
        self.batches: list[IterationBatch] = []

    def write(self, batch: IterationBatch) -> None:
        self.batches.append(batch)

    @property
    def steps(self) -> list[StepRecord]:
        return [s for b in self.batches for s in b.steps]

    @property
    def episodes(self) -> list[EpisodeRecord]:
        return [e for b in self.batches for e in b.finished]

    @property
    def started(self) -> list[EpisodeStart]:
        return [e for b in self.batches for e in b.started]
