"""A real TRL GRPOTrainer trains a tiny checkpoint on CPU with rollscope's rollout function."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import pytest

pytest.importorskip("trl")

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from app.trl import (
    RolloutFunction,
    checkpointing_off,
    make_rollout_func,
    shaped_reward,
    training_dataset,
)
from storage.read_models import EpisodeFilter
from storage.store import Store
from storage.training import played_again, question_episodes, training_steps
from tests.support.benchmark import make_benchmark
from tests.support.tool_scores import failing_at_call

GROUP = 2
PROMPTS_PER_STEP = 2
STEPS = 2


def spread_reward(*, completion_ids: list[list[int]], **_: Any) -> list[float]:
    """A second reward that differs between episodes, so that a random model gets gradients."""
    return [len(set(ids)) / 100.0 for ids in completion_ids]


@dataclass
class Call:
    """One rollout call as the trainer saw it, with what a fresh forward pass said."""

    train_step: int
    output: dict[str, list[Any]]
    weights: torch.Tensor
    worst_logprob_gap: float
    caller_state_kept: bool
    """Torch's RNG and threads, the tokenizer's padding, the model's attention and training
    mode: as the trainer had them before the call."""
    run_status: str
    """The run's status as a reader saw it right after the call, mid-training."""
    heartbeat: bool
    """Whether the run had a heartbeat then."""


@dataclass
class Session:
    store: Store
    run_id: int
    tokenizer: Any
    calls: list[Call] = field(default_factory=list)
    log_history: list[dict[str, Any]] = field(default_factory=list)
    checkpoint: Path = Path()
    output_dir: Path = Path()
    """The trainer's output_dir, where it logs its completions."""


def _grpo_args(out: Path, **over: Any) -> Any:
    from trl import GRPOConfig

    settings: dict[str, Any] = {
        "output_dir": str(out),
        "per_device_train_batch_size": GROUP * PROMPTS_PER_STEP,
        "num_generations": GROUP,
        "max_steps": STEPS,
        "learning_rate": 5e-2,
        "use_cpu": True,
        "bf16": False,
        **checkpointing_off(GRPOConfig),
        "report_to": [],
        "logging_steps": 1,
        "save_strategy": "no",
        "beta": 0.0,
        "seed": 1,
        "disable_tqdm": True,
    }
    return GRPOConfig(**{**settings, **over})


def _fresh_logprobs(model: Any, prompt: list[int], completion: list[int]) -> torch.Tensor:
    """Log-probabilities of the completion's tokens from one forward pass over the sequence."""
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1]
    return torch.log_softmax(logits.float(), dim=-1).gather(1, ids[0, len(prompt) :, None])[:, 0]


def _watch(rollout: RolloutFunction, calls: list[Call]) -> Any:
    """The rollout function, with each call's output checked against a fresh forward pass
    before the trainer's optimizer step changes the weights."""

    def state(trainer: Any) -> tuple[Any, ...]:
        model, tok = trainer.model, trainer.processing_class
        return (
            torch.get_rng_state().tolist(),
            torch.get_num_threads(),
            tok.padding_side,
            tok.pad_token,
            model.config._attn_implementation,
            model.training,
        )

    def rollout_func(prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        before = state(trainer)
        output = rollout(prompts, trainer)
        kept = state(trainer) == before
        model = trainer.model
        worst = 0.0
        for p, c, lp, m in zip(
            output["prompt_ids"],
            output["completion_ids"],
            output["logprobs"],
            output["env_mask"],
            strict=True,
        ):
            fresh = _fresh_logprobs(model, p, c)
            mask = torch.tensor(m, dtype=torch.bool)
            recorded = torch.tensor(lp)
            assert torch.all(recorded[~mask] == 0.0)
            worst = max(worst, float((fresh[mask] - recorded[mask]).abs().max()))
        weights = next(model.parameters()).detach().clone()
        assert rollout.run_id is not None
        run = rollout.store.get_run(rollout.run_id)
        assert run is not None
        calls.append(
            Call(
                trainer.state.global_step,
                output,
                weights,
                worst,
                kept,
                run.status,
                run.heartbeat_at is not None,
            )
        )
        return output

    return rollout_func


@pytest.fixture(scope="module")
def trained(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    from trl import GRPOTrainer

    os.environ["TRL_EXPERIMENTAL_SILENCE"] = "1"
    root = tmp_path_factory.mktemp("trl")
    questions, db_dir = make_benchmark(root)
    store = Store(f"sqlite:///{root / 'store.db'}")
    rollout = make_rollout_func(
        dataset=None,
        questions=str(questions),
        db_dir=str(db_dir),
        store=store,
        name="grpo-tiny",
        step_budget=2,
        max_new_tokens=8,
        batch_size=8,
    )
    model = AutoModelForCausalLM.from_pretrained(tiny_checkpoint)
    tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint)
    session = Session(store, 0, tokenizer, checkpoint=tiny_checkpoint)
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=[shaped_reward, spread_reward],
        args=_grpo_args(root / "out", log_completions=True),
        train_dataset=training_dataset(
            None, questions=str(questions), db_dir=str(db_dir), step_budget=2
        ),
        rollout_func=_watch(rollout, session.calls),
    )
    session.output_dir = root / "out"
    with rollout.recording():
        trainer.train()
    assert rollout.run_id is not None
    session.run_id = rollout.run_id
    session.log_history = trainer.state.log_history
    yield session
    store.close()


