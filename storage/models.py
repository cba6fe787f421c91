"""The store's tables: runs -> episodes -> steps, plus annotations on any of them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    CheckConstraint,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    false,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from rollout_core.keys import KEY_CHARS
from rollout_core.records import FAILURE_CLASSES, OUTCOMES, REGRADES, RUN_KINDS, RUN_STATUSES

# Stable constraint names, so migrations can name what they alter (SQLite needs names for
# batch ALTERs).
INTEGER_RANGE = range(-(2**31), 2**31)
"""The whole numbers an `Integer` column holds on every backend (PostgreSQL's integer is 32
bits): a training step or a token count from outside is checked against it before a write."""
BIG_INTEGER_RANGE = range(-(2**63), 2**63)
"""What a `BigInteger` column (a seed) holds on every backend."""

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UtcDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC timestamp on every backend (SQLite stores naive text)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: pass a timezone-aware one")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {  # noqa: RUF012 (SQLAlchemy reads it as a class attribute)
        datetime: UtcDateTime(),
        # None as SQL NULL, not the JSON text 'null': `IS NULL` must find what holds nothing.
        dict[str, Any]: JSON(none_as_null=True),
        str: Text(),
    }


class Run(Base):
    """One batch of episodes, with everything that defined it."""

    __tablename__ = "runs"
    __table_args__ = (
        CheckConstraint(_in("status", RUN_STATUSES), name="status"),
        CheckConstraint(_in("kind", RUN_KINDS), name="kind"),
        UniqueConstraint("name"),
        Index(None, "created_at", "id"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(KEY_CHARS))
    policy: Mapped[str]
    checkpoint: Mapped[str | None]
    checkpoint_fingerprint: Mapped[str | None] = mapped_column(String(64))
    dataset: Mapped[str | None]
    """The benchmark the run's questions come from; NULL where nothing names one (an import
    without `--questions`, a Recorder's run)."""
    kind: Mapped[str] = mapped_column(String(16), default="batch", server_default="batch")
    spec: Mapped[dict[str, Any]]
    """The whole RunSpec (`RunSpec.to_stored()`): typed generation and environment settings."""
    policy_info: Mapped[dict[str, Any] | None]
    """What the policy reported about itself (`PolicyInfo`); never fed back as input."""
    episodes_planned: Mapped[int | None]
    """The episodes the run sets out to play (a batch's, a recorded TRL run's rollout calls
    times their prompts; an import's, the rows of the files it has begun reading); NULL where
    it sets out to play no number (an env server, a trainer's tools, a Recorder)."""
    status: Mapped[str] = mapped_column(String(16))
    error: Mapped[str | None]
    host: Mapped[str | None]
    pid: Mapped[int | None]
    created_at: Mapped[datetime]
    started_at: Mapped[datetime | None]
    ended_at: Mapped[datetime | None]
    heartbeat_at: Mapped[datetime | None]
    # Running totals over the run's episodes, kept by the write path (`storage.run_totals`).
    finished_episodes: Mapped[int] = mapped_column(default=0, server_default=text("0"))
    correct_episodes: Mapped[int] = mapped_column(default=0, server_default=text("0"))
    error_episodes: Mapped[int] = mapped_column(default=0, server_default=text("0"))
    reward_sum: Mapped[float] = mapped_column(Float, default=0.0, server_default=text("0"))
    finished_step_sum: Mapped[int] = mapped_column(default=0, server_default=text("0"))
    step_sum: Mapped[int] = mapped_column(default=0, server_default=text("0"))
    unparsed_sum: Mapped[int] = mapped_column(default=0, server_default=text("0"))
    # Where the episodes of a run rollscope did not play come from (`rollscope import`, a
    # Recorder); NULL for rollscope's own runs.
    source_format: Mapped[str | None] = mapped_column(String(16))
    """The format an import read (trl, verl, skyrl, rllm, verifiers, messages), or `recorder`."""
    source_path: Mapped[str | None]
    """The file or folder an import read, as an absolute path."""
    skipped_lines: Mapped[int] = mapped_column(default=0, server_default=text("0"))
    """Lines or rows an import left out as malformed, over the files it finished."""


