"""One way to turn what a user asked for into a validated RunSpec.

The CLI, the dashboard's Launch, the demo and the training integration all build their specs
here, so every default lives in `rollout_core.settings` and every check runs once, before a run
row exists.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from rollout_core.checkpoints import check_checkpoint_dir
from rollout_core.datasets import (
    Dataset,
    DatasetError,
    load_dataset,
    load_named_dataset,
    select_questions,
)
from rollout_core.errors import SpecError
from rollout_core.keys import run_name_problem
from rollout_core.policies.registry import check_spec, split_spec
from rollout_core.records import ForkSpec, Question, RunKind, RunSpec
from rollout_core.settings import (
    MAX_WHOLE,
    EndpointSettings,
    EnvironmentSettings,
    GenerationSettings,
    SettingsError,
    check_numbers,
)


@dataclass(frozen=True, slots=True)
class RunRequest:
    """What a user asks for, before validation (CLI flags, a Launch form, a training script)."""

    policy: str = "oracle"
    """`oracle`, `random`, `hf:CHECKPOINT_DIR`, ..."""
    dataset: str | None = None
    """`demo`, `demo:train`, `demo:test`, or a questions file; ignored when `questions` is set."""
    questions: str | None = None
    """A Spider/BIRD questions file."""
    db_dir: str | None = None
    """Its databases (found beside the questions file when omitted)."""
    name: str | None = None
    """Unique run name; a default is made from the policy, dataset and time."""
    limit: int | None = None
    question_ids: Sequence[str] = ()
    samples: int = 1
    generation: GenerationSettings = field(default_factory=GenerationSettings)
    environment: EnvironmentSettings = field(default_factory=EnvironmentSettings)
    kind: RunKind = "batch"
    fork: ForkSpec | None = None
    """For kind `fork`: the recorded episodes continued (built by `app.forks`)."""


@dataclass(frozen=True, slots=True)
class SettingsRequest:
    """Generation and environment settings as a user gives them (CLI flags, a Launch form),
    each None for its default; `build` checks them, a SettingsError naming the field."""

    temperature: float | None = None
    top_p: float | None = None
    max_new_tokens: int | None = None
    seed: int | None = None
    batch_size: int | None = None
    """None: the default, or the endpoint's concurrency when there is one."""
    device: str | None = None
    dtype: str | None = None
    threads: int | None = None
    step_budget: int | None = None
    sample_rows: int | None = None
    max_observation_tokens: int | None = None
    query_timeout: float | None = None
    """Seconds one query may run (the sandbox's deadline)."""
    endpoint: EndpointSettings | None = None

    def build(self) -> tuple[GenerationSettings, EnvironmentSettings]:
        """The settings, defaults filled in; SettingsError names the first bad field."""
        check_numbers(self)  # here, so an error names --query-timeout, not the sandbox's field
        given = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        given = {name: value for name, value in given.items() if value is not None}
        if self.endpoint is not None and self.batch_size is None:
            # The runner sends one iteration's requests at once: as many as the server takes.
            given["batch_size"] = self.endpoint.concurrency
        generation = GenerationSettings(**{k: v for k, v in given.items() if k in _GENERATION})
        environment = EnvironmentSettings(**{k: v for k, v in given.items() if k in _ENVIRONMENT})
        if self.query_timeout is not None:
            if self.query_timeout <= 0:
                raise SettingsError(
                    "query_timeout", f"must be more than 0 seconds, got {self.query_timeout}"
                )
            sandbox = dataclasses.replace(environment.sandbox, deadline_seconds=self.query_timeout)
            environment = dataclasses.replace(environment, sandbox=sandbox)
        return generation, environment


_GENERATION = frozenset(f.name for f in dataclasses.fields(GenerationSettings))
_ENVIRONMENT = frozenset(f.name for f in dataclasses.fields(EnvironmentSettings))


@dataclass(frozen=True, slots=True)
class PlannedRun:
    """A validated spec with the dataset it was made on and the questions it plays."""

    spec: RunSpec
    dataset: Dataset
    questions: list[Question]

    @property
    def planned(self) -> int:
        """Episodes the run will play: questions (a fork: recorded episodes) x samples."""
        if self.spec.fork is not None:
            return len(self.spec.fork.points) * self.spec.samples
        return len(self.questions) * self.spec.samples