def test_every_rollout_is_stored_with_its_training_step_in_groups(trained: Session) -> None:
    assert [c.train_step for c in trained.calls] == list(range(STEPS))
    run = trained.store.get_run(trained.run_id)
    assert run is not None and run.kind == "training" and run.status == "completed"
    assert run.episodes_finished == STEPS * PROMPTS_PER_STEP * GROUP
    for call in trained.calls:
        ids = call.output["episode_id"]
        assert len(ids) == PROMPTS_PER_STEP * GROUP
        groups: dict[int, list[Any]] = {}
        for episode_id in ids:
            detail = trained.store.get_episode(episode_id)
            assert detail is not None
            matching = [
                e
                for e in question_episodes(
                    trained.store, trained.run_id, detail.summary.question_id
                )
                if e.id == episode_id
            ]
            assert matching[0].train_step == call.train_step
            groups.setdefault(matching[0].group_index, []).append(detail.summary.question_id)
        # One group per prompt: num_generations episodes of one question.
        assert sorted(len(g) for g in groups.values()) == [GROUP] * PROMPTS_PER_STEP
        assert all(len(set(g)) == 1 for g in groups.values())


def test_the_run_reads_running_with_a_heartbeat_while_the_trainer_trains(
    trained: Session,
) -> None:
    assert [(c.run_status, c.heartbeat) for c in trained.calls] == [("running", True)] * STEPS


def test_extra_fields_are_the_stored_episodes_and_groups_have_distinct_seeds(
    trained: Session,
) -> None:
    from app.trl import correct_reward

    for call in trained.calls:
        out = call.output
        seeds: dict[str, list[int]] = {}
        for i, episode_id in enumerate(out["episode_id"]):
            detail = trained.store.get_episode(episode_id)
            assert detail is not None
            assert out["correct"][i] == (detail.summary.outcome == "correct")
            assert out["outcome"][i] == detail.summary.outcome
            assert out["reward"][i] == pytest.approx(detail.summary.reward)
            assert out["steps"][i] == detail.summary.steps == len(detail.steps)
            assert out["progress"][i] == pytest.approx(detail.progress)
            assert out["operational"][i] == pytest.approx(detail.operational)
            seeds.setdefault(detail.summary.question_id, []).append(detail.seed)
        # A question's episodes (its GRPO group) each sample with their own seed.
        assert all(len(set(group)) == len(group) >= GROUP for group in seeds.values())
        assert correct_reward(**out) == [1.0 if c else 0.0 for c in out["correct"]]
        assert shaped_reward(**out) == [float(r) for r in out["reward"]]


