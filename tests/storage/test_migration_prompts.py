"""A 0002 store, whose steps held whole prompts, upgrades through 0003 and 0011 with every
prompt the same messages."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import create_engine

from rollout_core.datasets import load_named_dataset
from rollout_core.policies.registry import make_policy
from rollout_core.records import IterationBatch, ListSink, StepRecord
from rollout_core.runner import plan_episodes, run_episodes
from storage.migrations import alembic_config
from storage.store import Store
from tests.storage.prompt_checks import as_stored, check_prompts, check_view
from tests.support.records import finish, spec, start, step
from tests.support.store_files import upgrade_only_to

_NOW = datetime(2026, 12, 1, tzinfo=UTC)


def _runner_batches(policy: str, samples: int, limit: int) -> list[IterationBatch]:
    ds = load_named_dataset("demo")
    sink = ListSink()
    tasks = plan_episodes(ds.questions[:limit], samples=samples, run_seed=1)
    run_episodes(ds, tasks, make_policy(policy), sink, batch_size=16)
    return sink.batches


def _text_batch() -> IterationBatch:
    """An episode whose prompts were a chat template's text, not JSON messages."""
    texts = ["<|im_start|>user\nQ?<|im_end|>\n", "<|im_start|>user\nQ?<|im_end|>\nmore"]
    steps = [
        dataclasses.replace(
            step("text", 0, n, done=n == 2), prompt=({"role": "prompt", "content": t},)
        )
        for n, t in enumerate(texts, start=1)
    ]
    return IterationBatch(
        started=[start("text")], steps=steps, finished=[finish("text", 0, "wrong", 0.0, 2)]
    )


def _stored_prompt(r: StepRecord) -> str:
    """The prompt as the release at 0002 stored it: JSON messages, or a template's text."""
    if r.prompt and r.prompt[0]["role"] == "prompt":
        return str(r.prompt[0]["content"])
    return json.dumps([dict(m) for m in r.prompt], ensure_ascii=False)


def _store_at_0002(url: str, runs: dict[str, list[IterationBatch]]) -> dict[int, list[StepRecord]]:
    """A store at revision 0002 holding these runs as rollscope then wrote them: each step
    with its whole prompt (NUL as U+FFFD). Returns run id -> the step records."""
    upgrade_only_to(url, alembic_config(), "0002")
    meta = sa.MetaData()
    meta.reflect(create_engine(url))
    runs_t, episodes_t, steps_t = (meta.tables[t] for t in ("runs", "episodes", "steps"))
    engine = create_engine(url)
    written: dict[int, list[StepRecord]] = {}
    with engine.begin() as conn:
        for run_id, (name, batches) in enumerate(runs.items(), start=1):
            conn.execute(runs_t.insert(), [_run_row(run_id, name)])
            ids: dict[Any, int] = {}
            written[run_id] = []
            for b in batches:
                for s in b.started:
                    ids[s.key] = conn.execute(
                        episodes_t.insert().returning(episodes_t.c.id),
                        [_episode_row(run_id, s)],
                    ).scalar_one()
                for r in b.steps:
                    conn.execute(steps_t.insert(), [_step_row(ids[r.key], r)])
                    written[run_id].append(r)
                for e in b.finished:
                    conn.execute(
                        episodes_t.update()
                        .where(episodes_t.c.id == ids[e.key])
                        .values(outcome=e.outcome, reward=e.reward, ended_at=_NOW, steps=e.steps)
                    )
    engine.dispose()
    return written


def _clean(text: str | None) -> str | None:
    return None if text is None else as_stored(text)


def _run_row(run_id: int, name: str) -> dict[str, Any]:
    stored = spec(name).to_stored()
    return {
        "id": run_id, "name": name, "policy": "oracle", "dataset": "demo", "spec": stored,
        "kind": "batch", "episodes_planned": 1, "status": "completed", "created_at": _NOW,
    }  # fmt: skip


def _episode_row(run_id: int, s: Any) -> dict[str, Any]:
    return {
        "run_id": run_id, "question_id": s.question_id, "sample_index": s.sample_index,
        "seed": s.seed, "db_id": s.db_id, "question": _clean(s.question),
        "gold_sql": _clean(s.gold_sql), "started_at": _NOW,
    }  # fmt: skip


def _step_row(episode_id: int, r: StepRecord) -> dict[str, Any]:
    return {
        "episode_id": episode_id, "step_no": r.step_no, "prompt": _stored_prompt(r),
        "raw_output": _clean(r.raw_output), "action": r.action, "argument": _clean(r.argument),
        "parsed": r.parsed, "observation": _clean(r.observation), "error": _clean(r.error),
        "reward": r.reward, "done": r.done, "tokens_in": r.tokens_in, "tokens_out": r.tokens_out,
        "policy_seconds": r.policy_seconds, "env_seconds": r.env_seconds, "truncated": False,
    }  # fmt: skip


def _old_runs() -> dict[str, list[IterationBatch]]:
    return {
        "oracle": _runner_batches("oracle", samples=1, limit=121),
        "random": _runner_batches("random", samples=2, limit=40),
        "text": [_text_batch()],
    }


def test_a_0002_store_upgrades_with_every_prompt_intact(store_url: str) -> None:
    written = _store_at_0002(store_url, _old_runs())
    store = Store(store_url)  # a writer migrates on open
    try:
        assert store.schema_upgrade is not None and store.schema_upgrade.before == "0002"
        total = sum(len(r) for r in written.values())
        assert check_prompts(store, written) == total > 500
        assert check_view(store) == total
    finally:
        store.close()
