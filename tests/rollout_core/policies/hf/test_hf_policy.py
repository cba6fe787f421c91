"""A tiny random-init transformers model through the real batched `generate` path."""

from __future__ import annotations

from pathlib import Path

import pytest

from rollout_core.compat import play_episode, rollout_func
from rollout_core.datasets import load_dataset
from rollout_core.environment import SQLEnvironment
from rollout_core.policies.base import PolicyError, PolicyRequest
from rollout_core.policies.hf.policy import HFPolicy
from rollout_core.policies.registry import make_policy
from rollout_core.records import ListSink
from rollout_core.runner import plan_episodes, run_episodes
from rollout_core.settings import GenerationSettings
from tests.support.benchmark import make_benchmark


def _requests(tmp_path: Path) -> list[PolicyRequest]:
    questions, db_dir = make_benchmark(tmp_path)
    ds = load_dataset(questions, db_dir)
    reqs = []
    for i, q in enumerate(ds.questions):
        msgs = [
            {"role": "system", "content": "Act."},
            {"role": "user", "content": f"Question: {q.question}" + " please" * i},
        ]
        reqs.append(PolicyRequest(msgs, q, ds.db_path(q.db_id), step_no=1, seed=i))
    return reqs


def test_batched_greedy_equals_one_at_a_time(tiny_checkpoint: Path, tmp_path: Path) -> None:
    policy = HFPolicy(tiny_checkpoint, GenerationSettings(max_new_tokens=12, device="cpu"))
    reqs = _requests(tmp_path)  # prompts of different lengths: left padding matters
    batched = policy.generate(reqs)
    single = [policy.generate([r])[0] for r in reqs]
    assert [c.text for c in batched] == [c.text for c in single]
    assert [c.tokens_in for c in batched] == [c.tokens_in for c in single]
    assert all(c.tokens_in and 0 < (c.tokens_out or 0) <= 12 for c in batched)
    lengths = {c.tokens_in for c in batched}
    assert len(lengths) > 1


def test_sampling_is_seeded(tiny_checkpoint: Path, tmp_path: Path) -> None:
    reqs = _requests(tmp_path)
    sampled = GenerationSettings(max_new_tokens=8, temperature=1.0, seed=1)
    a = HFPolicy(tiny_checkpoint, sampled).generate(reqs)
    b = HFPolicy(tiny_checkpoint, sampled).generate(reqs)
    assert [c.text for c in a] == [c.text for c in b]


def test_describe_reports_what_was_chosen(tiny_checkpoint: Path) -> None:
    settings = GenerationSettings(max_new_tokens=5, temperature=0.7)
    policy = make_policy(f"hf:{tiny_checkpoint}", settings)
    info = policy.describe()
    assert policy.describe() is info  # computed once: the fingerprint reads the weights index
    assert info.name == "hf" and info.model_class == "LlamaForCausalLM"
    assert info.device == "cpu" and info.dtype == "float32"
    assert info.parameters is not None and info.parameters > 0
    assert info.fingerprint is not None and info.extra["checkpoint"] == str(tiny_checkpoint)


def test_episodes_run_end_to_end_with_token_counts(tiny_checkpoint: Path, tmp_path: Path) -> None:
    questions, db_dir = make_benchmark(tmp_path)
    ds = load_dataset(questions, db_dir)
    policy = HFPolicy(tiny_checkpoint, GenerationSettings(max_new_tokens=10))
    sink = ListSink()
    tasks = plan_episodes(ds.questions, samples=2, run_seed=0)
    stats = run_episodes(ds, tasks, policy, sink, batch_size=8, step_budget=3)
    assert stats.episodes == 12
    assert all(e.steps <= 3 for e in sink.episodes)
    assert all(s.tokens_in and s.tokens_out is not None for s in sink.steps)
    # the conversation grows: later steps see longer prompts
    first = {s.question_id: s.tokens_in for s in sink.steps if s.step_no == 1}
    later = [s for s in sink.steps if s.step_no == 2]
    assert later and all((s.tokens_in or 0) > (first[s.question_id] or 0) for s in later)


