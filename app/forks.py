"""Fork recorded episodes: a new run replays their first steps, then a new policy takes over.

`plan_episode_fork` continues one episode from a chosen step; `plan_failure_forks` continues
every failed episode of a run from its first failing step; `not_forkable` says why a run's
episodes cannot be forked (steps another framework played). Both build a `fork` RunSpec through
`rollout_core.specs.build_spec`, so a fork is created, queued, played, resumed and cancelled
like any run; `fork_tasks` turns its spec back into episodes with their recorded prefixes.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.importers.detect import format_label
from app.plural import counted
from rollout_core.errors import RollscopeError, SpecError
from rollout_core.failure_classes import action_key
from rollout_core.fork_replay import ForkStart
from rollout_core.policies.registry import split_spec
from rollout_core.records import (
    EpisodeKey,
    ForkPoint,
    ForkRule,
    ForkSpec,
    Outcome,
    RunSpec,
)
from rollout_core.runner import EpisodeTask, episode_seed
from rollout_core.settings import EndpointSettings, GenerationSettings, SettingsError
from rollout_core.specs import (
    PlannedRun,
    RunRequest,
    build_spec,
    check_base_url,
    check_stored_dataset,
)
from storage.read_models import EpisodeFilter, RunSummary, StoredStep
from storage.store import Store

FAILED: tuple[Outcome, ...] = ("wrong", "budget_exhausted", "error")


class ForkError(RollscopeError, ValueError):
    """A fork that cannot be made or played; the message names the problem and the fix."""


@dataclass(frozen=True, slots=True)
class ForkRequest:
    """How to continue: every field left None keeps the source run's own setting."""

    policy: str | None = None
    """`oracle`, `random`, `hf:CHECKPOINT_DIR`, ...; None: the source run's policy."""
    generation: Mapping[str, Any] = field(default_factory=dict)
    """Generation settings changed from the source run's (by field name); the rest, the seed
    included, stay the source's: same seed, same sampling noise."""
    samples: int = 1
    """Continuations of each recorded episode (distinct seeds)."""
    name: str | None = None
    endpoint: Mapping[str, Any] = field(default_factory=dict)
    """openai server settings given (by `EndpointSettings` field name); the rest are the
    source's when the fork plays on the source's own server, the defaults on another."""


@dataclass(frozen=True, slots=True)
class FailureForks:
    """A planned `--at first-error` fork and what it left out."""

    plan: PlannedRun
    failed: int
    """Failed episodes of the source run."""
    skipped: int
    """Failed episodes with no step to fork from (their question could not start)."""


def not_forkable(run: RunSummary) -> str | None:
    """Why the episodes of `run` cannot be forked, as a clause; None when they can.

    A fork executes the recorded steps again in rollscope's environment and needs the very
    observations recorded. An imported or Recorder run's steps were played in its trainer's own
    environment, with its own formatting, so a replay of them almost never reads the same.
    """
    if run.source_format is None:
        return None
    where = (
        "recorded by a Recorder in a loop of its own"
        if run.source_format == "recorder"
        else f"imported from {format_label(run.source_format)} files"
    )
    return (
        f"run {run.name!r} was {where}, so its steps were played in another framework's "
        "environment; rollscope can only replay steps it played (fork an episode of a "
        "rollscope run)"
    )


def first_failing_step(steps: Sequence[StoredStep], outcome: Outcome | None) -> int | None:
    """The first step where a failed episode went wrong; None for a correct or empty one.

    A step fails when its action errs (an SQL error, an unknown table, a refusal, a grading
    failure), its output had no action line, it repeats an earlier action, or it is a wrong
    ANSWER. An episode whose budget ran out on distinct, successful steps fails at its last
    step, where an answer was due. Steps a fork replayed from its source are not its own
    mistakes and are passed over.
    """
    if outcome is None or outcome == "correct" or not steps:
        return None
    seen: set[tuple[str, str]] = set()
    for s in steps:
        key = action_key(s.action, s.acted_on)
        repeated = key in seen
        seen.add(key)
        if s.replayed:
            continue
        wrong_answer = s.action == "ANSWER" and s.parsed and outcome == "wrong"
        if s.error is not None or not s.parsed or repeated or wrong_answer:
            return s.step_no
    return steps[-1].step_no