class Episode(Base):
    """One question played once; outcome columns stay NULL until it finishes."""

    __tablename__ = "episodes"
    __table_args__ = (
        CheckConstraint(_in("outcome", OUTCOMES), name="outcome"),
        CheckConstraint(_in("failure_class", FAILURE_CLASSES), name="failure_class"),
        # Indexes in the sort orders of the episode list (keyset on (column, id)).
        Index(None, "run_id", "id"),
        Index(None, "run_id", "reward", "id"),
        Index(None, "run_id", "steps", "id"),
        Index(None, "run_id", "duration_seconds", "id"),
        # (run_id, outcome) first, then every column the run metrics and charts aggregate:
        # those GROUP BYs read this index alone, never the wide episode rows.
        Index(
            "ix_episodes_run_outcome_metrics",
            "run_id",
            "outcome",
            "reward",
            "steps",
            "unparsed_steps",
            "describe_steps",
            "sample_steps",
            "query_steps",
            "answer_steps",
        ),
        Index(None, "run_id", "question_id", "sample_index", unique=True),
        # The class mix (GROUP BY run, class) and the Episodes filter by class (keyset on id).
        Index(None, "run_id", "failure_class", "id"),
        # GRPO groups and the question map: per (run, question) counts, rewards and outcomes
        # read from this index alone.
        Index("ix_episodes_run_question_results", "run_id", "question_id", "outcome", "reward"),
        Index(None, "question_id"),
        Index(None, "db_id"),
        Index(None, "forked_from"),
        # A training run's per-step curves (GROUP BY train_step, group_index: storage.training)
        # and its GRPO groups (the same, with the question: storage.groups) read this alone.
        Index(
            "ix_episodes_run_train_step_metrics",
            "run_id",
            "train_step",
            "group_index",
            "question_id",
            "outcome",
            "reward",
            "steps",
            "unparsed_steps",
            "mean_logprob",
            "tokens_out",
            "trainer_advantage",
        ),
    )

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer(), "sqlite"), primary_key=True
    )
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    question_id: Mapped[str] = mapped_column(String(KEY_CHARS))
    sample_index: Mapped[int]
    seed: Mapped[int | None] = mapped_column(BigInteger)
    db_id: Mapped[str | None] = mapped_column(String(KEY_CHARS))
    """The database the question is asked of; NULL where nothing names one (an import without
    `--questions` of a file that does not, a Recorder given no `db_id=`)."""
    question: Mapped[str]
    gold_sql: Mapped[str | None]
    """The reference SQL; NULL where nothing gives one (as `db_id`)."""
    started_at: Mapped[datetime | None]
    ended_at: Mapped[datetime | None]
    outcome: Mapped[str | None] = mapped_column(String(32))
    reward: Mapped[float | None] = mapped_column(Float)
    progress: Mapped[float | None] = mapped_column(Float)
    operational: Mapped[float | None] = mapped_column(Float)
    answer: Mapped[str | None]
    duration_seconds: Mapped[float | None] = mapped_column(Float)
    error: Mapped[str | None]
    failure_class: Mapped[str | None] = mapped_column(String(32))
    """Why it ended as it did (`rollout_core.failure_classes`); NULL until it finishes."""
    # Denormalized from the steps, so filters and metrics never scan the steps table.
    steps: Mapped[int] = mapped_column(default=0, server_default=text("0"))
    unparsed_steps: Mapped[int] = mapped_column(default=0, server_default=text("0"))
    has_unparsed: Mapped[bool] = mapped_column(default=False, server_default=false())
    has_sql_error: Mapped[bool | None]
    """A QUERY of the episode failed in rollscope's environment; NULL where its SQL did not run
    there (a Recorder's rollout, an import's without its question): nobody here knows."""
    # Parsed steps per action (unparsed ones count in unparsed_steps): the action mix chart.
    describe_steps: Mapped[int] = mapped_column(default=0, server_default=text("0"))
    sample_steps: Mapped[int] = mapped_column(default=0, server_default=text("0"))
    query_steps: Mapped[int] = mapped_column(default=0, server_default=text("0"))
    answer_steps: Mapped[int] = mapped_column(default=0, server_default=text("0"))
    # A fork's episode: its first fork_step-1 steps replay the recorded episode forked_from.
    # No foreign key: a fork outlives a deleted source (and adding one rebuilds the table).
    forked_from: Mapped[int | None] = mapped_column(BigInteger().with_variant(Integer(), "sqlite"))
    fork_step: Mapped[int | None]
    # Training runs (kind `training`): when the episode was played and which GRPO group it
    # belongs to; NULL for other runs.
    train_step: Mapped[int | None]
    """The trainer's global step when the episode was played."""
    group_index: Mapped[int | None]
    """The GRPO group (episodes of one prompt in one generation batch), numbered over the run."""
    mean_logprob: Mapped[float | None] = mapped_column(Float)
    """Mean log-probability of the model's tokens over the whole episode, when recorded."""
    tokens_out: Mapped[int | None]
    """Tokens the model wrote in the episode, when recorded."""
    trainer_advantage: Mapped[float | None] = mapped_column(Float)
    """The advantage its trainer gave it, as the trainer reported it (TRL's completions files'
    `advantage`); NULL where none did (rollscope's own runs: GRPO groups computes one)."""


