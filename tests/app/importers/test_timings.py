"""What verifiers and rLLM files time and count, imported: the episode's duration, each step's
model and environment seconds, the tokens the model wrote. NULL where a file times nothing,
or times what cannot be lined up with its turns (tests/app/importers/writers.py names each
writer)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from storage.store import Store
from tests.app.importers.conftest import rows, run_import
from tests.app.importers.writers import (
    rllm_log_episode,
    rllm_timing,
    verifiers_save,
    verifiers_timing,
)
from tests.support.benchmark import QUESTIONS

COUNT_Q, COUNT_SQL = QUESTIONS[0][1], QUESTIONS[0][2]
START = 1_764_000_000.0  # a Unix time, as verifiers and rLLM stamp their spans


def _tool_turn(n: int) -> list[dict[str, Any]]:
    """An assistant message running COUNT_SQL through a tool, and the tool's answer."""
    call = {
        "id": f"c{n}",
        "type": "function",
        "function": {"name": "run_sql", "arguments": json.dumps({"sql": COUNT_SQL})},
    }
    return [
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "content": "| 5 |", "tool_call_id": f"c{n}"},
    ]


def _vf_output(example: str, tools: int, **fields: Any) -> dict[str, Any]:
    """A verifiers rollout of `tools` tool turns and a final answer."""
    completion = [m for n in range(tools) for m in _tool_turn(n)]
    completion.append({"role": "assistant", "content": "ANSWER 5"})
    return {
        "example_id": example,
        "prompt": [{"role": "user", "content": COUNT_Q}],
        "completion": completion,
        "answer": COUNT_SQL,
        "reward": 1.0,
        "metrics": {},
        "is_truncated": False,
    } | fields


def _episode(store: Store, run_id: int, question_id: str) -> tuple[Any, ...]:
    [found] = rows(
        store,
        "SELECT id, duration_seconds, tokens_out FROM episodes "
        "WHERE run_id = ? AND question_id = ?",
        run_id,
        question_id,
    )
    return found


def _step_seconds(store: Store, episode_id: int) -> list[tuple[Any, ...]]:
    return rows(
        store,
        "SELECT policy_seconds, env_seconds FROM steps WHERE episode_id = ? ORDER BY step_no",
        episode_id,
    )


def test_verifiers_timing_spans_and_token_usage_become_durations_and_counts(
    store: Store, tmp_path: Path
) -> None:
    timing = verifiers_timing(START, model=[0.8, 0.6, 0.4], env=[0.1, 0.2])
    usage = {"input_tokens": 900.0, "output_tokens": 123.0}
    verifiers_save(
        tmp_path / "run",
        [_vf_output("timed", tools=2, timing=timing, token_usage=usage)],
        {"model": "m"},
    )
    run_id, _ = run_import(store, tmp_path / "run", "vf")
    episode_id, seconds, tokens = _episode(store, run_id, "timed")
    assert seconds == pytest.approx(timing["total"]) and seconds == pytest.approx(2.16)
    assert tokens == 123
    # A model span per turn; an environment span per reply, none after the answer.
    assert _step_seconds(store, episode_id) == [
        (pytest.approx(0.8), pytest.approx(0.1)),
        (pytest.approx(0.6), pytest.approx(0.2)),
        (pytest.approx(0.4), None),
    ]


def test_verifiers_timings_it_cannot_use_leave_nulls_and_the_rollout_whole(
    store: Store, tmp_path: Path
) -> None:
    unscored = verifiers_timing(START, model=[0.5, 0.25], env=[0.125], scored=False)
    older = {"generation_ms": 1500.0, "scoring_ms": 20.0, "total_ms": 1520.0}
    outputs = [
        # verifiers before RolloutTiming: milliseconds, and no spans.
        _vf_output("older", 1, timing=older),
        # Not scored (it failed): no total, so the generation's span.
        _vf_output("unscored", 1, timing=unscored),
        # One model span for two turns: the turns cannot be timed, the rollout can.
        _vf_output("short", 1, timing=verifiers_timing(START, model=[0.5], env=[])),
        _vf_output("untimed", 1),
        _vf_output("bad", 1, timing="fast", token_usage={"output_tokens": -3}),
        _vf_output("bad spans", 1, timing={"total": "2", "model": {"spans": ["a", None]}}),
        # More tokens than the store's integer holds: no count, the rollout kept.
        _vf_output("too many", 1, token_usage={"output_tokens": 1e300}),
    ]
    verifiers_save(tmp_path / "run", outputs, {"model": "m"})
    run_id, results = run_import(store, tmp_path / "run", "vf")
    assert [(r.episodes, r.skipped) for r in results] == [(7, 0)]
    found = {q: _episode(store, run_id, q) for q in ("older", "unscored", "short")}
    assert found["older"][1] == pytest.approx(1.52)
    assert found["unscored"][1] == pytest.approx(0.01 + 0.5 + 0.125 + 0.25)
    assert found["short"][1] == pytest.approx(0.01 + 0.5 + 0.05)
    for question in ("older", "short"):
        assert _step_seconds(store, found[question][0]) == [(None, None), (None, None)]
    untimed = rows(
        store,
        "SELECT question_id, duration_seconds, tokens_out FROM episodes "
        "WHERE run_id = ? AND question_id IN ('untimed', 'bad', 'bad spans', 'too many') "
        "ORDER BY id",
        run_id,
    )
    assert untimed == [
        ("untimed", None, None),
        ("bad", None, None),
        ("bad spans", None, None),
        ("too many", None, None),
    ]


def test_rllm_step_and_episode_timing_become_step_seconds_and_the_duration(
    store: Store, tmp_path: Path
) -> None:
    user = {"role": "user", "content": COUNT_Q}
    first, second = f"<sql>{COUNT_SQL}</sql>", f"<answer>{COUNT_SQL}</answer>"
    untimed = {"start_timestamp": None, "end_timestamp": None, "llm_time": 0.0, "env_time": 0.0}
    episode = {
        "id": "task-a:0",
        "task": {"question": COUNT_Q, "db_id": "concerts", "gold_sql": COUNT_SQL},
        "is_correct": True,
        "termination_reason": "env_done",
        "info": {"timing": rllm_timing(START, llm=1.1, env=0.3, total=1.6)},
        "trajectories": [
            {
                "reward": 1.0,
                "info": {"timing": rllm_timing(START, llm=1.1, env=0.3, total=1.6)},
                "steps": [
                    {
                        "observation": COUNT_Q,
                        "model_response": first,
                        "chat_completions": [user, {"role": "assistant", "content": first}],
                        "info": {"timing": rllm_timing(START, llm=0.7, env=0.2)},
                    },
                    {
                        "observation": "| 5 |",
                        "model_response": second,
                        "done": True,
                        "reward": 1.0,
                        "chat_completions": [
                            user,
                            {"role": "assistant", "content": first},
                            {"role": "user", "content": "| 5 |"},
                            {"role": "assistant", "content": second},
                        ],
                        # The mixin's timing of a step it has no timing for.
                        "info": {"timing": untimed},
                    },
                ],
            }
        ],
    }
    rllm_log_episode(tmp_path / "logs", episode, step=3)
    run_id, _ = run_import(store, tmp_path / "logs", "rllm")
    [(episode_id, seconds)] = rows(
        store, "SELECT id, duration_seconds FROM episodes WHERE run_id = ?", run_id
    )
    assert seconds == pytest.approx(1.6)
    assert _step_seconds(store, episode_id) == [
        (pytest.approx(0.7), pytest.approx(0.2)),
        (None, None),
    ]