def plan_episode_fork(store: Store, episode_id: int, step: int, req: ForkRequest) -> PlannedRun:
    """A fork of one recorded episode whose new policy takes over at `step`."""
    found = store.get_episode(episode_id)
    if found is None:
        raise ForkError(f"no episode {episode_id} in the store (find ids with the Episodes page)")
    if why := not_forkable(found.run):
        raise ForkError(f"episode {episode_id} cannot be forked: {why}")
    if found.summary.outcome is None:
        raise ForkError(f"episode {episode_id} is still being played; fork it once it finishes")
    n = len(found.steps)
    if n == 0:
        raise ForkError(f"episode {episode_id} has no steps to fork (its question never started)")
    if not 1 <= step <= n:
        raise ForkError(
            f"--step must be between 1 and {n} (episode {episode_id} has {counted(n, 'step')}; "
            "the new policy plays that step, the ones before are replayed)"
        )
    point = ForkPoint(episode_id, step, found.summary.question_id, found.summary.sample_index)
    label = f"ep{episode_id}-step{step}"
    return _plan(found.run, "step", [point], req, label)


def queue_episode_fork(store: Store, episode_id: int, step: int, req: ForkRequest) -> int:
    """Create the fork of one episode at `step` as a queued run (a worker plays it: `rollscope
    run --run-id ID`); its id. ForkError, with nothing written, when it cannot be made."""
    plan = plan_episode_fork(store, episode_id, step, req)
    fork_tasks(store, plan)  # a source gone or a question changed: refused now, not in the worker
    if store.run_named(plan.spec.name) is not None:
        raise ForkError(f"a run named {plan.spec.name!r} exists; give the fork another name")
    return store.create_run(plan.spec, episodes_planned=plan.planned, status="queued")


def plan_failure_forks(store: Store, run_ref: str, req: ForkRequest) -> FailureForks:
    """A fork of every failed episode of a run, each at its first failing step."""
    run = store.find_run(run_ref)
    if run is None:
        raise ForkError(f"no run {run_ref!r} in the store (list them with `rollscope runs`)")
    if why := not_forkable(run):
        raise ForkError(f"cannot fork: {why}")
    points: list[ForkPoint] = []
    failed = skipped = 0
    for detail in store.iter_episode_details(run.id, flt=EpisodeFilter(outcomes=FAILED)):
        failed += 1
        step = first_failing_step(detail.steps, detail.summary.outcome)
        if step is None:
            skipped += 1
            continue
        ep = detail.summary
        points.append(ForkPoint(ep.id, step, ep.question_id, ep.sample_index))
    if not points:
        why = "no failed episodes" if failed == 0 else "no failed episodes with steps"
        raise ForkError(f"run {run.name!r} has {why} to fork")
    return FailureForks(_plan(run, "first-error", points, req, "first-error"), failed, skipped)


def _plan(
    source: RunSummary,
    rule: ForkRule,
    points: list[ForkPoint],
    req: ForkRequest,
    label: str,
) -> PlannedRun:
    try:
        spec = RunSpec.from_stored(source.spec)
    except SpecError as exc:
        raise ForkError(f"run {source.name!r} cannot be forked: {exc}") from None
    policy = (req.policy or spec.policy).strip()
    generation = _generation(spec, policy, req)
    served = generation.endpoint.model if generation.endpoint is not None else None
    name = (req.name or "").strip() or default_fork_name(source.name, label, policy, served)
    check_stored_dataset(spec)
    demo = spec.dataset.split(":")[0] == "demo"
    request = RunRequest(
        policy=policy,
        dataset=spec.dataset if demo else None,
        questions=None if demo else spec.questions_path,
        db_dir=None if demo else spec.db_dir,
        name=name,
        question_ids=tuple(dict.fromkeys(p.question_id for p in points)),
        samples=req.samples,
        generation=generation,
        # The source's environment: another budget or cap would change what the replay sees.
        environment=spec.environment,
        kind="fork",
        fork=ForkSpec(source.id, source.name, rule, tuple(points)),
    )
    return build_spec(request)


