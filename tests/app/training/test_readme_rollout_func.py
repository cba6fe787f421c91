"""The README's `Recorder` example, a TRL `rollout_func` of one's own, run as written: a real
`GRPOTrainer` trains the tiny checkpoint on CPU and every rollout lands in the store by step
and group. Only the trainer's settings are the test's (two steps on CPU)."""

from __future__ import annotations

import os
import re
import sqlite3
from contextlib import closing
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("trl")

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from app.trl import checkpointing_off

README = Path(__file__).resolve().parents[3] / "README.md"
WRITTEN_CONFIG = 'GRPOConfig(output_dir="grpo-output", num_generations=4, use_cpu=True, bf16=False)'
GROUP = 2
PROMPTS_PER_STEP = 2
STEPS = 2
QUESTIONS = ["How many singers are there?", "Which country is the oldest singer from?"]


def readme_block() -> str:
    """The README's Python block that builds the `rollout_func`."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    (block,) = [b for b in blocks if "def rollout_func" in b]
    return block


def play(prompt: list[dict[str, str]], model: Any, tokenizer: Any) -> SimpleNamespace:
    """A one-turn agent: sample a few tokens, rewarded for how many different ones it wrote."""
    prompt_ids = tokenizer(prompt[-1]["content"])["input_ids"]
    with torch.no_grad():
        out = model.generate(
            torch.tensor([prompt_ids]),
            max_new_tokens=6,
            min_new_tokens=6,
            do_sample=True,
            output_scores=True,
            return_dict_in_generate=True,
            pad_token_id=tokenizer.pad_token_id or 0,
        )
    completion_ids = out.sequences[0, len(prompt_ids) :].tolist()
    logprobs = [
        float(torch.log_softmax(scores[0].float(), -1)[token])
        for scores, token in zip(out.scores, completion_ids, strict=True)
    ]
    text = tokenizer.decode(completion_ids, skip_special_tokens=True)
    return SimpleNamespace(
        prompt_ids=prompt_ids,
        completion_ids=completion_ids,
        logprobs=logprobs,
        env_reward=len(set(completion_ids)) / 10,
        messages=[*prompt, {"role": "assistant", "content": text}],
    )


def test_the_readme_rollout_func_records_every_rollout(
    tiny_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from datasets import Dataset
    from trl import GRPOConfig

    block = readme_block()
    assert WRITTEN_CONFIG in block, "the README's trainer settings changed: update this test"
    settings = {
        "output_dir": str(tmp_path / "grpo-output"),
        "per_device_train_batch_size": GROUP * PROMPTS_PER_STEP,
        "num_generations": GROUP,
        "max_steps": STEPS,
        "use_cpu": True,
        "bf16": False,
        "report_to": [],
        "save_strategy": "no",
        "beta": 0.0,
        "seed": 1,
        "disable_tqdm": True,
        **checkpointing_off(GRPOConfig),
    }
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(os.environ, "TRL_EXPERIMENTAL_SILENCE", "1")
    namespace: dict[str, Any] = {
        "model": AutoModelForCausalLM.from_pretrained(tiny_checkpoint),
        "tokenizer": AutoTokenizer.from_pretrained(tiny_checkpoint),
        "dataset": Dataset.from_dict(
            {"prompt": [[{"role": "user", "content": q}] for q in QUESTIONS]}
        ),
        "play": play,
        "settings": settings,
    }
    exec(block.replace(WRITTEN_CONFIG, "GRPOConfig(**settings)"), namespace)

    with closing(sqlite3.connect(tmp_path / "runs.db")) as db:
        run = db.execute("SELECT id, kind, status FROM runs WHERE name = 'grpo-sql'").fetchone()
        assert run is not None and run[1:] == ("training", "completed")
        episodes = db.execute(
            "SELECT train_step, group_index, count(*), count(DISTINCT question) FROM episodes "
            "WHERE run_id = ? AND outcome IS NOT NULL GROUP BY 1, 2 ORDER BY 1, 2",
            (run[0],),
        ).fetchall()
        rewards = db.execute(
            "SELECT e.reward, s.raw_output, s.action FROM episodes e JOIN steps s "
            "ON s.episode_id = e.id WHERE e.run_id = ?",
            (run[0],),
        ).fetchall()
    # Each training step's prompts, each a group of its samples, at the trainer's steps.
    assert [(step, n, q) for step, _, n, q in episodes] == [(0, GROUP, 1)] * PROMPTS_PER_STEP + [
        (1, GROUP, 1)
    ] * PROMPTS_PER_STEP
    # Every rollout one step, its reward the environment's (a tenth per distinct token).
    assert len(rewards) == STEPS * PROMPTS_PER_STEP * GROUP
    assert all(0.1 <= r <= 0.6 and float(r * 10).is_integer() for r, _, _ in rewards)
