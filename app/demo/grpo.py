"""The demo's training run: a short GRPO run (TRL, CPU) of the trained demo checkpoint on the
train split, its rollouts recorded by app.trl, so the Training page has a run to show."""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from storage.store import Store

Log = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class GrpoSettings:
    """The demo's GRPO run, sized for `make run`'s 5 minutes on 2 CPU cores: a step took 8-13
    CPU-seconds (measured on a loaded machine), so 16 steps add about 2-3 minutes of CPU."""

    steps: int = 16
    prompts_per_step: int = 2
    num_generations: int = 4
    """Episodes per prompt: the GRPO group."""
    questions: int = 8
    """Train-split questions trained on: 16 steps x 2 prompts meet each of 8 about 4 times, so
    the Training page can show one question early, midway and late (85 would meet each once)."""
    learning_rate: float = 3e-4
    """At 1e-3 the policy collapsed: its mean token log-prob went from -0.45 to -0.1 within 16
    steps and it answered 6 of 128 episodes right (3e-4: 14, log-prob steady at -0.4)."""
    temperature: float = 0.7
    """The batch runs' sampling temperature: at 1.0 checkpoint-500 answers almost nothing, and
    groups with no right answer give no learning signal."""
    step_budget: int = 4
    """Fewer actions than the batch runs: the conversation stays well inside the model's
    2048-token context (240 + 4 x (48 + 256 + 10) tokens at most)."""
    max_new_tokens: int = 48
    seed: int = 0


def run_name(checkpoint: Path) -> str:
    """The training run's name in the store: `grpo-<checkpoint directory>`."""
    return f"grpo-{checkpoint.name}"


def train_demo_run(
    store: Store, checkpoint: Path, work_dir: Path, settings: GrpoSettings, log: Log
) -> str | None:
    """Train `checkpoint` with GRPO for a few steps into run `grpo-<checkpoint>`; returns its
    name, or None when TRL is not installed (`pip install 'rollscope[trl]'`)."""
    try:
        from trl.trainer.grpo_config import GRPOConfig
        from trl.trainer.grpo_trainer import GRPOTrainer
    except ImportError:
        log("no training run: TRL is not installed (pip install 'rollscope[trl]')")
        return None
    # Imported here, not at the top: they import torch, and the CLI imports this module.
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.trainer_callback import PrinterCallback

    from app.trl import checkpointing_off, make_rollout_func, shaped_reward, training_dataset
    from rollout_core.policies.hf.quiet import quiet_progress

    name = run_name(checkpoint)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    rollout = make_rollout_func(
        dataset="demo:train",
        store=store,
        name=name,
        limit=settings.questions,
        step_budget=settings.step_budget,
        max_new_tokens=settings.max_new_tokens,
        batch_size=settings.prompts_per_step * settings.num_generations,
        seed=settings.seed,
    )
    args = GRPOConfig(
        output_dir=str(work_dir / "grpo"),
        per_device_train_batch_size=settings.prompts_per_step * settings.num_generations,
        num_generations=settings.num_generations,
        max_steps=settings.steps,
        learning_rate=settings.learning_rate,
        temperature=settings.temperature,
        beta=0.0,
        use_cpu=True,
        bf16=False,  # fp32 on CPU: the recorded log-probs are the ones the trainer scores
        **checkpointing_off(GRPOConfig),
        report_to=[],
        logging_steps=1,
        save_strategy="no",
        disable_tqdm=True,
        seed=settings.seed,
    )
    # TRL's hints take prompts as strings and rewards as list[float | None]; the prompts here
    # are chat messages and the rewards floats, which it handles the same.
    reward_funcs: list[Any] = [shaped_reward]
    with quiet_progress():
        model = AutoModelForCausalLM.from_pretrained(checkpoint, local_files_only=True)
        tokenizer = AutoTokenizer.from_pretrained(checkpoint, local_files_only=True)
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=reward_funcs,
        args=args,
        train_dataset=training_dataset(
            "demo:train", limit=settings.questions, step_budget=settings.step_budget
        ),
        rollout_func=cast(Any, rollout),
    )
    # The demo says what it trained in one line; the trainer's own would print each step's
    # metrics (with its progress bar off), which the Training page shows from the store.
    trainer.remove_callback(PrinterCallback)
    t0 = time.perf_counter()
    with rollout.recording(), warnings.catch_warnings():
        # TRL reads the model's deprecated `is_gradient_checkpointing` every step: its
        # warning, not ours.
        warnings.filterwarnings(
            "ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning
        )
        trainer.train()
    log(f"{name}: {settings.steps} GRPO steps, {time.perf_counter() - t0:.1f} s")
    return name
