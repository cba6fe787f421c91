"""Trainers through the server: the original code's `rollout_func` with `config.env_url`, and a
TRL `GRPOTrainer(environment_factory=...)` whose environment is a client of the server; the
server's run holds every episode they played."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest

from rollout_core.compat import rollout_func
from rollout_core.policies.base import Completion, PolicyRequest
from storage.training import TrainingEpisode, question_episodes
from tests.app.env_server.conftest import Bench, Served, wait_for
from tests.app.env_server.test_env_sessions import episodes

SCRIPT = {
    "q-count": ["DESCRIBE singer", "QUERY: SELECT COUNT(*) FROM singer", "ANSWER 5"],
    "q-france": ["no idea, sorry", "ANSWER Ada"],
}


class Scripted:
    """A policy that writes each question's script, a line a turn."""

    name = "scripted"
    tokenizer = None

    def generate(self, requests: list[PolicyRequest]) -> list[Completion]:
        return [Completion(SCRIPT[r.question.id][r.step_no - 1]) for r in requests]

    def release(self, keys: object) -> None:
        pass


def test_rollout_func_plays_on_the_server(served: Served) -> None:
    prompts = ["q-count", "q-count", "q-france"]
    results = rollout_func(prompts, Scripted(), None, {"env_url": served.url, "batch_size": 2})
    assert [r["correct"] for r in results] == [True, True, False]
    numbered = [r["metadata"]["episode_id"] for r in results]
    assert numbered == ["q-count#0", "q-count#1", "q-france#0"]
    first = results[0]
    assert first["completion"] == "\n".join(SCRIPT["q-count"])
    assert first["metadata"]["operational_signals"]["unparsed"] == 0
    assert "[user]\nQuestion: How many singers are there?" in first["prompt"]
    assert results[2]["metadata"]["operational_signals"]["unparsed"] == 1
    stored = {(e.summary.question_id, e.summary.sample_index): e for e in episodes(served.store, 1)}
    assert stored["q-count", 1].summary.outcome == "correct"
    unparsed = stored["q-france", 0].steps[0]
    assert (unparsed.raw_output, unparsed.parsed, unparsed.action) == (
        "no idea, sorry",
        False,
        "QUERY",
    )


def test_server_tools_record_each_call_as_the_models_tool_call(served: Served) -> None:
    from app.training.server_tools import ServerTools

    tools = ServerTools(served.url)
    env = tools()
    env.reset(question_id="q-count")
    assert "5" in env.query("SELECT COUNT(*) FROM singer")
    assert env.answer("5") == "Answer submitted: correct."
    tools.close()
    (episode,) = episodes(served.store, served.run_id)
    # The model's call, as the trainer handed it to the tool: the server never sees the text.
    assert [(s.action, s.argument, json.loads(s.raw_output)) for s in episode.steps] == [
        ("QUERY", "SELECT COUNT(*) FROM singer",
         {"name": "query", "arguments": {"sql": "SELECT COUNT(*) FROM singer"}}),
        ("ANSWER", "5", {"name": "answer", "arguments": {"value": "5"}}),
    ]  # fmt: skip


def test_a_grpo_trainer_trains_two_steps_through_the_server(
    tiny_checkpoint: Path, served: Served, bench: Bench, tmp_path: Path
) -> None:
    """The tiny model with a chat template that renders tool calls (Qwen2.5's): each rollout a
    session of the server, each episode recorded with the trainer's step."""
    pytest.importorskip("trl")
    import trl
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from app.training.server_tools import ServerTools
    from app.trl import checkpointing_off, training_dataset

    os.environ["TRL_EXPERIMENTAL_SILENCE"] = "1"
    tok = AutoTokenizer.from_pretrained(tiny_checkpoint)
    tok.chat_template = (Path(trl.__file__).parent / "chat_templates/qwen2_5.jinja").read_text()
    rows = training_dataset(
        None, questions=str(bench.questions), db_dir=str(bench.db_dir), tools=True
    )
    tools = ServerTools(served.url)
    args = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=4,
        num_generations=2,
        max_steps=2,
        max_completion_length=8,
        use_cpu=True,
        bf16=False,
        **checkpointing_off(GRPOConfig),
        report_to=[],
        save_strategy="no",
        disable_tqdm=True,
    )
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(tiny_checkpoint),
        processing_class=tok,
        args=args,
        train_dataset=rows,
        environment_factory=tools,
        callbacks=[tools.callback()],
    )
    trainer.train()
    assert trainer.state.global_step == 2

    def played() -> list[TrainingEpisode]:
        return [e for q in {r["question_id"] for r in rows} for e in question_episodes(
            served.store, served.run_id, q
        )]  # fmt: skip

    # The last sessions' episodes end once their clients have gone, a moment after training.
    wait_for(lambda: len(played()) == 8)
    assert Counter(e.train_step for e in played()) == {0: 4, 1: 4}
    assert all(e.outcome is not None for e in played()), "each session's episode ended"