def test_the_spec_records_the_trainers_arguments(trained: Session) -> None:
    from rollout_core.records import RunSpec

    run = trained.store.get_run(trained.run_id)
    assert run is not None
    spec = RunSpec.from_stored(run.spec)
    assert spec.kind == "training" and spec.training is not None
    assert spec.training.num_generations == GROUP
    assert spec.training.learning_rate == pytest.approx(5e-2)
    assert spec.training.max_steps == STEPS
    assert spec.training.reward_funcs == ("shaped_reward", "spread_reward")
    assert spec.training.trainer.startswith("GRPOTrainer (trl ")
    assert (spec.policy, spec.checkpoint) == (f"hf:{trained.checkpoint}", str(trained.checkpoint))


def _conversation(trained: Session, episode_id: int) -> tuple[str, list[list[int]], list[str]]:
    """The rendered conversation of a stored episode (each model turn as its sampled ids
    decode), with the model turns' ids and the observations."""
    detail = trained.store.get_episode(episode_id)
    assert detail is not None
    tok = trained.tokenizer
    messages = [dict(m) for m in detail.steps[0].prompt]
    turns = []
    for i, step in enumerate(detail.steps):
        assert step.tokens is not None and step.tokens.ids is not None
        ids = list(step.tokens.ids)
        turns.append(ids)
        if i == len(detail.steps) - 1:
            break
        content = ids[:-1] if ids and ids[-1] == tok.eos_token_id else ids
        messages.append(
            {"role": "assistant", "content": tok.decode(content, skip_special_tokens=False)}
        )
        messages.append({"role": "user", "content": step.observation})
    rendered = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    last = tok.decode(turns[-1], skip_special_tokens=False)
    return rendered + last, turns, [s.observation for s in detail.steps[:-1]]


def test_prompt_and_completion_decode_to_the_rendered_conversation(trained: Session) -> None:
    tok = trained.tokenizer
    for call in trained.calls:
        out = call.output
        for i, episode_id in enumerate(out["episode_id"]):
            expected, _, _ = _conversation(trained, episode_id)
            ids = out["prompt_ids"][i] + out["completion_ids"][i]
            assert tok.decode(ids, skip_special_tokens=False) == expected


def test_env_mask_is_zero_exactly_on_environment_tokens(trained: Session) -> None:
    tok = trained.tokenizer
    for call in trained.calls:
        out = call.output
        for i, episode_id in enumerate(out["episode_id"]):
            _, turns, observations = _conversation(trained, episode_id)
            completion, mask = out["completion_ids"][i], out["env_mask"][i]
            assert len(mask) == len(completion) == len(out["logprobs"][i])
            # Walk the completion: a model turn (mask 1), the environment's reply (mask 0), ...
            pos = 0
            for k, turn in enumerate(turns):
                assert completion[pos : pos + len(turn)] == turn
                assert mask[pos : pos + len(turn)] == [1] * len(turn)
                pos += len(turn)
                if k < len(observations):
                    end = pos
                    while end < len(mask) and mask[end] == 0:
                        end += 1
                    reply = tok.decode(completion[pos:end], skip_special_tokens=False)
                    assert observations[k] in reply and reply.endswith("assistant\n")
                    pos = end
            assert pos == len(completion)


def test_trls_completion_logs_import_as_the_steps_rollscope_recorded(
    trained: Session, tmp_path: Path
) -> None:
    # TRL logs a rollout's completion as its ids decode: the model's turns and the
    # environment's replies in one text. Imported, it splits into the steps played.
    from tests.app.importers.conftest import rows, run_import

    imported = Store(f"sqlite:///{tmp_path / 'imported.db'}")
    try:
        _, results = run_import(imported, trained.output_dir, "trl-log")
        assert [r.episodes for r in results] == [PROMPTS_PER_STEP * GROUP] * STEPS
        for k, call in enumerate(trained.calls):
            texts = rows(
                imported,
                "SELECT src.line, s.step_no, s.raw_output, s.observation FROM steps s "
                "JOIN episode_sources src ON src.episode_id = s.episode_id "
                "JOIN import_files f ON f.id = src.file_id "
                "WHERE f.path = ? ORDER BY src.line, s.step_no",
                f"completions/completions_{k + 1:05d}.parquet",
            )
            for line, episode_id in enumerate(call.output["episode_id"], start=1):
                played = trained.store.get_episode(episode_id)
                assert played is not None
                # The last turn's reply is not in the completion: nothing came after it.
                expected = [
                    (s.step_no, s.raw_output.strip(), None if s.done else _stripped(s.observation))
                    for s in played.steps
                ]
                got = [(n, raw.strip(), _stripped(obs)) for at, n, raw, obs in texts if at == line]
                assert got == expected
    finally:
        imported.close()


