"""Build stores for tests the one way rollscope's producers do: a run created, its records
written through `Store.sink`, its status set.

`write_run` writes given records (`tests.support.records`); `play_run` plays a policy with the
real runner into the run. The named stores several test folders share are built from these:
`fill_store` here, the dashboard's in `tests.support.dashboard_stores`. Only a benchmark that
needs millions of rows fills a store around the sink (`tests.support.synthetic`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from rollout_core.datasets import Dataset
from rollout_core.policies.base import Policy
from rollout_core.records import (
    IterationBatch,
    ListSink,
    Outcome,
    Question,
    RunSpec,
    RunStatus,
    Sink,
)
from rollout_core.runner import plan_episodes, run_episodes
from storage.read_models import EpisodeFilter, RunKey
from storage.store import Store
from storage.writes import merged
from tests.support.records import finish, group, play, spec, start, step


def write_run(
    store: Store,
    run_spec: RunSpec,
    batches: Iterable[IterationBatch],
    *,
    planned: int | None = None,
    status: RunStatus | None = "completed",
) -> int:
    """A run of `run_spec` holding `batches`, written through its sink in order, then moved
    to `status` (None leaves it running); returns its id. `planned` defaults to the number of
    episodes the batches start."""
    if planned is None:
        batches = list(batches)
        planned = len({s.key for b in batches for s in b.started})
    run_id = store.create_run(run_spec, episodes_planned=planned)
    sink = store.sink(run_id)
    for batch in batches:
        sink.write(batch)
    if status is not None:
        store.set_run_status(run_id, status)
    return run_id


class TeeSink:
    """Writes every batch to a sink and keeps a copy of the records in `copy`."""

    def __init__(self, sink: Sink, copy: ListSink | None = None) -> None:
        self.sink = sink
        self.copy = copy if copy is not None else ListSink()

    def write(self, batch: IterationBatch) -> None:
        self.sink.write(batch)
        self.copy.write(batch)


def play_run(
    store: Store,
    run_spec: RunSpec,
    dataset: Dataset,
    policy: Policy,
    *,
    questions: Sequence[Question] | None = None,
    samples: int = 1,
    seed: int = 0,
    group_seconds: float = 0.0,
    status: RunStatus | None = "completed",
    keep: ListSink | None = None,
    **runner: Any,
) -> int:
    """A run of `policy` over `questions` (default: the whole dataset), `samples` each,
    played by the real runner into the run's sink (grouped by `group_seconds`), then moved to
    `status`; returns its id. `keep` receives a copy of every batch; `runner` goes to
    `run_episodes` (batch_size, environment, step_budget...)."""
    tasks = plan_episodes(dataset.questions if questions is None else questions, samples, seed)
    run_id = store.create_run(run_spec, episodes_planned=len(tasks))
    with store.sink(run_id, group_seconds=group_seconds) as sink:
        run_episodes(dataset, tasks, policy, TeeSink(sink, keep) if keep else sink, **runner)
    if status is not None:
        store.set_run_status(run_id, status)
    return run_id


def correct_once_each(store: Store, name: str, questions: range) -> int:
    """A completed run of one correct one-step episode per question `q<i>`, written as one
    batch; returns its id."""
    batches = [play(f"q{i}", 0, "correct", 1.0, 1) for i in questions]
    return write_run(store, spec(name), [merged(batches)], planned=len(batches))


def play_group(
    sink: Sink, q: str, samples: range, rewards: list[float], at: tuple[int, int], **kw: Any
) -> None:
    """Write a trainer's GRPO group (`tests.support.records.group`) to a run's sink."""
    for batch in group(q, samples, rewards, at, **kw):
        sink.write(batch)


def paged_question_ids(store: Store, runs: Sequence[RunKey]) -> list[str]:
    """The questions `compare_runs` lists for these runs, read a page of one at a time."""
    seen: list[str] = []
    cursor = None
    while True:
        page = store.compare_runs(runs, limit=1, cursor=cursor)
        seen += [q.question_id for q in page.items]
        cursor = page.next_cursor
        if cursor is None:
            return seen


def fill_store(url: str) -> tuple[int, list[int]]:
    """A store with one completed run of two finished episodes: q1 right in 2 steps, q2
    wrong in 3. Returns (run id, episode ids); the store is left closed."""
    store = Store(url)
    run_id = write_run(
        store, spec(), [play("q1", 0, "correct", 1.0, 2), play("q2", 0, "wrong", 0.0, 3)]
    )
    page = store.list_episodes(EpisodeFilter(run_ids=(run_id,)), limit=10)
    store.close()
    return run_id, [e.id for e in page.items]


# -- runs of any size, with columns that stay null for the first episodes --------------------

_FILLER = "".join(f"row {i}: singer, concert, stadium, country, age; " for i in range(4_000))


def late_answer(i: int) -> str | None:
    """The answer episode i of a `sized_run` gets when its columns are set: every third one
    has none (error)."""
    return None if i % 3 == 2 else f"answer {i}"


def sized_run(
    store: Store,
    name: str,
    episodes: int,
    *,
    steps: int = 3,
    prompt_chars: int = 200,
    set_from: int = 0,
    per_batch: int = 100,
) -> int:
    """A completed run of `episodes` episodes of `steps` steps, `per_batch` episodes a
    batch; returns its id.

    Episodes before `set_from` have no answer, no error and no token counts, and their steps no
    error: columns all null in the first rows. From `set_from` on, episode i is correct, wrong
    or an error (i % 3), with an answer (`late_answer`), step 1 failed, tokens counted.
    """
    run_spec = RunSpec(
        name=name,
        policy=f"hf:/checkpoints/{name}",
        dataset="demo",
        questions_path="/data/questions.json",
        db_dir="/data/db",
        checkpoint=f"/checkpoints/{name}",
    )
    batches = (
        merged(
            [
                _sized_episode(i, steps, prompt_chars, i >= set_from)
                for i in range(first, min(episodes, first + per_batch))
            ]
        )
        for first in range(0, episodes, per_batch)
    )
    return write_run(store, run_spec, batches, planned=episodes)


def _sized_episode(i: int, n_steps: int, prompt_chars: int, late: bool) -> IterationBatch:
    q = f"q{i:05d}"
    steps = []
    for k in range(1, n_steps + 1):
        last = k == n_steps
        head = f"episode {i} step {k}: "
        at = (i * 7 + k) % 1000
        filler = _FILLER[at : at + max(0, prompt_chars - len(head))]
        steps.append(
            step(
                q, 0, k, action="ANSWER" if last else "QUERY",
                raw="ANSWER: 4" if last else f"QUERY: SELECT {k}",
                error=f"no such table: t{i}" if late and k == 1 and not last else None,
                reward=1.0 if last else 0.0, done=last,
                prompt=({"role": "user", "content": head + filler},),
                argument="4" if last else f"SELECT {k}",
                observation="Answer submitted." if last else f"{k}",
                tokens_in=100 * k if late else None, tokens_out=5 if late else None,
                env_seconds=0.001,
            )
        )  # fmt: skip
    late_outcomes: tuple[Outcome, ...] = ("correct", "wrong", "error")
    outcome: Outcome = late_outcomes[i % 3] if late else "budget_exhausted"
    ended = finish(
        q, 0, outcome, 1.0 if outcome == "correct" else 0.0, n_steps, duration=0.5,
        answer=late_answer(i) if late else None, progress=0.0, operational=float(n_steps),
        error=f"grader failed on {q}" if outcome == "error" else None,
    )  # fmt: skip
    started = start(q, 0, text=f"How many singers for {q}?", seed=i, gold_sql="SELECT 1")
    return IterationBatch(started=[started], steps=steps, finished=[ended])