class Step(Base):
    """One agent step: its prompt (as the messages its turn added, see `storage.prompts`), the
    model's output, the parsed action and the environment's answer."""

    __tablename__ = "steps"
    __table_args__ = (Index(None, "episode_id", "step_no", unique=True),)

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer(), "sqlite"), primary_key=True
    )
    episode_id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer(), "sqlite"),
        ForeignKey("episodes.id", ondelete="CASCADE"),
    )
    step_no: Mapped[int]
    prompt_shared_id: Mapped[int | None] = mapped_column(
        BigInteger().with_variant(Integer(), "sqlite"), ForeignKey("prompt_texts.id")
    )
    """The leading system messages of the prompt, stored once (`prompt_texts`); NULL: none."""
    prompt_from_step: Mapped[int]
    """The first step whose `prompt_added` this step's prompt includes."""
    prompt_added: Mapped[str]
    """JSON array of the chat messages this step's prompt adds to the previous step's."""
    raw_output: Mapped[str]
    action: Mapped[str | None] = mapped_column(String(16))
    """DESCRIBE, SAMPLE, QUERY or ANSWER, as the environment took it (an output without an
    action line ran as a QUERY, `parsed` false); NULL for an imported or Recorder step that
    had no action: nothing ran it here."""
    argument: Mapped[str | None]
    """The action's argument (table name, SQL, answer), as the parser took it; NULL where
    `action` is."""
    parsed: Mapped[bool]
    observation: Mapped[str | None]
    """What the environment answered, as the model read it next turn; NULL where nothing
    answered (an imported or Recorder turn with no reply after it, as a rollout's last)."""
    error: Mapped[str | None]
    """Why the action failed (SQL error, refusal, unknown table); NULL when it did not."""
    reward: Mapped[float] = mapped_column(Float)
    done: Mapped[bool]
    tokens_in: Mapped[int | None]
    tokens_out: Mapped[int | None]
    policy_seconds: Mapped[float | None] = mapped_column(Float)
    """This step's share of the policy call's wall time; for an imported step, its model call's
    as the file times it (verifiers, rLLM). NULL where nobody timed it (an import of a file
    without timings, an env-server client, a trainer's own generation)."""
    env_seconds: Mapped[float | None] = mapped_column(Float)
    """Wall time of the environment's step, or of the imported file's environment response
    after the step; NULL where nobody timed it (an import of a file without timings)."""
    truncated: Mapped[bool | None]
    """The output was cut at the length limit (max_new_tokens, a `finish_reason` of "length").
    NULL where nobody could tell: a trainer's tool call, an env-server client's text, an
    imported turn its file says nothing about (a file that tells only of the last turn leaves
    the earlier ones NULL)."""
    cached_tokens: Mapped[int | None]
    token_trace: Mapped[bytes | None] = mapped_column(LargeBinary)
    """Per-token pieces, log-probs, entropies (and ids): `storage.token_codec`'s layout."""
    mean_logprob: Mapped[float | None] = mapped_column(Float)
    """Mean log-probability of the output's tokens (kept apart for cheap aggregates)."""
    mean_entropy: Mapped[float | None] = mapped_column(Float)
    replayed: Mapped[bool] = mapped_column(default=False, server_default=false())
    """A fork's step re-executed from its source episode, not generated by this run's policy."""


