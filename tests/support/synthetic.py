"""A fast filler of realistic-looking runs, for benchmarks of the read side."""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, cast

from sqlalchemy import Connection, Table, func, insert, select, text, update
from sqlalchemy.orm import Session

from rollout_core.failure_classes import StepFacts, classify_episode, gold_seen_from_progress
from rollout_core.records import ACTION_KINDS, Outcome, PolicyInfo, RunSpec, TokenTrace
from rollout_core.settings import EnvironmentSettings, GenerationSettings
from storage import run_totals
from storage.bulk_sql import executemany
from storage.engine import SQLITE_IMMEDIATE
from storage.models import Episode, Run, Step
from storage.prompts import messages_json, text_ids
from storage.store import Store
from storage.text_search import index_episodes
from storage.token_codec import encode_trace, trace_means
from storage.writes import now_utc
from tests.support.synthetic_text import (
    DBS,
    TextPools,
    first_messages,
    question_text,
    system_prompt,
)

_INSERT_STEP = insert(cast(Table, Step.__table__))


@dataclass
class _Prompts:
    """The runner's prompts as the sink stores them, built without the encoder: the system
    message shared, then the question, then each turn's output and observation."""

    system: str
    shared_id: int | None = None
    first: dict[int, str] = field(default_factory=dict)
    """question number -> the first step's `prompt_added` (its user message)"""

    def added_first(self, q: int) -> str:
        if q not in self.first:
            messages = first_messages(self.system, question_text(q), DBS[q % len(DBS)])
            self.first[q] = messages_json(messages[1:])
        return self.first[q]


_PIECE = re.compile(r"\s*\S+")


def fill_synthetic(
    store: Store,
    runs: int = 4,
    episodes_per_run: int = 25_000,
    steps_per_episode: int = 10,
    *,
    seed: int = 0,
    name_prefix: str = "synthetic",
    questions: int = 1_000,
    chunk_episodes: int = 2_000,
    system_prompt_chars: int | None = None,
) -> list[int]:
    """Add `runs` completed runs of synthetic episodes (about `steps_per_episode` steps each).

    Rows go in with bulk executemany inserts, a chunk of episodes and their steps per
    transaction; no runner, no ORM objects. Prompts are the runner's (JSON chat messages with
    the system prompt padded to `system_prompt_chars`), stored as the sink stores them.
    Returns the new run ids.
    """
    rng = random.Random(seed)
    pools = TextPools(random.Random(seed + 1))
    engine = store._engine
    run_ids = []
    for r in range(runs):
        environment = EnvironmentSettings(step_budget=steps_per_episode + 3)
        run_spec = RunSpec(
            name=f"{name_prefix}-{r}",
            policy=f"hf:/checkpoints/ckpt-{(r + 1) * 1000}",
            dataset="synthetic",
            questions_path="synthetic.json",
            db_dir="synthetic",
            checkpoint=f"/checkpoints/ckpt-{(r + 1) * 1000}",
            generation=GenerationSettings(temperature=0.7, max_new_tokens=256),
            environment=environment,
        )
        info = PolicyInfo(name="hf", fingerprint=f"{rng.getrandbits(48):012x}")
        run_id = store.create_run(
            run_spec, episodes_planned=episodes_per_run, status="completed", policy_info=info
        )
        prompts = _Prompts(system_prompt(system_prompt_chars, environment.step_budget))
        skill = 0.3 + 0.5 * r / max(1, runs - 1)  # later checkpoints answer better
        done = 0
        while done < episodes_per_run:
            n = min(chunk_episodes, episodes_per_run - done)
            with engine.connect() as conn:
                conn = conn.execution_options(**{SQLITE_IMMEDIATE: True})
                with conn.begin():
                    if prompts.shared_id is None:
                        shared = messages_json([{"role": "system", "content": prompts.system}])
                        with Session(bind=conn) as session:
                            prompts.shared_id = text_ids(session, [shared])[shared]
                    first_id = int(conn.scalar(select(func.coalesce(func.max(Episode.id), 0))) or 0)
                    episodes, steps = _chunk(
                        rng, pools, prompts, run_id, first_id + 1, done, n,
                        steps_per_episode, skill, questions,
                    )  # fmt: skip
                    conn.execute(insert(Episode), episodes)
                    for part in _parts(steps, 20_000):
                        executemany(conn, _INSERT_STEP, part)
                    index_episodes(conn, [e["id"] for e in episodes])  # all finished
                    _sync_sequence(conn)
            done += n
        with engine.begin() as conn:
            conn.execute(
                update(Run)
                .where(Run.id == run_id)
                .values(started_at=Run.created_at, heartbeat_at=now_utc(), ended_at=now_utc())
            )
            run_totals.recompute(conn, [run_id])  # the rows went in without the write path
        run_ids.append(run_id)
    store.optimize()
    return run_ids


