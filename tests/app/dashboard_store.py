"""A small real store for the dashboard tests: two checkpoints on a real SQLite benchmark."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rollout_core.records import (
    ActionKind,
    EpisodeRecord,
    EpisodeStart,
    IterationBatch,
    RunSpec,
    StepRecord,
)
from rollout_core.sandbox import SandboxLimits, format_rows, open_readonly, run_select
from rollout_core.settings import EnvironmentSettings
from storage.store import Store
from tests.fixtures import QUESTIONS, make_benchmark

XSS_OUTPUT = "<script>alert('x')</script><b>bold</b> **not bold**"
DB_ID = "concerts"


@dataclass(frozen=True)
class FixtureStore:
    """Where the fixture store lives and the ids the tests navigate to."""

    url: str
    run_a: int
    run_b: int
    running: int
    xss_episode: int
    query_episode: int
    question_ids: tuple[str, ...]
    db_dir: Path


def _spec(name: str, checkpoint: str, questions: Path, db_dir: Path) -> RunSpec:
    return RunSpec(
        name=name,
        policy=f"hf:{checkpoint}",
        dataset="concerts",
        questions_path=str(questions),
        db_dir=str(db_dir),
        checkpoint=checkpoint,
        environment=EnvironmentSettings(step_budget=5),
    )


def _observation(db_dir: Path, sql: str) -> tuple[str, str | None]:
    conn = open_readonly(db_dir / DB_ID / f"{DB_ID}.sqlite")
    try:
        res = run_select(conn, sql, SandboxLimits())
    finally:
        conn.close()
    # As the runner records it: the model saw the error as "Error: ..." (rollout_core/prompts.py).
    if res.error is not None:
        return f"Error: {res.error}", res.error
    return format_rows(res), None


def _step(
    qid: str,
    no: int,
    action: ActionKind,
    arg: str,
    *,
    raw: str | None = None,
    parsed: bool = True,
    observation: str = "",
    error: str | None = None,
    reward: float = 0.0,
    done: bool = False,
    sample: int = 0,
) -> StepRecord:
    prompt = (
        {"role": "system", "content": "You answer with one action."},
        {"role": "user", "content": f"Question {qid}, step {no}"},
    )
    return StepRecord(
        question_id=qid,
        sample_index=sample,
        step_no=no,
        prompt=prompt,
        raw_output=raw if raw is not None else f"{action} {arg}",
        action=action,
        argument=arg,
        parsed=parsed,
        observation=observation,
        error=error,
        reward=reward,
        done=done,
        tokens_in=100,
        tokens_out=10,
        policy_seconds=0.05,
        env_seconds=0.001,
    )


def episode_batch(
    db_dir: Path,
    qid: str,
    question: str,
    gold: str,
    *,
    correct: bool,
    xss: bool = False,
    sample: int = 0,
) -> IterationBatch:
    """One finished episode: DESCRIBE, then QUERY (gold or a broken one), then ANSWER."""
    sql = gold if correct else "SELECT nme FROM singer"
    obs, err = _observation(db_dir, sql)
    steps = [
        _step(
            qid,
            1,
            "DESCRIBE",
            "singer",
            observation="singer(singer_id, name, country, age)",
            sample=sample,
        ),
        _step(
            qid,
            2,
            "QUERY",
            sql,
            observation=obs,
            error=err,
            reward=0.1 if correct else 0.0,
            raw=XSS_OUTPUT if xss else None,
            parsed=not xss,
            sample=sample,
        ),
        _step(
            qid,
            3,
            "ANSWER",
            "42",
            observation="Answer submitted.",
            reward=1.0 if correct else 0.0,
            done=True,
            sample=sample,
        ),
    ]
    return IterationBatch(
        started=[EpisodeStart(qid, sample, 7 + sample, DB_ID, question, gold)],
        steps=steps,
        finished=[
            EpisodeRecord(
                question_id=qid,
                sample_index=sample,
                outcome="correct" if correct else "wrong",
                reward=1.1 if correct else 0.0,
                progress=0.1 if correct else 0.0,
                operational=2.0,
                steps=3,
                answer="42",
                duration_seconds=0.5,
            )
        ],
    )


def build_fixture_store(root: Path) -> FixtureStore:
    """Runs ckpt-1000 (right on questions 0-2) and ckpt-2000 (right on 0, 1, 3, 4), plus a
    running run; episode q-count of ckpt-2000 has an unparsed output holding HTML tags."""
    questions, db_dir = make_benchmark(root / "bench")
    url = str(root / "store.db")
    store = Store(url)
    right = {"ckpt-1000": {0, 1, 2}, "ckpt-2000": {0, 1, 3, 4}}
    ids: dict[str, int] = {}
    for name, good in right.items():
        run_id = store.create_run(
            _spec(name, f"/models/{name}", questions, db_dir), episodes_planned=len(QUESTIONS)
        )
        ids[name] = run_id
        for i, (qid, text, gold) in enumerate(QUESTIONS):
            store.sink(run_id).write(
                episode_batch(
                    db_dir, qid, text, gold, correct=i in good, xss=name == "ckpt-2000" and i == 0
                ),
            )
        store.set_run_status(run_id, "completed")
    running = store.create_run(
        _spec("ckpt-3000", "/models/ckpt-3000", questions, db_dir), episodes_planned=10
    )
    store.sink(running).write(episode_batch(db_dir, *QUESTIONS[0], correct=True))
    from storage.read_models import EpisodeFilter

    def episode_of(run_id: int, qid: str) -> int:
        page = store.list_episodes(EpisodeFilter(run_ids=(run_id,), question_id=qid))
        return page.items[0].id

    fixture = FixtureStore(
        url=url,
        run_a=ids["ckpt-1000"],
        run_b=ids["ckpt-2000"],
        running=running,
        xss_episode=episode_of(ids["ckpt-2000"], QUESTIONS[0][0]),
        query_episode=episode_of(ids["ckpt-1000"], QUESTIONS[1][0]),
        question_ids=tuple(q[0] for q in QUESTIONS),
        db_dir=db_dir,
    )
    store.close()
    return fixture


@dataclass(frozen=True)
class ComparisonStore:
    """Runs on different question sets, and runs with several samples per question."""

    url: str
    train: int
    """Questions 0-2, one sample each, all right."""
    heldout: int
    """Questions 3-5: none shared with `train`."""
    everything: int
    """All six questions, right on 0 and 3."""
    sampled_a: int
    """Two samples per question of questions 0-1 (sample 1 right on question 0)."""
    sampled_b: int
    """Two samples per question of questions 0-1, all wrong."""


def build_comparison_store(root: Path) -> ComparisonStore:
    """Runs for Compare's shared-question and sample tests."""
    questions, db_dir = make_benchmark(root / "bench")
    url = str(root / "compare.db")
    store = Store(url)

    def run(name: str, picks: list[tuple[int, int, bool]]) -> int:
        run_id = store.create_run(
            _spec(name, f"/models/{name}", questions, db_dir), episodes_planned=len(picks)
        )
        for i, sample, correct in picks:
            qid, text, gold = QUESTIONS[i]
            store.sink(run_id).write(
                episode_batch(db_dir, qid, text, gold, correct=correct, sample=sample)
            )
        store.set_run_status(run_id, "completed")
        return run_id

    made = ComparisonStore(
        url=url,
        train=run("train", [(i, 0, True) for i in range(3)]),
        heldout=run("heldout", [(i, 0, False) for i in range(3, 6)]),
        everything=run("everything", [(i, 0, i in (0, 3)) for i in range(6)]),
        sampled_a=run("sampled-a", [(i, s, i == 0 and s == 1) for i in range(2) for s in range(2)]),
        sampled_b=run("sampled-b", [(i, s, False) for i in range(2) for s in range(2)]),
    )
    store.close()
    return made