class RunCount(Base):
    """How many of a run's episodes (or steps) fall under one key of one kind: the Runs page's
    distributions, kept by the write path (`storage.run_totals`) instead of grouped on read.

    Kinds: `action` (steps per action, `UNPARSED` for no action line, over all episodes),
    and over finished episodes `outcome`, `class` (failure class), `steps` (episode length)
    and `reward` (the reward in thousandths, so bins are exact integer arithmetic; one past
    the key's 64 characters, about 1e60, at that bound).
    """

    __tablename__ = "run_counts"

    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16), primary_key=True)
    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    n: Mapped[int] = mapped_column(BigInteger)


class PromptText(Base):
    """Leading messages of prompts (system prompts), a JSON array stored once for the whole
    store and found again by the SHA-256 of its UTF-8 bytes (`storage.prompts`)."""

    __tablename__ = "prompt_texts"
    __table_args__ = (UniqueConstraint("sha256"),)

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer(), "sqlite"), primary_key=True
    )
    sha256: Mapped[bytes] = mapped_column(LargeBinary(32))
    text: Mapped[str]


class ImportFile(Base):
    """One file an import read into a run, as the reading found it, found again by its path
    and the SHA-256 of its bytes: a file read whole is not read again, one read in part (a
    stopped import) or grown since is read on past the rows the run holds. A file that grew
    has a row for each reading (a follow reads a growing file every few seconds)."""

    __tablename__ = "import_files"
    __table_args__ = (UniqueConstraint("run_id", "path", "sha256"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    path: Mapped[str]
    """The file's path relative to the run's `source_path` (its name for a file imported alone)."""
    sha256: Mapped[bytes] = mapped_column(LargeBinary(32))
    bytes: Mapped[int] = mapped_column(BigInteger)
    rows: Mapped[int]
    """Lines or rows the file holds (episodes it can give)."""
    episodes: Mapped[int] = mapped_column(default=0, server_default=text("0"))
    """Episodes imported from it (rows an earlier version of the file gave are not counted)."""
    skipped_lines: Mapped[int] = mapped_column(default=0, server_default=text("0"))
    """Malformed lines or rows left out, in the whole file as this reading found it."""
    rows_gone: Mapped[int | None]
    """Rows the run read from earlier versions of the path that this version no longer holds
    (a file rewritten): 0 for the first. NULL until the reading completes, and for a later
    version read before rollscope counted them."""
    started_at: Mapped[datetime]
    completed_at: Mapped[datetime | None]
    """When its last row was in; NULL while (or if stopped while) it is read."""


class EpisodeSource(Base):
    """Where an imported episode was read: a row of one of its run's files."""

    __tablename__ = "episode_sources"
    __table_args__ = (
        Index(None, "file_id", "line"),
        # The few rows a rewrite dropped, found without reading a run's every source row.
        Index(
            None,
            "gone_file_id",
            sqlite_where=text("gone_file_id IS NOT NULL"),
            postgresql_where=text("gone_file_id IS NOT NULL"),
        ),
        CheckConstraint(_in("regraded", REGRADES), name="regraded"),
    )

    episode_id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer(), "sqlite"),
        ForeignKey("episodes.id", ondelete="CASCADE"),
        primary_key=True,
    )
    file_id: Mapped[int] = mapped_column(ForeignKey("import_files.id", ondelete="CASCADE"))
    line: Mapped[int]
    """1-based line of a JSONL file, row of a Parquet file, 1 for a file of one episode."""
    sha256: Mapped[bytes] = mapped_column(LargeBinary(32))
    """SHA-256 of the row's bytes as read (a Parquet row: its values as JSON)."""
    regraded: Mapped[str | None] = mapped_column(String(16))
    """rollscope's grade of the final answer against the gold SQL (correct, wrong, error),
    apart from the file's own score; NULL when not re-graded."""
    filled_steps: Mapped[str | None]
    """JSON array of the steps whose observation the file lacked and rollscope filled by
    running their SQL; NULL when none was."""
    agent: Mapped[str | None]
    """The agent whose trace of the row this episode is (a verifiers v1 episode's line holds
    a trace per agent); NULL where the file names none."""
    gone_file_id: Mapped[int | None] = mapped_column(
        ForeignKey("import_files.id", ondelete="CASCADE")
    )
    """The reading of its path that no longer found this row: the file was rewritten without
    it (a trainer resumed from a checkpoint plays the step again). NULL while the file, as
    last read whole, holds it."""