def _chunk(
    rng: random.Random,
    pools: TextPools,
    prompts: _Prompts,
    run_id: int,
    first_id: int,
    offset: int,
    n: int,
    steps_per_episode: int,
    skill: float,
    questions: int,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Rows of n episodes (explicit ids from first_id) and of all their steps."""
    now = now_utc()
    episodes: list[dict[str, Any]] = []
    steps: list[dict[str, Any]] = []
    spread = min(3, steps_per_episode - 1)
    for i in range(n):
        eid, k = first_id + i, offset + i
        q = k % questions
        n_steps = rng.randint(steps_per_episode - spread, steps_per_episode + spread)
        roll = rng.random()
        outcome: Outcome = (
            "correct" if roll < skill
            else "wrong" if roll < skill + 0.4 * (1 - skill)
            else "budget_exhausted" if roll < 0.98
            else "error"
        )  # fmt: skip
        unparsed = sql_errors = 0
        by_action = dict.fromkeys(ACTION_KINDS, 0)
        added = prompts.added_first(q)
        prompt_chars = len(prompts.system) + len(added)
        facts: list[StepFacts] = []
        for s in range(1, n_steps + 1):
            last = s == n_steps
            action = (
                "ANSWER"
                if last and outcome in ("correct", "wrong")
                else rng.choice(ACTION_KINDS[:3])
            )
            parsed = last or rng.random() > 0.05
            stored = action if parsed else "QUERY"  # unparsed text falls back to QUERY
            error = None if parsed and rng.random() > 0.15 else "no such column: singer.nme"
            if stored == "ANSWER":
                error = None
            unparsed += 0 if parsed else 1
            by_action[action] += 1 if parsed else 0
            sql_errors += 1 if stored == "QUERY" and error else 0
            step = pools.step(rng, action, parsed=parsed, error=error, correct=outcome == "correct")
            facts.append(StepFacts(stored, step.argument, parsed, error))
            trace = _trace(rng, step.raw_output)
            mean_logprob, mean_entropy = trace_means(trace)
            steps.append(
                {
                    "episode_id": eid,
                    "step_no": s,
                    "prompt_shared_id": prompts.shared_id,
                    "prompt_from_step": 1,
                    "prompt_added": added,
                    "raw_output": step.raw_output,
                    "action": stored,
                    "argument": step.argument,
                    "parsed": parsed,
                    "observation": step.observation,
                    "error": error,
                    "reward": 1.0 if last and outcome == "correct" else 0.0,
                    "done": last,
                    "tokens_in": prompt_chars // 4,
                    "tokens_out": len(step.raw_output) // 4 + 1,
                    "policy_seconds": 0.05,
                    "env_seconds": 0.002,
                    "truncated": False,
                    "token_trace": encode_trace(trace, step.raw_output),
                    "mean_logprob": mean_logprob,
                    "mean_entropy": mean_entropy,
                }
            )
            added = messages_json(
                [
                    {"role": "assistant", "content": step.raw_output},
                    {"role": "user", "content": step.observation},
                ]
            )
            prompt_chars += len(added)
        reward = (1.0 if outcome == "correct" else 0.0) + round(rng.uniform(-0.2, 0.3), 2)
        progress = rng.choice((0.0, 0.05, 0.1))
        episodes.append(
            {
                "id": eid,
                "run_id": run_id,
                "question_id": f"q{q:05d}",
                "sample_index": k // questions,
                "seed": k,
                "db_id": DBS[q % len(DBS)],
                "question": question_text(q),
                "gold_sql": f"SELECT count(*) FROM singer WHERE country_id = {q}",
                "started_at": now - timedelta(seconds=n - i),
                "ended_at": now,
                "outcome": outcome,
                "reward": reward,
                "progress": progress,
                "operational": float(n_steps - 1),
                "answer": "4" if outcome in ("correct", "wrong") else None,
                "duration_seconds": round(0.05 * n_steps + rng.random(), 3),
                "error": "policy crashed" if outcome == "error" else None,
                "steps": n_steps,
                "unparsed_steps": unparsed,
                "has_unparsed": unparsed > 0,
                "has_sql_error": sql_errors > 0,
                "failure_class": classify_episode(
                    outcome, facts, gold_seen=gold_seen_from_progress(progress)
                ),
            }
            | {f"{a.lower()}_steps": n for a, n in by_action.items()}
        )
    return episodes, steps


def _trace(rng: random.Random, text: str) -> TokenTrace:
    """Word-sized token pieces of `text` with made-up log-probabilities and entropies."""
    pieces = tuple(p for p in _PIECE.findall(text) if p)
    return TokenTrace(
        text=pieces,
        logprobs=tuple(-rng.expovariate(2.0) for _ in pieces),
        entropies=tuple(rng.uniform(0.0, 3.0) for _ in pieces),
    )


def _parts(rows: list[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    for start in range(0, len(rows), size):
        yield rows[start : start + size]


def _sync_sequence(conn: Connection) -> None:
    """Explicit ids bypass PostgreSQL's sequence: move it past them for later inserts."""
    if conn.dialect.name == "postgresql":
        conn.execute(
            text("SELECT setval(pg_get_serial_sequence('episodes', 'id'), max(id)) FROM episodes")
        )


def copy_training_run(store: Store, run_id: int, copies: int) -> None:
    """Make a SQLite store's training run `copies` times as long: its episodes (with their
    steps) played again at later training steps, in later groups, with later sample indexes,
    as if the trainer had drawn the same questions with the same results over and over.

    Two INSERT ... SELECT statements over a series of copies; then the run's totals and the
    text index, which the rows skipped on their way in.
    """
    with store._engine.begin() as conn:
        lo, hi, steps, groups, samples = conn.exec_driver_sql(
            "SELECT min(id), max(id), max(train_step) + 1, max(group_index) + 1, "
            "max(sample_index) + 1 FROM episodes WHERE run_id = ?",
            (run_id,),
        ).one()
        span = hi - lo + 1
        held = conn.exec_driver_sql(
            "SELECT count(*) FROM episodes WHERE id BETWEEN ? AND ?", (lo, hi)
        ).scalar_one()
        if held != span:
            raise ValueError(f"run {run_id}'s episodes are not one range of ids: not copied")
        base = int(conn.exec_driver_sql("SELECT max(id) FROM episodes").scalar_one()) + 1
        new_id = f"{base} + (c.n - 1) * {span} + (e.id - {lo})"
        moved = {
            "id": new_id,
            "train_step": f"e.train_step + c.n * {steps}",
            "group_index": f"e.group_index + c.n * {groups}",
            "sample_index": f"e.sample_index + c.n * {samples}",
        }
        series = (
            f"WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c "
            f"WHERE n < {copies - 1})"
        )
        columns = [str(c.name) for c in Episode.__table__.columns]
        picked = ", ".join(moved.get(c, f"e.{c}") for c in columns)
        conn.exec_driver_sql(
            f"{series} INSERT INTO episodes ({', '.join(columns)}) SELECT {picked} "
            f"FROM c, episodes e WHERE e.run_id = {run_id} AND e.id BETWEEN {lo} AND {hi}"
        )
        step_columns = [str(c.name) for c in Step.__table__.columns if c.name != "id"]
        episode = new_id.replace("e.id", "s.episode_id")
        picked = ", ".join(episode if c == "episode_id" else f"s.{c}" for c in step_columns)
        conn.exec_driver_sql(
            f"{series} INSERT INTO steps ({', '.join(step_columns)}) SELECT {picked} "
            f"FROM c, steps s WHERE s.episode_id BETWEEN {lo} AND {hi}"
        )
        conn.execute(update(Run).where(Run.id == run_id).values(episodes_planned=span * copies))
        run_totals.recompute(conn, [run_id])
        index_episodes(conn, list(range(base, base + span * (copies - 1))))
    store.optimize()
