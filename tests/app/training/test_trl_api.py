"""app.trl without a trainer: bad input, the training set, turn tokens, the tool environment."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("trl")

from transformers import AutoTokenizer

from app.batch import JobError, reopen_run
from app.training.rollout import prompt_key
from app.training.tokens import TurnTokens
from app.trl import checkpointing_off, make_environment_factory, make_rollout_func, training_dataset
from rollout_core.errors import SpecError
from rollout_core.settings import SettingsError
from storage.store import Store
from storage.training import question_episodes, training_steps
from tests.support.benchmark import make_benchmark


@pytest.fixture
def bench(tmp_path: Path) -> tuple[str, str, Store]:
    questions, db_dir = make_benchmark(tmp_path)
    return str(questions), str(db_dir), Store(f"sqlite:///{tmp_path / 'store.db'}")


def test_the_trainer_owns_temperature_and_top_p(bench: tuple[str, str, Store]) -> None:
    questions, db_dir, store = bench
    for setting in ("temperature", "top_p"):
        with pytest.raises(SpecError, match=f"^{setting} is the trainer's setting: set it in GRPO"):
            make_rollout_func(
                dataset=None, questions=questions, db_dir=db_dir, store=store, name="x",
                **{setting: 0.5},
            )  # fmt: skip


def test_unknown_settings_and_bad_values_fail_in_one_line(bench: tuple[str, str, Store]) -> None:
    questions, db_dir, store = bench
    with pytest.raises(SpecError, match="unknown setting 'step_budgett'"):
        make_rollout_func(questions=questions, db_dir=db_dir, store=store, name="x", step_budgett=3)
    with pytest.raises(SettingsError, match="step_budget must be at least 1"):
        make_rollout_func(questions=questions, db_dir=db_dir, store=store, name="x", step_budget=0)
    with pytest.raises(SpecError, match="give the training run a name"):
        make_rollout_func(questions=questions, db_dir=db_dir, store=store, name=" ")
    assert store.list_runs() == []


def test_a_taken_name_is_refused_unless_resuming(bench: tuple[str, str, Store]) -> None:
    questions, db_dir, store = bench
    from tests.support.records import spec

    run_id = store.create_run(spec("taken", kind="training"), episodes_planned=1)
    # resume=True is offered only where it works: not for a run still running.
    with pytest.raises(
        JobError, match=r"already exists in this store \(running\); choose another name$"
    ):
        make_rollout_func(questions=questions, db_dir=db_dir, store=store, name="taken")
    with pytest.raises(JobError, match="still running"):
        make_rollout_func(
            questions=questions, db_dir=db_dir, store=store, name="taken", resume=True
        )
    store.set_run_status(run_id, "failed", error="boom")
    with pytest.raises(JobError, match=r"\(failed\); choose another name, or pass resume=True"):
        make_rollout_func(questions=questions, db_dir=db_dir, store=store, name="taken")
    make_rollout_func(questions=questions, db_dir=db_dir, store=store, name="taken", resume=True)
    store.create_run(spec("batch-run"), episodes_planned=1)
    with pytest.raises(JobError, match="is a batch run, not a training run"):
        make_rollout_func(
            questions=questions, db_dir=db_dir, store=store, name="batch-run", resume=True
        )


def test_generation_through_vllm_is_refused_before_any_rollout(
    bench: tuple[str, str, Store],
) -> None:
    """A vLLM server cannot run here: the trainer stands in with its arguments alone."""
    from types import SimpleNamespace

    questions, db_dir, store = bench
    rollout = make_rollout_func(
        dataset=None, questions=questions, db_dir=db_dir, store=store, name="vllm"
    )
    trainer = SimpleNamespace(args=SimpleNamespace(use_vllm=True))
    with pytest.raises(ValueError, match=r"use_vllm=True is not supported yet: .* use_vllm=False"):
        rollout([[{"role": "user", "content": "?"}]], trainer)
    assert store.find_run("vllm") is None


def test_rollscope_run_does_not_resume_a_training_run(bench: tuple[str, str, Store]) -> None:
    _, _, store = bench
    from tests.support.records import spec

    run_id = store.create_run(spec("grpo", kind="training"), episodes_planned=1)
    store.set_run_status(run_id, "failed", error="boom")
    with pytest.raises(JobError, match="recorded by a trainer; continue it from the training"):
        reopen_run(store, "grpo", resume=True)


def test_training_set_prompts_are_the_episodes_opening_messages(
    bench: tuple[str, str, Store],
) -> None:
    questions, db_dir, _ = bench
    rows = training_dataset(None, questions=questions, db_dir=db_dir, step_budget=3)
    items = json.loads(Path(questions).read_text())
    assert len(rows) == len(items)
    first = rows[0]
    assert [m["role"] for m in first["prompt"]] == ["system", "user"]
    assert "You have 3 actions." in first["prompt"][0]["content"]
    user = first["prompt"][1]["content"]
    assert items[0]["question"] in user and "Tables: singer, concert" in user
    assert len({prompt_key(r["prompt"]) for r in rows}) == len(rows)


def test_reply_tokens_close_the_turn_and_open_the_next(tiny_checkpoint: Path) -> None:
    tok = AutoTokenizer.from_pretrained(tiny_checkpoint)
    turns = TurnTokens(tok, [tok.eos_token_id], 1000)
    after_end = tok.decode(turns.reply_ids("5 rows", closed_by=tok.eos_token_id))
    assert after_end == "\n<|im_start|>user\n5 rows<|im_end|>\n<|im_start|>assistant\n"
    cut = tok.decode(turns.reply_ids("5 rows", closed_by=None))
    assert cut == "<|im_end|>" + after_end


def test_tool_environment_records_each_call_as_a_step(bench: tuple[str, str, Store]) -> None:
    questions, db_dir, store = bench
    factory = make_environment_factory(
        dataset=None, questions=questions, db_dir=db_dir, store=store, name="tools", step_budget=3
    )
    factory.num_generations = 2
    env = factory()
    assert "singer, concert" in str(env.reset(question_id="q-count", prompt=[]))
    assert env.describe("singer").startswith("table singer (5 rows)")
    assert "5" in env.query("SELECT COUNT(*) FROM singer")
    assert env.answer("5") == "Answer submitted: correct."
    with pytest.raises(RuntimeError, match="episode is over"):
        env.query("SELECT 1")
    assert env.get_reward() == pytest.approx(1.1)
    # The same instance, reset for the next rollout: left without an answer, it ends at
    # get_reward; an unknown table is the tool's reply, not a crash.
    env.reset(question_id="q-count")
    assert "nope" in env.sample("nope")
    assert env.get_reward() == pytest.approx(-0.01)
    other = factory()
    other.reset(question_id="q-count")
    other.get_reward()

    assert factory.run.run_id is not None
    run = store.get_run(factory.run.run_id)
    assert run is not None and run.kind == "training" and run.episodes_finished == 3
    assert run.episodes_planned is None  # the trainer calls the tools it calls: no plan
    episodes = question_episodes(store, factory.run.run_id, "q-count")
    # Two episodes of a question at one step make a group of num_generations (2); the third
    # opens the next group.
    assert [(e.group_index, e.outcome, e.steps) for e in episodes] == [
        (0, "correct", 3),
        (0, "budget_exhausted", 1),
        (1, "budget_exhausted", 0),
    ]
    detail = store.get_episode(episodes[0].id)
    assert detail is not None
    assert detail.seed is None  # the trainer sampled it, with no seed of rollscope's
    assert [(s.action, s.argument) for s in detail.steps] == [
        ("DESCRIBE", "singer"),
        ("QUERY", "SELECT COUNT(*) FROM singer"),
        ("ANSWER", "5"),
    ]
    # The raw output is the model's call, as an imported tool call's is: the tools never see
    # the text around it, and the model wrote no action line.
    assert [json.loads(s.raw_output) for s in detail.steps] == [
        {"name": "describe", "arguments": {"table": "singer"}},
        {"name": "query", "arguments": {"sql": "SELECT COUNT(*) FROM singer"}},
        {"name": "answer", "arguments": {"value": "5"}},
    ]
    assert [s.truncated for s in detail.steps] == [None, None, None]  # a call has no end reason
    assert [s.episodes for s in training_steps(store, factory.run.run_id)] == [3]
    # The tool environment's episodes are classified as the runner's are (one step player).
    classes = [store.get_episode(e.id).summary.failure_class for e in episodes]  # type: ignore[union-attr]
    assert classes == ["correct", "budget_exhausted", "budget_exhausted"]


def test_a_grpo_step_with_the_tool_environment(
    tiny_checkpoint: Path, bench: tuple[str, str, Store], tmp_path: Path
) -> None:
    """The tiny tokenizer with a chat template that renders tool calls (Qwen2.5's, which TRL
    knows how to parse): one GRPOTrainer step plays every rollout in the environment."""
    import os

    import trl
    from transformers import AutoModelForCausalLM
    from trl import GRPOConfig, GRPOTrainer

    os.environ["TRL_EXPERIMENTAL_SILENCE"] = "1"
    questions, db_dir, store = bench
    tok = AutoTokenizer.from_pretrained(tiny_checkpoint)
    tok.chat_template = (Path(trl.__file__).parent / "chat_templates/qwen2_5.jinja").read_text()
    factory = make_environment_factory(
        dataset=None, questions=questions, db_dir=db_dir, store=store, name="tools", step_budget=3
    )
    rows = training_dataset(None, questions=questions, db_dir=db_dir, tools=True)
    assert "Tables" not in rows[0]["prompt"][0]["content"]
    args = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=4,
        num_generations=2,
        max_steps=1,
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
        environment_factory=factory,
        callbacks=[factory.callback()],
    )
    trainer.train()
    assert factory.run.run_id is not None
    run = store.get_run(factory.run.run_id)
    assert run is not None and run.status == "completed" and run.episodes_finished == 4
    assert run.spec["training"]["num_generations"] == 2
    (step,) = training_steps(store, factory.run.run_id)
    assert (step.train_step, step.episodes, step.groups) == (0, 4, 2)
    logged = [h for h in trainer.state.log_history if "rewards/SQLToolEnvironment/mean" in h]
    assert logged[0]["rewards/SQLToolEnvironment/mean"] == pytest.approx(step.reward)