def _generation(spec: RunSpec, policy: str, req: ForkRequest) -> GenerationSettings:
    """The source's generation settings with the changes asked. Its server settings belong to
    its server: a fork with another policy drops them, one on the same server keeps them (so
    its model) under the changes given; SettingsError names a server setting given to a
    policy that is no server."""
    changes = dict(req.generation)
    asked = dict(req.endpoint)
    endpoint: EndpointSettings | None = None
    if split_spec(policy)[0] != "openai":
        if asked:
            raise SettingsError(
                next(iter(asked)), f"applies to the openai policy only; the fork plays {policy!r}"
            )
    elif _same_server(spec.policy, policy) and spec.generation.endpoint is not None:
        endpoint = dataclasses.replace(spec.generation.endpoint, **asked)
    elif "model" in asked:
        endpoint = EndpointSettings(**asked)
    # Without a model on a new server, build_spec asks for --model.
    if endpoint is not None and endpoint != spec.generation.endpoint:
        # As `run` does: one iteration sends as many requests as the server takes at once.
        changes.setdefault("batch_size", endpoint.concurrency)
    return dataclasses.replace(spec.generation, **changes, endpoint=endpoint)


def _same_server(source: str, fork: str) -> bool:
    """Whether two policies are `openai:` on one server URL (as `build_spec` writes it)."""
    (source_name, source_url), (fork_name, fork_url) = split_spec(source), split_spec(fork)
    if source_name != "openai" or fork_name != "openai" or not source_url or not fork_url:
        return False
    try:
        return check_base_url(source_url) == check_base_url(fork_url)
    except SpecError:
        return False  # build_spec names the bad URL


def default_fork_name(source: str, label: str, policy: str, model: str | None = None) -> str:
    """`<source>-<label>-<policy, checkpoint or model>-<HHMMSS>` (`model`: the one an openai
    policy's server is asked for, named rather than its URL): short enough for a chart label;
    the run's kind says it is a fork, its spec when it was made and what it continues."""
    name, arg = split_spec(policy)
    who = Path(model).name if model else Path(arg).name if arg else name
    return f"{source}-{label}-{who}-{time.strftime('%H%M%S')}"


def fork_tasks(
    store: Store, plan: PlannedRun, skip: Iterable[EpisodeKey] = ()
) -> list[EpisodeTask]:
    """The episodes of a fork run, each with its source's recorded steps before the fork step,
    minus those in `skip` (already finished). ForkError when a source is gone, was not played
    by rollscope, or its question no longer reads the same in the dataset."""
    spec = plan.spec
    fork = spec.fork
    if fork is None:
        raise ForkError(f"run {spec.name!r} is not a fork")
    done = set(skip)
    sources = {d.summary.id: d for d in store.get_episodes([p.episode_id for p in fork.points])}
    questions = {q.id: q for q in plan.questions}
    tasks: list[EpisodeTask] = []
    for point in fork.points:
        source = sources.get(point.episode_id)
        if source is None:
            raise ForkError(
                f"episode {point.episode_id} of run {fork.source_run!r}, which this fork "
                "continues, is no longer in the store"
            )
        if why := not_forkable(source.run):  # a fork queued before forks refused these
            raise ForkError(f"episode {point.episode_id} cannot be forked: {why}")
        question = questions[point.question_id]
        ep = source.summary
        if (question.db_id, question.gold_sql) != (ep.db_id, source.gold_sql):
            raise ForkError(
                f"question {question.id!r} changed in dataset {spec.dataset!r} since run "
                f"{fork.source_run!r} played it (another database or gold query)"
            )
        start = ForkStart(
            source_episode=ep.id,
            steps=tuple(source.steps[: point.step - 1]),
            prompt=source.steps[point.step - 1].prompt if point.step <= len(source.steps) else None,
        )
        for i in range(spec.samples):
            index = point.sample_index * spec.samples + i
            if EpisodeKey(question.id, index) in done:
                continue
            seed = episode_seed(spec.generation.seed, question.id, index)
            tasks.append(EpisodeTask(question, index, seed, fork=start))
    return tasks
