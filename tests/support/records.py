"""Records for tests to write through a store's sink (`tests.support.stores.write_run`): a
run's spec, an episode's start, its steps and its finish, and whole episodes as batches.

The defaults are plain and derived from the ids (`step("q1", 0, 2)` argues `arg 2` and sees
`obs 2`), so a test can count what it wrote; any other field of the record is a keyword.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

from rollout_core.records import (
    ActionKind,
    EpisodeRecord,
    EpisodeStart,
    FailureClass,
    IterationBatch,
    Outcome,
    RunSpec,
    StepRecord,
    TokenTrace,
)
from rollout_core.settings import EnvironmentSettings


def spec(name: str = "run-a", **kw: Any) -> RunSpec:
    """An `oracle` run named `name` over made-up demo paths with a step budget of 5; `kw`
    sets any field (policy, kind, checkpoint, samples, training, dataset...)."""
    return RunSpec(
        name=name,
        policy=str(kw.pop("policy", "oracle")),
        dataset=kw.pop("dataset", "demo"),
        questions_path=kw.pop("questions_path", "/data/questions.json"),
        db_dir=kw.pop("db_dir", "/data/db"),
        environment=kw.pop("environment", EnvironmentSettings(step_budget=5)),
        **kw,
    )


def start(
    q: str, sample: int = 0, *, db_id: str = "concert_singer", text: str = "", **kw: Any
) -> EpisodeStart:
    """Episode (q, sample) just reset; `kw` sets its origin (train_step, group_index...)."""
    record = EpisodeStart(
        question_id=q,
        sample_index=sample,
        seed=1000 + sample,
        db_id=db_id,
        question=text or f"How many rows for {q}?",
        gold_sql=f"SELECT count(*) FROM t_{q}",
        started_at=datetime.now(UTC),
    )
    return dataclasses.replace(record, **kw) if kw else record


def step(
    q: str,
    sample: int,
    step_no: int,
    *,
    action: ActionKind | None = "QUERY",
    parsed: bool = True,
    error: str | None = None,
    raw: str = "",
    reward: float = 0.0,
    done: bool = False,
    **kw: Any,
) -> StepRecord:
    """Step `step_no` of episode (q, sample); `kw` sets any other field (prompt, observation,
    argument, tokens...)."""
    record = StepRecord(
        question_id=q,
        sample_index=sample,
        step_no=step_no,
        prompt=({"role": "user", "content": f"prompt {q}/{sample}/{step_no}"},),
        raw_output=raw or f"{action}: arg {step_no}",
        action=action,
        argument=f"arg {step_no}",
        parsed=parsed,
        observation=f"obs {step_no}",
        error=error,
        reward=reward,
        done=done,
        tokens_in=10 * step_no,
        tokens_out=step_no,
        policy_seconds=0.01,
        env_seconds=0.002,
    )
    return dataclasses.replace(record, **kw) if kw else record


def finish(
    q: str,
    sample: int,
    outcome: Outcome,
    reward: float,
    steps: int,
    *,
    duration: float | None = 1.0,
    failure_class: FailureClass | None = None,
    answer: str | None = None,
    **kw: Any,
) -> EpisodeRecord:
    """Episode (q, sample) finished after `steps` steps; `kw` sets any other field."""
    record = EpisodeRecord(
        question_id=q,
        sample_index=sample,
        outcome=outcome,
        reward=reward,
        progress=0.25,
        operational=1.0,
        steps=steps,
        answer=answer or ("42" if outcome in ("correct", "wrong") else None),
        duration_seconds=duration,
        error="boom" if outcome == "error" else None,
        failure_class=failure_class,
        ended_at=datetime.now(UTC),
    )
    return dataclasses.replace(record, **kw) if kw else record


def play(
    q: str,
    sample: int,
    outcome: Outcome,
    reward: float,
    n_steps: int,
    *,
    unparsed: int = 0,
    sql_errors: int = 0,
    duration: float | None = 1.0,
    db_id: str = "concert_singer",
    raw: str = "",
) -> IterationBatch:
    """One whole episode as a single batch: start, n steps (last ANSWER), finish; the first
    `unparsed` steps unparsed and the first `sql_errors` refused (never the last)."""
    steps = []
    for i in range(1, n_steps + 1):
        last = i == n_steps
        steps.append(
            step(
                q,
                sample,
                i,
                action="ANSWER" if last else "QUERY",
                parsed=not (i <= unparsed and not last),
                error="no such column" if (not last and i <= sql_errors) else None,
                raw=raw,
                done=last,
                reward=reward if last else 0.0,
            )
        )
    return IterationBatch(
        started=[start(q, sample, db_id=db_id)],
        steps=steps,
        finished=[finish(q, sample, outcome, reward, n_steps, duration=duration)],
    )


def group(
    q: str,
    samples: range,
    rewards: list[float],
    at: tuple[int, int],
    *,
    unparsed: int = 0,
) -> list[IterationBatch]:
    """A trainer's GRPO group at (training step, group index), as two batches: the starts,
    then each episode's one step of two tokens and its finish with its reward (correct from
    1.0 up); the first `unparsed` samples' steps unparsed."""
    train_step, group_index = at
    trace = TokenTrace(text=("x", "x"), logprobs=(-1.0, -2.0))
    starts = [start(q, s, train_step=train_step, group_index=group_index) for s in samples]
    steps = [
        step(q, s, 1, parsed=i >= unparsed, done=True, tokens=trace) for i, s in enumerate(samples)
    ]
    finished = [
        finish(q, s, "correct" if r >= 1.0 else "wrong", r, 1, tokens_out=2, mean_logprob=-1.5)
        for s, r in zip(samples, rewards, strict=True)
    ]
    return [IterationBatch(started=starts), IterationBatch(steps=steps, finished=finished)]
