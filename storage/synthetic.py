"""A fast filler of realistic-looking runs, for benchmarks of the read side."""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from sqlalchemy import Connection, func, insert, select, text, update

from rollout_core.failure_classes import StepFacts, classify_episode, gold_seen_from_progress
from rollout_core.records import ACTION_KINDS, Outcome, PolicyInfo, RunSpec, TokenTrace
from rollout_core.settings import EnvironmentSettings, GenerationSettings
from storage.engine import SQLITE_IMMEDIATE
from storage.models import Episode, Run, Step
from storage.store import Store
from storage.token_codec import encode_trace, trace_means
from storage.writes import now_utc

_DBS = ("concert_singer", "pets_1", "car_1", "flight_2", "employee_hire_evaluation", "world_1")
_PIECE = re.compile(r"\s*\S+")
_OUTPUTS = {
    "DESCRIBE": "DESCRIBE: singer",
    "SAMPLE": "SAMPLE: concert",
    "QUERY": "QUERY: SELECT count(*) FROM singer WHERE country = 'France'",
    "ANSWER": "ANSWER: 4",
}


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
) -> list[int]:
    """Add `runs` completed runs of synthetic episodes (about `steps_per_episode` steps each).

    Rows go in with bulk executemany inserts, a chunk of episodes and their steps per
    transaction; no runner, no ORM objects. Returns the new run ids.
    """
    rng = random.Random(seed)
    engine = store._engine
    run_ids = []
    for r in range(runs):
        run_spec = RunSpec(
            name=f"{name_prefix}-{r}",
            policy=f"hf:/checkpoints/ckpt-{(r + 1) * 1000}",
            dataset="synthetic",
            questions_path="synthetic.json",
            db_dir="synthetic",
            checkpoint=f"/checkpoints/ckpt-{(r + 1) * 1000}",
            generation=GenerationSettings(temperature=0.7, max_new_tokens=256),
            environment=EnvironmentSettings(step_budget=steps_per_episode + 3),
        )
        info = PolicyInfo(name="hf", fingerprint=f"{rng.getrandbits(48):012x}")
        run_id = store.create_run(
            run_spec, episodes_planned=episodes_per_run, status="completed", policy_info=info
        )
        skill = 0.3 + 0.5 * r / max(1, runs - 1)  # later checkpoints answer better
        done = 0
        while done < episodes_per_run:
            n = min(chunk_episodes, episodes_per_run - done)
            with engine.connect() as conn:
                conn = conn.execution_options(**{SQLITE_IMMEDIATE: True})
                with conn.begin():
                    first_id = int(conn.scalar(select(func.coalesce(func.max(Episode.id), 0))) or 0)
                    episodes, steps = _chunk(
                        rng, run_id, first_id + 1, done, n, steps_per_episode, skill, questions
                    )
                    conn.execute(insert(Episode), episodes)
                    for part in _parts(steps, 20_000):
                        conn.execute(insert(Step), part)
                    _sync_sequence(conn)
            done += n
        with engine.begin() as conn:
            conn.execute(
                update(Run)
                .where(Run.id == run_id)
                .values(started_at=Run.created_at, heartbeat_at=now_utc(), ended_at=now_utc())
            )
        run_ids.append(run_id)
    store.optimize()
    return run_ids


def _chunk(
    rng: random.Random,
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
            unparsed += 0 if parsed else 1
            by_action[action] += 1 if parsed else 0
            sql_errors += 1 if stored == "QUERY" and error else 0
            raw = _OUTPUTS[action] if parsed else "I think the answer is 4"
            argument = _OUTPUTS[action].split(": ", 1)[1]
            facts.append(StepFacts(stored, argument, parsed, error))
            trace = _trace(rng, raw)
            mean_logprob, mean_entropy = trace_means(trace)
            steps.append(
                {
                    "episode_id": eid,
                    "step_no": s,
                    "prompt": f"Question {q}: how many singers are from France? (step {s})",
                    "raw_output": raw,
                    "action": stored,
                    "argument": argument,
                    "parsed": parsed,
                    "observation": "count(*)\n4" if error is None else f"error: {error}",
                    "error": error,
                    "reward": 1.0 if last and outcome == "correct" else 0.0,
                    "done": last,
                    "tokens_in": 300 + 80 * s,
                    "tokens_out": 12,
                    "policy_seconds": 0.05,
                    "env_seconds": 0.002,
                    "token_trace": encode_trace(trace, raw),
                    "mean_logprob": mean_logprob,
                    "mean_entropy": mean_entropy,
                }
            )
        reward = (1.0 if outcome == "correct" else 0.0) + round(rng.uniform(-0.2, 0.3), 2)
        progress = rng.choice((0.0, 0.05, 0.1))
        episodes.append(
            {
                "id": eid,
                "run_id": run_id,
                "question_id": f"q{q:05d}",
                "sample_index": k // questions,
                "seed": k,
                "db_id": _DBS[q % len(_DBS)],
                "question": f"How many singers from country {q} performed in concert {q % 97}?",
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