def _stripped(text: str | None) -> str | None:
    return None if text is None else text.strip()


def test_the_trainers_advantages_and_rewards_are_recorded_as_its_files_hold_them(
    trained: Session,
) -> None:
    # TRL scores a batch after the rollout function returns it: its advantages and reward
    # functions' values reach the store at the next call, the last batch's when training ends.
    import pyarrow.parquet as pq

    for k, call in enumerate(trained.calls):
        path = trained.output_dir / "completions" / f"completions_{k + 1:05d}.parquet"
        logged = pq.read_table(path).to_pylist()
        ids = call.output["episode_id"]
        assert len(logged) == len(ids)
        origins = trained.store.episode_origins(ids)
        for row, episode_id in zip(logged, ids, strict=True):
            episode = trained.store.get_episode(episode_id)
            assert episode is not None and episode.trainer_advantage is not None
            assert episode.trainer_advantage == pytest.approx(row["advantage"], abs=1e-6)
            assert dict(origins[episode_id].rewards) == {
                "shaped_reward": pytest.approx(row["shaped_reward"], abs=1e-6),
                "spread_reward": pytest.approx(row["spread_reward"], abs=1e-6),
            }
            # The episode's own reward stays the environment's.
            assert episode.summary.reward == pytest.approx(row["shaped_reward"], abs=1e-6)


def test_recorded_logprobs_match_a_fresh_forward_pass(trained: Session) -> None:
    for call in trained.calls:
        assert call.worst_logprob_gap < 1e-4


def test_the_rollouts_leave_the_trainers_state_alone(trained: Session) -> None:
    assert all(call.caller_state_kept for call in trained.calls)


def test_logged_mean_reward_equals_the_stores(trained: Session) -> None:
    logged = [h for h in trained.log_history if "rewards/shaped_reward/mean" in h]
    stored = {s.train_step: s for s in training_steps(trained.store, trained.run_id)}
    assert len(logged) == STEPS and sorted(stored) == list(range(STEPS))
    for entry in logged:
        # A log entry at step s + 1 holds the rollouts played at global step s.
        step = stored[int(entry["step"]) - 1]
        assert entry["rewards/shaped_reward/mean"] == pytest.approx(step.reward, abs=1e-6)
        assert step.episodes == PROMPTS_PER_STEP * GROUP


def test_the_weights_change_between_steps(trained: Session) -> None:
    first, second = trained.calls[0].weights, trained.calls[1].weights
    assert not torch.equal(first, second)


class Failing(NamedTuple):
    store: Store
    rollout: RolloutFunction
    trainer: Any


def _failing_trainer(
    tiny_checkpoint: Path, tmp_path: Path, name: str, reward: Any, model: Any = None
) -> Failing:
    """A two-step GRPO trainer recording run `name`, with `reward` as its reward function and
    `model` (default: the tiny checkpoint's) as its model: each test breaks one of them."""
    from trl import GRPOTrainer

    os.environ["TRL_EXPERIMENTAL_SILENCE"] = "1"
    questions, db_dir = make_benchmark(tmp_path)
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    rollout = make_rollout_func(
        dataset=None,
        questions=str(questions),
        db_dir=str(db_dir),
        store=store,
        name=name,
        step_budget=1,
        max_new_tokens=4,
    )
    trainer = GRPOTrainer(
        model=model or AutoModelForCausalLM.from_pretrained(tiny_checkpoint),
        processing_class=AutoTokenizer.from_pretrained(tiny_checkpoint),
        reward_funcs=[reward],
        args=_grpo_args(tmp_path / "out"),
        train_dataset=training_dataset(
            None, questions=str(questions), db_dir=str(db_dir), step_budget=1
        ),
        rollout_func=rollout,
    )
    return Failing(store, rollout, trainer)