def build_spec(req: RunRequest) -> PlannedRun:
    """Validate a request and build its spec; SpecError, DatasetError or PolicyError else."""
    entry, arg = check_spec(req.policy)
    checkpoint = None
    policy = req.policy.strip()
    if entry.name == "hf" and arg:
        checkpoint = str(check_checkpoint_dir(arg))
        policy = f"hf:{checkpoint}"
    if entry.name == "vllm" and arg:
        # A local directory is checked here; anything else is a model id vLLM resolves.
        checkpoint = str(check_checkpoint_dir(arg)) if Path(arg).expanduser().exists() else arg
        policy = f"vllm:{checkpoint}"
    if entry.name == "openai" and arg:
        policy = f"openai:{check_base_url(arg)}"
        if req.generation.endpoint is None:
            raise SpecError(
                "the openai policy needs the model's name: --model NAME "
                "(the server lists its models at BASE_URL/models)"
            )
        checkpoint = req.generation.endpoint.model  # what the runs and Compare pages show
    elif req.generation.endpoint is not None:
        raise SpecError("--model, --api-key-env and --concurrency apply to the openai policy only")
    check_numbers(req)
    if req.samples < 1:
        raise SettingsError("samples", f"must be at least 1, got {req.samples}")
    if req.limit is not None and req.limit < 1:
        raise SettingsError("limit", f"must be at least 1, got {req.limit}")
    if (req.kind == "fork") != (req.fork is not None):
        raise SpecError("a fork run needs its fork points, and only a fork run has them")
    if req.fork is not None and not req.fork.points:
        raise SpecError("a fork run needs at least one recorded episode to continue")
    dataset = resolve_dataset(req.dataset, req.questions, req.db_dir)
    ids = tuple(req.question_ids) or None
    questions = select_questions(dataset, limit=None if ids else req.limit, question_ids=ids)
    if not questions:
        raise SpecError(f"dataset {dataset.name!r} has no questions to run")
    label = f"{entry.name}:{checkpoint}" if checkpoint else policy
    name = checked_run_name(
        (req.name or "").strip() or default_run_name(label, req.dataset or req.questions)
    )
    spec = RunSpec(
        name=name,
        policy=policy,
        dataset=dataset.name,
        questions_path=str(dataset.questions_path),
        db_dir=str(dataset.db_dir),
        generation=req.generation,
        environment=req.environment,
        samples=req.samples,
        limit=None if ids else req.limit,
        question_ids=ids,
        checkpoint=checkpoint,
        kind=req.kind,
        fork=req.fork,
        questions_sha256=None if req.fork else questions_digest(questions),
    )
    plan = PlannedRun(spec, dataset, questions)
    if plan.planned > MAX_WHOLE:  # the store counts a run's episodes in 32 bits
        raise SettingsError(
            "samples",
            f"{req.samples:,} make {plan.planned:,} episodes, more than the {MAX_WHOLE:,} a "
            "run holds; ask for fewer samples or questions",
        )
    return plan


def check_base_url(url: str) -> str:
    """An http(s) server URL without credentials in it, without its trailing slash."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SpecError(f"server URL {url!r} must look like http://HOST:PORT/v1")
    if parts.username or parts.password:
        raise SpecError(
            "the server URL holds credentials; put the key in an environment variable and "
            "name it with --api-key-env"
        )
    return url.strip().rstrip("/")


def questions_digest(questions: Sequence[Question]) -> str:
    """SHA-256 (hex) of the questions in order: each one's id, database, text and gold query."""
    fields = [[q.id, q.db_id, q.question, q.gold_sql] for q in questions]
    return hashlib.sha256(json.dumps(fields).encode()).hexdigest()


def plan_stored(spec: RunSpec) -> PlannedRun:
    """The dataset and questions of a stored spec (for a queued or resumed run)."""
    dataset = dataset_for_spec(spec)
    questions = select_questions(dataset, limit=spec.limit, question_ids=spec.question_ids)
    return PlannedRun(spec, dataset, questions)


def resolve_dataset(dataset: str | None, questions: str | None, db_dir: str | None) -> Dataset:
    """`demo` / `demo:test` (or a questions path) by name, or `questions` [+ `db_dir`]."""
    if questions:
        if dataset:
            raise SpecError(
                f"give a dataset or a questions file, not both (got {dataset!r} and {questions!r})"
            )
        return load_dataset(questions, db_dir)
    if db_dir and dataset is None:
        raise SpecError("a database folder goes with a questions file: give --questions FILE too")
    if dataset is not None and not dataset.strip():
        raise SpecError("the dataset named is empty: give --dataset demo, or a questions file")
    name = dataset or "demo"
    if db_dir and name.split(":")[0] == "demo":
        raise SpecError(
            "the demo dataset brings its own databases; a database folder goes with a "
            "questions file"
        )
    return load_named_dataset(name, db_dir=db_dir or None)


def dataset_for_spec(spec: RunSpec) -> Dataset:
    """The dataset a stored run was made on (a named split reloads as that split);
    `check_stored_dataset` first."""
    if spec.dataset.split(":")[0] == "demo":
        return load_named_dataset(spec.dataset)
    check_stored_dataset(spec)
    return load_dataset(spec.questions_path, spec.db_dir)


def check_stored_dataset(spec: RunSpec) -> None:
    """DatasetError where a stored run's questions file or database folder is no longer where
    the run found it, said as such (the loader's own hint names --questions and --db-dir,
    which a stored run or a fork of it does not take)."""
    if spec.dataset.split(":")[0] == "demo":
        return
    for path, what in ((spec.questions_path, "questions file"), (spec.db_dir, "database folder")):
        if path and not Path(path).exists():
            raise DatasetError(
                f"run {spec.name!r} was played on the {what} {path}, which is not there any "
                "more: put it back there to resume or fork the run, or start a new run where "
                "it is now"
            )


def checked_run_name(name: str) -> str:
    """A run name as the store keeps it (spaces around it dropped); SpecError when none is
    left, or it is longer than the column, holds NUL, or is digits alone (read as an id)."""
    name = name.strip()
    if not name:
        raise SpecError("the run name is empty; give the run a name")
    if problem := run_name_problem(name):
        raise SpecError(f"the run name {problem}; choose another name")
    return name


def default_run_name(policy: str, dataset: str | None) -> str:
    """`<checkpoint or policy>-<dataset>-<time>`, e.g. `checkpoint-500-demo-20261201-101500`."""
    name, arg = split_spec(policy)
    label = Path(arg).name if arg else name
    return f"{label}-{Path(dataset or 'demo').stem}-{time.strftime('%Y%m%d-%H%M%S')}"
