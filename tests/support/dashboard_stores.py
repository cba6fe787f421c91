"""The stores the dashboard's page and browser tests open, on the concerts benchmark
(`tests.support.benchmark`), each with the ids the tests navigate to.

- `build_fixture_store`: two completed checkpoints and a running one, one sample a question.
- `build_comparison_store`: runs on different question sets, and with several samples.
- `build_analysis_store`: three checkpoints of four samples played by the real runner with
  token traces (`tests.support.personas`), for groups, failure classes and flips.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollout_core.datasets import load_dataset
from rollout_core.records import ActionKind, IterationBatch, RunSpec, StepRecord
from rollout_core.sandbox import SandboxLimits, format_rows, open_readonly, run_select
from rollout_core.settings import EnvironmentSettings
from storage.read_models import EpisodeFilter
from storage.store import Store
from tests.support import records
from tests.support.benchmark import QUESTIONS, make_benchmark
from tests.support.personas import RUN_NAMES, SAMPLES, STEP_BUDGET, Persona
from tests.support.stores import play_run, write_run

XSS_OUTPUT = "<script>alert('x')</script><b>bold</b> **not bold**"
DB_ID = "concerts"


def _spec(name: str, questions: Path, db_dir: Path, **kw: Any) -> RunSpec:
    """A run of checkpoint /models/NAME on the concerts benchmark."""
    checkpoint = f"/models/{name}"
    return records.spec(
        name,
        policy=f"hf:{checkpoint}",
        dataset="concerts",
        questions_path=str(questions),
        db_dir=str(db_dir),
        checkpoint=checkpoint,
        **kw,
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
    qid: str, sample: int, no: int, action: ActionKind, arg: str, *, raw: str | None = None,
    **kw: Any,
) -> StepRecord:  # fmt: skip
    prompt = (
        {"role": "system", "content": "You answer with one action."},
        {"role": "user", "content": f"Question {qid}, step {no}"},
    )
    return records.step(
        qid, sample, no, action=action, raw=raw if raw is not None else f"{action} {arg}",
        argument=arg, prompt=prompt, tokens_in=100, tokens_out=10, policy_seconds=0.05,
        env_seconds=0.001, **kw,
    )  # fmt: skip


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
    """One finished episode of the fixture store: DESCRIBE, then QUERY (gold or a broken
    one, run on the benchmark's database), then ANSWER."""
    sql = gold if correct else "SELECT nme FROM singer"
    obs, err = _observation(db_dir, sql)
    steps = [
        _step(qid, sample, 1, "DESCRIBE", "singer",
              observation="singer(singer_id, name, country, age)"),
        _step(qid, sample, 2, "QUERY", sql, observation=obs, error=err,
              reward=0.1 if correct else 0.0, raw=XSS_OUTPUT if xss else None, parsed=not xss),
        _step(qid, sample, 3, "ANSWER", "42", observation="Answer submitted.",
              reward=1.0 if correct else 0.0, done=True),
    ]  # fmt: skip
    outcome, reward, progress = ("correct", 1.1, 0.1) if correct else ("wrong", 0.0, 0.0)
    ended = records.finish(
        qid, sample, outcome, reward, 3, duration=0.5, answer="42", progress=progress,
        operational=2.0,
    )  # fmt: skip
    started = records.start(qid, sample, db_id=DB_ID, text=question, seed=7 + sample, gold_sql=gold)
    return IterationBatch(started=[started], steps=steps, finished=[ended])


def _episode_of(store: Store, run_id: int, qid: str, sample: int = 0) -> int:
    page = store.list_episodes(EpisodeFilter(run_ids=(run_id,), question_id=qid))
    return next(e.id for e in page.items if e.sample_index == sample)


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


def build_fixture_store(root: Path) -> FixtureStore:
    """Runs ckpt-1000 (right on questions 0-2) and ckpt-2000 (right on 0, 1, 3, 4), plus a
    running run; episode q-count of ckpt-2000 has an unparsed output holding HTML tags."""
    questions, db_dir = make_benchmark(root / "bench")
    url = str(root / "store.db")
    store = Store(url)
    right = {"ckpt-1000": {0, 1, 2}, "ckpt-2000": {0, 1, 3, 4}}
    ids = {}
    for name, good in right.items():
        batches = [
            episode_batch(
                db_dir, qid, text, gold, correct=i in good, xss=name == "ckpt-2000" and i == 0
            )
            for i, (qid, text, gold) in enumerate(QUESTIONS)
        ]
        ids[name] = write_run(store, _spec(name, questions, db_dir), batches)
    running = write_run(
        store,
        _spec("ckpt-3000", questions, db_dir),
        [episode_batch(db_dir, *QUESTIONS[0], correct=True)],
        planned=10,
        status=None,
    )
    fixture = FixtureStore(
        url=url,
        run_a=ids["ckpt-1000"],
        run_b=ids["ckpt-2000"],
        running=running,
        xss_episode=_episode_of(store, ids["ckpt-2000"], QUESTIONS[0][0]),
        query_episode=_episode_of(store, ids["ckpt-1000"], QUESTIONS[1][0]),
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
        batches = [
            episode_batch(db_dir, *QUESTIONS[i], correct=correct, sample=sample)
            for i, sample, correct in picks
        ]
        return write_run(store, _spec(name, questions, db_dir), batches)

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


@dataclass(frozen=True)
class AnalysisStore:
    """Where the store lives and the ids the tests navigate to."""

    url: str
    runs: dict[str, int]
    hostile_episode: int
    """ckpt-100, q-france, sample 3: every output is HOSTILE_OUTPUT, with tokens."""
    solved_episode: int
    """ckpt-100, q-count, sample 0: DESCRIBE, QUERY, ANSWER, with tokens."""
    db_dir: Path


def build_analysis_store(root: Path) -> AnalysisStore:
    """Three completed runs of SAMPLES samples on the concerts benchmark, each played by its
    `Persona` through the real runner."""
    questions, db_dir = make_benchmark(root / "bench")
    dataset = load_dataset(questions, db_dir)
    url = str(root / "analysis.db")
    store = Store(url)
    environment = EnvironmentSettings(step_budget=STEP_BUDGET)
    runs = {
        name: play_run(
            store,
            _spec(name, questions, db_dir, samples=SAMPLES, environment=environment),
            dataset,
            Persona(name),
            samples=SAMPLES,
            batch_size=8,
            step_budget=STEP_BUDGET,
        )
        for name in RUN_NAMES
    }
    fixture = AnalysisStore(
        url=url,
        runs=runs,
        hostile_episode=_episode_of(store, runs["ckpt-100"], "q-france", 3),
        solved_episode=_episode_of(store, runs["ckpt-100"], "q-count", 0),
        db_dir=db_dir,
    )
    store.close()
    return fixture
