"""The policy leaves what belongs to its caller (model, tokenizer, torch RNG, threads) alone."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rollout_core.compat import rollout_func
from rollout_core.datasets import load_dataset
from rollout_core.policies.base import PolicyRequest
from rollout_core.policies.hf.borrowed import borrowed
from rollout_core.policies.hf.policy import HFPolicy
from rollout_core.policies.hf.shared_prefix import ATTENTION_NAME, register
from rollout_core.settings import GenerationSettings
from tests.support.benchmark import make_benchmark


def _caller(tiny_checkpoint: Path) -> tuple[Any, Any]:
    """A model and tokenizer as a training loop holds them: training mode, its own settings."""
    model = AutoModelForCausalLM.from_pretrained(tiny_checkpoint)
    model.train(True)
    tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint)
    tokenizer.padding_side = "right"
    tokenizer.pad_token = None
    return model, tokenizer


def _state(model: Any, tokenizer: Any) -> dict[str, Any]:
    return {
        "threads": torch.get_num_threads(),
        "padding_side": tokenizer.padding_side,
        "pad_token": tokenizer.pad_token,
        "attention": model.config._attn_implementation,
        "training": [m.training for m in model.modules()],
    }


def _requests(tmp_path: Path) -> list[PolicyRequest]:
    ds = load_dataset(*make_benchmark(tmp_path))
    system = "Answer with one action line: DESCRIBE, SAMPLE, QUERY or ANSWER. " * 3
    return [
        PolicyRequest(
            [{"role": "system", "content": system}, {"role": "user", "content": q.question}],
            q,
            ds.db_path(q.db_id),
            step_no=1,
            seed=i,
            episode=None,
        )
        for i, q in enumerate(ds.questions)
    ]


def test_a_policy_call_leaves_the_callers_state_as_it_was(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    model, tokenizer = _caller(tiny_checkpoint)
    ids = torch.tensor([tokenizer("QUERY SELECT name FROM singer")["input_ids"]])
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    torch.manual_seed(1234)
    rng = torch.get_rng_state()
    threads = torch.get_num_threads()
    before = _state(model, tokenizer)
    settings = GenerationSettings(max_new_tokens=6, temperature=0.8, threads=threads + 1)
    policy = HFPolicy.from_model(model, tokenizer, settings, shared_prefix=True)
    completions = policy.generate(_requests(tmp_path))
    assert completions and policy.shared_prefix_calls == 1  # the switched attention was used
    assert _state(model, tokenizer) == before
    assert torch.equal(torch.get_rng_state(), rng)
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids=ids).logits, logits, atol=0, rtol=0)


def test_the_state_is_restored_when_the_call_fails(tiny_checkpoint: Path) -> None:
    model, tokenizer = _caller(tiny_checkpoint)
    before = _state(model, tokenizer)
    register()
    with (
        pytest.raises(RuntimeError, match="inside"),
        borrowed(model, threads=torch.get_num_threads() + 1, attention=ATTENTION_NAME),
    ):
        assert model.config._attn_implementation == ATTENTION_NAME
        assert not model.training and torch.get_num_threads() == before["threads"] + 1
        raise RuntimeError("inside")
    assert _state(model, tokenizer) == before


def test_importing_the_policy_changes_no_global_setting() -> None:
    """No hub switch in the environment, no attention function registered until first use."""
    code = (
        "import os\n"
        "os.environ.pop('HF_HUB_OFFLINE', None)\n"
        "import rollout_core.policies.hf.policy\n"
        "from transformers import AttentionInterface\n"
        "print(os.environ.get('HF_HUB_OFFLINE'), 'sdpa_shared_prefix' in AttentionInterface())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.split() == ["None", "False"]


@pytest.mark.parametrize(
    "make_config",
    [
        lambda questions, db_dir: SimpleNamespace(
            questions_path=questions, db_dir=db_dir, step_budget=2, seed=3, max_new_tokens=8
        ),
        # argparse leaves no `seed` unless asked: getattr(config, "seed", None) is None
        lambda questions, db_dir: argparse.Namespace(
            questions_path=str(questions), db_dir=str(db_dir), step_budget=2
        ),
    ],
    ids=["SimpleNamespace", "argparse-without-seed"],
)
def test_rollout_func_takes_an_attribute_config(
    tiny_checkpoint: Path, tmp_path: Path, make_config: Any
) -> None:
    questions, db_dir = make_benchmark(tmp_path)
    model = AutoModelForCausalLM.from_pretrained(tiny_checkpoint)
    tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint)
    attention = model.config._attn_implementation
    config = make_config(questions, db_dir)
    results = rollout_func(["q-count", "q-count", "q-join"], model, tokenizer, config)
    assert [r["metadata"]["question_id"] for r in results] == ["q-count", "q-count", "q-join"]
    assert all(1 <= r["metadata"]["step_count"] <= 2 for r in results)
    assert results[0]["metadata"]["episode_id"] != results[1]["metadata"]["episode_id"]
    assert model.config._attn_implementation == attention == "sdpa"