def test_prefix_cache_changes_nothing_but_the_work(tiny_checkpoint: Path, tmp_path: Path) -> None:
    questions, db_dir = make_benchmark(tmp_path)
    ds = load_dataset(questions, db_dir)
    outputs = {}
    for cached in (True, False):
        policy = HFPolicy(
            tiny_checkpoint, GenerationSettings(max_new_tokens=10), prefix_cache=cached
        )
        sink = ListSink()
        tasks = plan_episodes(ds.questions, samples=2, run_seed=0)
        run_episodes(ds, tasks, policy, sink, batch_size=4, step_budget=3)
        outputs[cached] = [
            (s.question_id, s.sample_index, s.step_no, s.raw_output) for s in sink.steps
        ]
        if cached:
            # later turns and later episodes start from cached conversations and system prompts
            assert policy.reused_tokens > sum(s.tokens_in or 0 for s in sink.steps) / 3
            assert len(policy._prefix) <= 4  # finished episodes are released
        else:
            assert policy.reused_tokens == 0
    assert outputs[True] == outputs[False]


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda p: None, "not found"),
        (lambda p: p.mkdir(), "no config.json"),
        (lambda p: (p.mkdir(), (p / "config.json").write_text("{}")), "no weights"),
    ],
)
def test_bad_checkpoint_dirs(tmp_path: Path, setup: object, message: str) -> None:
    path = tmp_path / "ckpt"
    setup(path)  # type: ignore[operator]
    with pytest.raises(PolicyError, match=message):
        make_policy(f"hf:{path}")


def test_rollout_func_keeps_the_original_result_shape(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    questions, db_dir = make_benchmark(tmp_path)
    model = AutoModelForCausalLM.from_pretrained(tiny_checkpoint)
    tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint)
    config = {"questions_path": questions, "db_dir": db_dir, "step_budget": 2, "max_new_tokens": 8}
    results = rollout_func(
        ["q-count", "q-count", "Which singers are from Peru?"], model, tokenizer, config
    )
    assert len(results) == 3
    for r in results:
        assert set(r) >= {
            "prompt",
            "completion",
            "content",
            "metadata",
            "correct",
            "progress",
            "operational",
        }
        assert set(r["metadata"]) >= {
            "episode_id",
            "step_count",
            "done",
            "answer_correct",
            "cumulative_progress",
            "operational_signals",
        }
        assert "<|im_start|>" not in r["prompt"] and "Question:" in r["prompt"]
    assert results[0]["metadata"]["episode_id"] != results[1]["metadata"]["episode_id"]


def test_play_episode_with_a_scripted_policy(tmp_path: Path) -> None:
    questions, db_dir = make_benchmark(tmp_path)
    env = SQLEnvironment(questions, db_dir, step_budget=5)
    result = play_episode(env, make_policy("oracle"), question_id="q-oldest")
    assert result["correct"] is True
    assert result["metadata"]["step_count"] == 3
    assert result["completion"].splitlines()[0].startswith("DESCRIBE")


def test_a_generated_padding_token_is_output_like_any_other(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    """Generation stops at an end-of-sequence token only: where the model itself writes the
    padding token, the tokens after it are still its output."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    settings = GenerationSettings(max_new_tokens=12, device="cpu")
    request = _requests(tmp_path)[:1]
    plain = HFPolicy(tiny_checkpoint, settings).generate(request)[0]
    assert plain.tokens is not None and plain.tokens_out == 12 and plain.truncated
    ids = plain.tokens.ids
    tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint)
    tokenizer.pad_token = tokenizer.convert_ids_to_tokens(ids[1])  # a token it writes
    model = AutoModelForCausalLM.from_pretrained(tiny_checkpoint)
    padded = HFPolicy(tiny_checkpoint, settings, model=model, tokenizer=tokenizer)
    assert padded.pad_id == ids[1] and padded.pad_id not in padded.eos_ids
    again = padded.generate(request)[0]
    assert again.tokens is not None and again.tokens.ids == ids
    assert again.tokens_out == 12 and again.truncated
