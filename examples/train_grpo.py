"""Train a checkpoint with TRL's GRPOTrainer on rollscope's text-to-SQL episodes, recording
every rollout in a rollscope store (open the dashboard's Training page to watch it).

    python examples/train_grpo.py --checkpoint demo/checkpoints/checkpoint-500 --steps 8
    rollscope dashboard --store rollscope.db        # Training page: the run, step by step
"""

from __future__ import annotations

import argparse
import os

from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer

from app.trl import (
    checkpointing_off,
    correct_reward,
    make_rollout_func,
    shaped_reward,
    training_dataset,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True, help="a local transformers checkpoint")
    parser.add_argument("--dataset", default="demo:train", help="demo:train, or a questions file")
    parser.add_argument("--store", default="sqlite:///rollscope.db")
    parser.add_argument("--name", default="grpo-example", help="the training run's name")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--output-dir", default="grpo-output")
    args = parser.parse_args()
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is experimental in TRL

    step_budget = 4  # actions per episode; the prompts say so too
    rollout_func = make_rollout_func(
        dataset=args.dataset,
        store=args.store,
        name=args.name,
        step_budget=step_budget,
        max_new_tokens=48,  # tokens per action
        batch_size=16,  # episodes generated together
    )
    config = GRPOConfig(
        output_dir=args.output_dir,
        per_device_train_batch_size=8,  # 2 prompts x 4 episodes each
        num_generations=4,  # the GRPO group: episodes of one question
        max_steps=args.steps,
        learning_rate=3e-4,  # 1e-3 collapsed the demo checkpoint's policy within 16 steps
        temperature=1.0,  # rollouts sample (and are scored) at the trainer's temperature
        beta=0.0,
        reward_weights=[1.0, 0.0],  # train on the shaped reward; log accuracy beside it
        use_cpu=True,  # drop on a GPU machine
        bf16=False,
        **checkpointing_off(GRPOConfig),  # a tiny model on CPU: recomputing costs, saves nothing
        logging_steps=1,
        save_strategy="no",
        report_to=[],
    )
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(args.checkpoint),
        processing_class=AutoTokenizer.from_pretrained(args.checkpoint),
        reward_funcs=[shaped_reward, correct_reward],
        args=config,
        train_dataset=training_dataset(args.dataset, step_budget=step_budget),
        rollout_func=rollout_func,
    )
    with rollout_func.recording():  # a crash marks the run failed, with its error
        trainer.train()
    print(f"run {args.name!r} (#{rollout_func.run_id}) recorded in {args.store}")


if __name__ == "__main__":
    main()