class ReplayedEpisode(Base):
    """An episode of a trainer's run whose training step the trainer played again: resumed
    from a checkpoint taken before the step, it trained on the new play, and the weights this
    one was played with are on no path to the run's model (`make_rollout_func(resume=True)`).
    An import's rows a file rewrite dropped are marked in `episode_sources` instead."""

    __tablename__ = "replayed_episodes"

    episode_id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer(), "sqlite"),
        ForeignKey("episodes.id", ondelete="CASCADE"),
        primary_key=True,
    )
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    resumed_at_step: Mapped[int]
    """The training step the resumed trainer began at: its checkpoint's."""


class EpisodeReward(Base):
    """One named reward of an episode: a reward function's or a reward column's value, as
    its producer gave it (`episodes.reward` is the total the producer gave)."""

    __tablename__ = "episode_rewards"
    __table_args__ = ({"sqlite_with_rowid": False},)

    episode_id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer(), "sqlite"),
        ForeignKey("episodes.id", ondelete="CASCADE"),
        primary_key=True,
    )
    name: Mapped[str] = mapped_column(String(KEY_CHARS), primary_key=True)
    value: Mapped[float] = mapped_column(Float)


class Annotation(Base):
    """A person's label on a run, an episode or one of its steps: a tag and a note."""

    __tablename__ = "annotations"
    __table_args__ = (
        # One note per tag and target; a run's own labels (episode_id NULL) are kept unique by
        # the Store, as NULLs never collide in a unique index.
        Index(None, "episode_id", "step_no", "tag", unique=True),
        Index(None, "run_id", "tag"),
        Index(None, "tag", "run_id", "episode_id"),
    )

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer(), "sqlite"), primary_key=True
    )
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    episode_id: Mapped[int | None] = mapped_column(
        BigInteger().with_variant(Integer(), "sqlite"),
        ForeignKey("episodes.id", ondelete="CASCADE"),
    )
    """None: a label on the whole run (`Store.tag_run`)."""
    step_no: Mapped[int] = mapped_column(default=0, server_default=text("0"))
    """The step labelled; 0 for the whole episode (or run)."""
    tag: Mapped[str] = mapped_column(String(200))
    note: Mapped[str | None]
    author: Mapped[str | None] = mapped_column(String(200))
    """Who wrote it, as far as the writer knew (a login, `$USER`, `dashboard`)."""
    created_at: Mapped[datetime]
