"""One GRPO step with rollscope's multi-turn rollout function against TRL's own single-turn
generation of the same number of model tokens; and the share of a rollout spent outside
`generate` (environment, SQL, tokenizing, recording in the store).

Run with `pytest tests/benchmarks/bench_trl.py -s --benchmarks`. Knobs: BENCH_CHECKPOINT (a
checkpoint directory; default the tests' tiny random checkpoint), BENCH_STEPS (4; the first is a
warm-up and left out), BENCH_PROMPTS (4 per step), BENCH_GROUP (4), BENCH_BUDGET (4),
BENCH_NEW_TOKENS (48), BENCH_THREADS (2). Medians over the measured steps are printed.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("trl")

import torch

from app.trl import checkpointing_off, make_rollout_func, shaped_reward, training_dataset
from storage.store import Store


def _env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


class _Clock:
    """Seconds per training step: the whole step, its rollouts, and `generate` inside them."""

    def __init__(self) -> None:
        self.step: list[float] = []
        self.generate: list[float] = []
        self.rollout: list[float] = []
        self.model_tokens: list[int] = []
        self._t0 = 0.0

    def callback(self) -> Any:
        from transformers import TrainerCallback

        clock = self

        class _Steps(TrainerCallback):
            def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                clock._t0 = time.perf_counter()
                clock.generate.append(0.0)
                clock.rollout.append(0.0)
                clock.model_tokens.append(0)

            def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                clock.step.append(time.perf_counter() - clock._t0)

        return _Steps()

    def time_generate(self, model: Any) -> None:
        """Time the model's `generate`, which both rollout paths call."""
        inner = model.generate

        def generate(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            out = inner(*args, **kwargs)
            self.generate[-1] += time.perf_counter() - t0
            return out

        model.generate = generate

    def time_rollout(self, rollout: Callable[..., Any]) -> Callable[..., Any]:
        def timed(prompts: Any, trainer: Any) -> Any:
            t0 = time.perf_counter()
            out = rollout(prompts, trainer)
            self.rollout[-1] += time.perf_counter() - t0
            self.model_tokens[-1] += sum(sum(m) for m in out["env_mask"])
            return out

        return timed


def _train(checkpoint: Path, out: Path, clock: _Clock, **over: Any) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    from rollout_core.policies.hf.quiet import quiet_progress

    group, prompts = _env_int("BENCH_GROUP", 4), _env_int("BENCH_PROMPTS", 4)
    rollout = over.pop("rollout_func", None)
    args = GRPOConfig(
        output_dir=str(out),
        per_device_train_batch_size=group * prompts,
        num_generations=group,
        max_steps=_env_int("BENCH_STEPS", 4),
        learning_rate=1e-4,
        beta=0.0,
        use_cpu=True,
        bf16=False,
        **checkpointing_off(GRPOConfig),
        report_to=[],
        logging_steps=1,
        save_strategy="no",
        disable_tqdm=True,
        seed=0,
        **over,
    )
    with quiet_progress():
        model = AutoModelForCausalLM.from_pretrained(checkpoint)
    clock.time_generate(model)
    trainer = GRPOTrainer(
        model=model,
        processing_class=AutoTokenizer.from_pretrained(checkpoint),
        reward_funcs=[shaped_reward] if rollout else [_length_reward],
        args=args,
        train_dataset=training_dataset("demo:train", step_budget=_env_int("BENCH_BUDGET", 4)),
        rollout_func=rollout,
        callbacks=[clock.callback()],
    )
    # The benchmark prints its own figures; the trainer's would print every step's metrics.
    trainer.remove_callback(PrinterCallback)
    trainer.train()


def _length_reward(*, completion_ids: list[list[int]], **_: Any) -> list[float]:
    return [len(set(ids)) / 100.0 for ids in completion_ids]


def test_grpo_step_multi_turn_rollouts_against_trl_generation(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    os.environ["TRL_EXPERIMENTAL_SILENCE"] = "1"
    checkpoint = Path(os.environ.get("BENCH_CHECKPOINT", tiny_checkpoint))
    threads = torch.get_num_threads()
    torch.set_num_threads(_env_int("BENCH_THREADS", 2))
    try:
        ours = _Clock()
        rollout = make_rollout_func(
            dataset="demo:train",
            store=Store(f"sqlite:///{tmp_path / 'store.db'}"),
            name="bench",
            step_budget=_env_int("BENCH_BUDGET", 4),
            max_new_tokens=_env_int("BENCH_NEW_TOKENS", 48),
            batch_size=_env_int("BENCH_GROUP", 4) * _env_int("BENCH_PROMPTS", 4),
        )
        with rollout.recording():
            _train(checkpoint, tmp_path / "ours", ours, rollout_func=ours.time_rollout(rollout))
        episodes = _env_int("BENCH_GROUP", 4) * _env_int("BENCH_PROMPTS", 4)
        per_episode = round(statistics.median(ours.model_tokens[1:]) / episodes)
        trl = _Clock()
        # Every completion exactly as long as our episodes' model tokens, on average.
        _train(
            checkpoint,
            tmp_path / "trl",
            trl,
            max_completion_length=per_episode,
            generation_kwargs={"min_new_tokens": per_episode},
        )
    finally:
        torch.set_num_threads(threads)

    def med(xs: list[float]) -> float:
        return statistics.median(xs[1:])

    outside = [1 - g / r for g, r in zip(ours.generate[1:], ours.rollout[1:], strict=True)]
    print(
        f"\n{checkpoint.name}: {episodes} episodes per step, {per_episode} model tokens each, "
        f"median of {len(ours.step) - 1} steps after a warm-up\n"
        f"  rollscope rollout_func (multi-turn): step {med(ours.step):.2f} s, rollouts "
        f"{med(ours.rollout):.2f} s, generate {med(ours.generate):.2f} s, outside generate "
        f"{statistics.median(outside):.0%} of the rollouts\n"
        f"  TRL generation (single-turn):       step {med(trl.step):.2f} s, generate "
        f"{med(trl.generate):.2f} s"
    )
    assert len(ours.step) == len(trl.step) == _env_int("BENCH_STEPS", 4)
