"""The transformers policy's caches change the work done, never the tokens generated."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from transformers import AutoTokenizer, MistralConfig, MistralForCausalLM

from app.demo.tiny_model import build_model
from rollout_core.datasets import Dataset, load_dataset
from rollout_core.policies.base import PolicyError
from rollout_core.policies.hf.policy import HFPolicy
from rollout_core.policies.hf.prefix_cache import _common_prefix
from rollout_core.records import ListSink
from rollout_core.runner import plan_episodes, run_episodes
from rollout_core.settings import GenerationSettings
from tests.support.benchmark import make_benchmark

TEN = GenerationSettings(max_new_tokens=10)


def _run(ds: Dataset, policy: HFPolicy) -> list[tuple[str, int, int, str]]:
    """Multi-turn episodes, two samples per question, the batch refilled as episodes end."""
    sink = ListSink()
    tasks = plan_episodes(ds.questions, samples=2, run_seed=0)
    run_episodes(ds, tasks, policy, sink, batch_size=4, step_budget=3)
    return sorted((s.question_id, s.sample_index, s.step_no, s.raw_output) for s in sink.steps)


@pytest.fixture
def dataset(tmp_path: Path) -> Dataset:
    return load_dataset(*make_benchmark(tmp_path))


def test_shared_prefix_changes_nothing_but_the_work(
    tiny_checkpoint: Path, dataset: Dataset
) -> None:
    shared = HFPolicy(tiny_checkpoint, TEN, shared_prefix=True)
    per_row = HFPolicy(tiny_checkpoint, TEN, shared_prefix=False)
    uncached = HFPolicy(tiny_checkpoint, TEN, prefix_cache=False)
    outputs = _run(dataset, shared)
    assert outputs == _run(dataset, per_row) == _run(dataset, uncached)
    # every batch after the first wave starts with the system prompt held once
    assert shared.shared_prefix_calls > 1
    assert per_row.shared_prefix_calls == uncached.shared_prefix_calls == 0


def _from_model(model: Any, tokenizer: Any, **kw: Any) -> HFPolicy:
    return HFPolicy.from_model(model, tokenizer, TEN, **kw)


def test_grouped_query_attention_model(tiny_checkpoint: Path, dataset: Dataset) -> None:
    """Two query heads per key/value head, as in most released models."""
    tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint)
    model = build_model(tokenizer, hidden=32, layers=2, heads=4, kv_heads=2, ffn=64)
    shared = _from_model(model, tokenizer, shared_prefix=True)
    outputs = _run(dataset, shared)
    assert shared.shared_prefix_calls > 1
    plain = build_model(tokenizer, hidden=32, layers=2, heads=4, kv_heads=2, ffn=64)
    assert outputs == _run(dataset, _from_model(plain, tokenizer, prefix_cache=False))


def test_sliding_window_model_runs_without_the_caches(
    tiny_checkpoint: Path, dataset: Dataset
) -> None:
    """Sliding-window layers keep only recent positions: no reuse, no shared prefix."""
    tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint)
    config = MistralConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        sliding_window=64,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(0)
    model = MistralForCausalLM(config).train(False)
    policy = _from_model(model, tokenizer)
    assert not policy.shared_prefix
    assert _run(dataset, policy)
    assert not policy.prefix_cache  # switched itself off on the first call
    assert policy.reused_tokens == 0
    with pytest.raises(PolicyError, match="full attention"):
        _from_model(model, tokenizer, shared_prefix=True)


def test_the_model_keeps_its_attention_outside_the_policys_calls(
    tiny_checkpoint: Path, dataset: Dataset
) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint)
    model = build_model(tokenizer, hidden=32, layers=2, heads=2, ffn=64)
    ids = torch.tensor([tokenizer("SELECT name FROM singer")["input_ids"]])
    with torch.inference_mode():
        before = model(input_ids=ids).logits
    policy = _from_model(model, tokenizer, shared_prefix=True)
    assert _run(dataset, policy) and policy.shared_prefix_calls > 0
    assert model.config._attn_implementation == "sdpa"
    with torch.inference_mode():
        torch.testing.assert_close(model(input_ids=ids).logits, before, atol=0, rtol=0)


def _naive_common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


@given(
    st.lists(st.integers(0, 3), max_size=40),
    st.lists(st.integers(0, 3), max_size=40),
    st.lists(st.integers(0, 3), max_size=40),
)
def test_common_prefix(head: list[int], a: list[int], b: list[int]) -> None:
    x, y = head + a, head + b
    assert _common_prefix(x, y) == _naive_common_prefix(x, y)