def test_a_trainer_crash_fails_the_run_and_keeps_what_was_played(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    calls = []

    def breaks_at_second_step(**kw: Any) -> list[float]:
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("reward server down")
        return [0.0] * len(kw["completion_ids"])

    store, rollout, trainer = _failing_trainer(
        tiny_checkpoint, tmp_path, "crashes", breaks_at_second_step
    )
    with pytest.raises(RuntimeError, match="reward server down"), rollout.recording():
        trainer.train()
    assert rollout.run_id is not None
    run = store.get_run(rollout.run_id)
    assert run is not None and run.status == "failed"
    assert run.error == "RuntimeError: reward server down"
    # Both steps' rollouts were played and written before the reward function failed.
    assert run.episodes_finished == 2 * PROMPTS_PER_STEP * GROUP
    assert [s.train_step for s in training_steps(store, rollout.run_id)] == [0, 1]


def test_ctrl_c_during_a_rollout_cancels_the_run(tiny_checkpoint: Path, tmp_path: Path) -> None:
    # Most of a GRPO step's time is its rollout: a SIGINT lands in the model's generate.
    model = AutoModelForCausalLM.from_pretrained(tiny_checkpoint)
    generate, calls = model.generate, []

    def pressed_at_second_call(*args: Any, **kw: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return generate(*args, **kw)

    model.generate = pressed_at_second_call
    store, rollout, trainer = _failing_trainer(
        tiny_checkpoint, tmp_path, "stopped", spread_reward, model
    )
    with pytest.raises(KeyboardInterrupt), rollout.recording():
        trainer.train()
    assert rollout.run_id is not None
    run = store.get_run(rollout.run_id)
    assert run is not None
    assert (run.status, run.error) == ("cancelled", "interrupted by Ctrl-C")


def test_a_trainer_resumed_from_a_checkpoint_replaces_the_steps_it_plays_again(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    # A crash in step 2 (its rollouts played and stored), then resume_from_checkpoint at step
    # 1: the trainer plays steps 1 and 2 again, and trains on the new plays alone. Training
    # counted both plays of them (8 episodes a step where the trainer drew 4).
    from trl import GRPOTrainer

    os.environ["TRL_EXPERIMENTAL_SILENCE"] = "1"
    questions, db_dir = make_benchmark(tmp_path)
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    out = tmp_path / "out"
    args = _grpo_args(out, max_steps=3, save_strategy="steps", save_steps=1)

    def train(reward: Any, resume: bool, checkpoint: str | None) -> RolloutFunction:
        rollout = make_rollout_func(
            dataset=None, questions=str(questions), db_dir=str(db_dir), store=store,
            name="resumed", step_budget=1, max_new_tokens=4, resume=resume,
        )  # fmt: skip
        trainer = GRPOTrainer(
            model=AutoModelForCausalLM.from_pretrained(tiny_checkpoint),
            processing_class=AutoTokenizer.from_pretrained(tiny_checkpoint),
            reward_funcs=[reward],
            args=args,
            train_dataset=training_dataset(
                None, questions=str(questions), db_dir=str(db_dir), step_budget=1
            ),
            rollout_func=rollout,
        )
        with rollout.recording():
            trainer.train(resume_from_checkpoint=checkpoint)
        return rollout

    with pytest.raises(RuntimeError, match="node lost"):
        train(failing_at_call(3), False, None)
    first = store.find_run("resumed")
    assert first is not None and first.status == "failed"
    played = EpisodeFilter(run_ids=(first.id,))
    first_play = {e.id: e.train_step for e in store.list_episodes(played, limit=100).items}
    resumed = train(spread_reward, True, str(out / "checkpoint-1"))
    assert resumed.run_id == first.id
    run = store.get_run(first.id)
    assert run is not None and run.status == "completed"
    drawn = PROMPTS_PER_STEP * GROUP
    assert run.episodes_finished == 5 * drawn, "both plays of steps 1 and 2 are kept"
    assert [(s.train_step, s.episodes) for s in training_steps(store, run.id)] == [
        (0, drawn), (1, drawn), (2, drawn)
    ]  # fmt: skip
    assert played_again(store, run.id).by_step == {1: drawn, 2: drawn}
    replaced = {i for i, step in first_play.items() if step >= 1}
    every = [e.id for e in store.list_episodes(played, limit=100).items]
    assert store.replaced_among(every) == replaced
    store.close()
