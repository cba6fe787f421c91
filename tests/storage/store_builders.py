"""Small record builders for the store tests."""

from __future__ import annotations

from rollout_core.failure_classes import FailureClass
from rollout_core.records import (
    ActionKind,
    EpisodeRecord,
    EpisodeStart,
    IterationBatch,
    Outcome,
    RunSpec,
    StepRecord,
)
from rollout_core.settings import EnvironmentSettings


def spec(name: str = "run-a", **kw: object) -> RunSpec:
    return RunSpec(
        name=name,
        policy=str(kw.pop("policy", "oracle")),
        dataset="demo",
        questions_path="/data/questions.json",
        db_dir="/data/db",
        environment=EnvironmentSettings(step_budget=5),
        **kw,  # type: ignore[arg-type]
    )


def start(
    q: str, sample: int = 0, *, db_id: str = "concert_singer", text: str = ""
) -> EpisodeStart:
    return EpisodeStart(
        question_id=q,
        sample_index=sample,
        seed=1000 + sample,
        db_id=db_id,
        question=text or f"How many rows for {q}?",
        gold_sql=f"SELECT count(*) FROM t_{q}",
    )


def step(
    q: str,
    sample: int,
    step_no: int,
    *,
    action: ActionKind = "QUERY",
    parsed: bool = True,
    error: str | None = None,
    raw: str = "",
    reward: float = 0.0,
    done: bool = False,
) -> StepRecord:
    return StepRecord(
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


def finish(
    q: str,
    sample: int,
    outcome: Outcome,
    reward: float,
    steps: int,
    *,
    duration: float = 1.0,
    failure_class: FailureClass | None = None,
    answer: str | None = None,
) -> EpisodeRecord:
    return EpisodeRecord(
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
    )


def play(
    q: str,
    sample: int,
    outcome: Outcome,
    reward: float,
    n_steps: int,
    *,
    unparsed: int = 0,
    sql_errors: int = 0,
    duration: float = 1.0,
    db_id: str = "concert_singer",
    raw: str = "",
) -> IterationBatch:
    """One whole episode as a single batch: start, n steps (last ANSWER), finish."""
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
