"""Sampled episodes depend on their own seeds alone; recorded log-probabilities are the model's."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rollout_core.datasets import Dataset, load_dataset
from rollout_core.policies.base import PolicyRequest
from rollout_core.policies.hf.policy import HFPolicy
from rollout_core.policies.hf.sampling import TokenChooser
from rollout_core.records import ListSink, StepRecord
from rollout_core.runner import plan_episodes, run_episodes
from rollout_core.settings import GenerationSettings
from tests.support.benchmark import make_benchmark

SAMPLED = GenerationSettings(max_new_tokens=12, temperature=0.9, top_p=0.95, device="cpu")


@pytest.fixture
def dataset(tmp_path: Path) -> Dataset:
    return load_dataset(*make_benchmark(tmp_path))


def _steps(ds: Dataset, policy: HFPolicy, batch_size: int, samples: int = 4) -> list[StepRecord]:
    sink = ListSink()
    tasks = plan_episodes(ds.questions, samples=samples, run_seed=7)
    run_episodes(ds, tasks, policy, sink, batch_size=batch_size, step_budget=3)
    return sorted(sink.steps, key=lambda s: (s.question_id, s.sample_index, s.step_no))


def _outputs(steps: list[StepRecord]) -> list[tuple[str, int, int, str, tuple[int, ...]]]:
    return [
        (s.question_id, s.sample_index, s.step_no, s.raw_output, s.tokens.ids or ())
        for s in steps
        if s.tokens is not None
    ]


def test_sampled_episodes_do_not_depend_on_the_batch(
    tiny_checkpoint: Path, dataset: Dataset
) -> None:
    """Batch 4 and batch 16, prefix cache and shared prefix on: the same 24 episodes."""
    small = HFPolicy(tiny_checkpoint, SAMPLED)
    large = HFPolicy(tiny_checkpoint, SAMPLED)
    at_4, at_16 = _steps(dataset, small, 4), _steps(dataset, large, 16)
    assert len(_outputs(at_4)) == len(at_4) > 24
    assert _outputs(at_4) == _outputs(at_16)
    assert small.shared_prefix_calls > 0 and large.shared_prefix_calls > 0
    assert small.reused_tokens > 0 and large.reused_tokens > 0
    # the samples of one question differ: each episode draws from its own seed
    first_steps = {s.raw_output for s in at_4 if s.question_id == "q-count" and s.step_no == 1}
    assert len(first_steps) > 1
    for a, b in zip(at_4, at_16, strict=True):
        assert a.tokens is not None and b.tokens is not None
        assert a.tokens.logprobs == pytest.approx(b.tokens.logprobs, abs=1e-4)


def test_a_resumed_episode_reproduces_its_outputs(tiny_checkpoint: Path, dataset: Dataset) -> None:
    """A fresh policy given the recorded conversations samples what the first one did."""
    steps = _steps(dataset, HFPolicy(tiny_checkpoint, SAMPLED), 8, samples=2)
    tasks = plan_episodes(dataset.questions, samples=2, run_seed=7)
    seeds = {(t.question.id, t.sample_index): t.seed for t in tasks}
    by_id = {q.id: q for q in dataset.questions}
    later = [s for s in steps if s.step_no > 1]
    assert later
    requests = [
        PolicyRequest(
            [dict(m) for m in s.prompt],
            by_id[s.question_id],
            dataset.db_path(by_id[s.question_id].db_id),
            step_no=s.step_no,
            seed=seeds[(s.question_id, s.sample_index)],
            episode=s.key,
        )
        for s in later
    ]
    resumed = HFPolicy(tiny_checkpoint, SAMPLED).generate(requests)
    assert [c.text for c in resumed] == [s.raw_output for s in later]


def _teacher_forced(
    policy: HFPolicy, prompt_ids: list[int], ids: tuple[int, ...], temperature: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Log-probabilities of `ids`, entropies and the largest log-probabilities at each position,
    from one forward pass over prompt + ids."""
    full = torch.tensor([prompt_ids + list(ids)])
    with torch.inference_mode():
        logits = policy.model(input_ids=full).logits[0, len(prompt_ids) - 1 : -1].float()
    logp = torch.log_softmax(logits / (temperature or 1.0), dim=-1)
    chosen = logp.gather(1, torch.tensor(ids).unsqueeze(1)).squeeze(1)
    entropy = -(logp.exp() * logp).sum(dim=-1)
    return chosen, entropy, logp.max(dim=-1).values


@pytest.mark.parametrize(
    "settings",
    [
        GenerationSettings(max_new_tokens=12),
        SAMPLED,
        GenerationSettings(max_new_tokens=12, temperature=1.7),
    ],
    ids=["greedy", "t0.9-top-p", "t1.7"],
)
def test_recorded_logprobs_match_a_forward_pass(
    tiny_checkpoint: Path, dataset: Dataset, settings: GenerationSettings
) -> None:
    """Every step of multi-turn episodes (later turns from the caches) against teacher forcing."""
    policy = HFPolicy(tiny_checkpoint, settings)
    steps = _steps(dataset, policy, 4, samples=1)
    assert any(s.step_no > 1 for s in steps) and policy.reused_tokens > 0
    worst = 0.0
    for step in steps:
        trace = step.tokens
        assert trace is not None and trace.ids and trace.logprobs and trace.entropies
        assert len(trace.ids) == len(trace.logprobs) == len(trace.entropies) == len(trace.text)
        assert "".join(trace.text) == step.raw_output
        assert step.tokens_out == len(trace.ids)
        assert step.truncated == (trace.ids[-1] not in policy.eos_ids)
        assert step.cached_tokens is not None and 0 <= step.cached_tokens < (step.tokens_in or 0)
        prompt = policy.render([dict(m) for m in step.prompt])
        prompt_ids = policy.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        logprobs, entropies, best = _teacher_forced(
            policy, prompt_ids, trace.ids, settings.temperature
        )
        got = torch.tensor(trace.logprobs)
        torch.testing.assert_close(got, logprobs, atol=1e-4, rtol=0)
        torch.testing.assert_close(torch.tensor(trace.entropies), entropies, atol=1e-4, rtol=0)
        if settings.temperature == 0:  # greedy chose the most likely token
            torch.testing.assert_close(got, best, atol=1e-4, rtol=0)
        worst = max(worst, float((got - logprobs).abs().max()))
    print(f"\nmax |logprob - teacher-forced| over {len(steps)} steps: {worst:.2e}")
    # later turns came from the cache; the first turn of the first wave did not
    assert any((s.cached_tokens or 0) > 0 for s in steps if s.step_no > 1)


def _choose(logits: torch.Tensor, seeds: list[tuple[int, int]], **kw: float) -> torch.Tensor:
    """One decoding step of the chooser over `logits` ([rows, vocab]); the chosen ids."""
    chooser = TokenChooser(3, seeds=seeds, **kw)
    forced = chooser(torch.zeros((len(seeds), 3), dtype=torch.long), logits.clone())
    return forced.argmax(dim=-1)


def test_draws_follow_the_tempered_top_p_distribution() -> None:
    logits = torch.tensor([2.0, 1.0, 0.5, 0.0, -3.0])
    rows = 8000
    seeds = [(seed, 1) for seed in range(rows)]
    for temperature, top_p in ((1.0, 1.0), (0.7, 1.0), (1.3, 0.8)):
        probs = torch.softmax(logits / temperature, dim=-1)
        kept = (torch.cumsum(probs, 0) - probs) < top_p  # the nucleus (probs are sorted here)
        want = torch.where(kept, probs, 0.0) / probs[kept].sum()
        chosen = _choose(logits.expand(rows, -1), seeds, temperature=temperature, top_p=top_p)
        got = torch.bincount(chosen, minlength=5).float() / rows
        # 8,000 draws: a frequency's standard error is at most 0.0056; allow five of them
        torch.testing.assert_close(got, want, atol=0.028, rtol=0)
        assert got[~kept].sum() == 0


def test_a_rows_draw_depends_on_its_own_seed_alone() -> None:
    torch.manual_seed(0)
    logits = torch.randn(6, 50)
    seeds = [(100 + i, 2) for i in range(6)]
    together = _choose(logits, seeds, temperature=1.0, top_p=0.9)
    alone = torch.cat(
        [_choose(logits[i : i + 1], seeds[i : i + 1], temperature=1.0, top_p=0.9) for i in range(6)]
    )
    reordered = _choose(logits.flip(0), seeds[::-1], temperature=1.0, top_p=0.9).flip(0)
    assert torch.equal(together, alone) and torch.equal(together, reordered)
    other_step = _choose(logits, [(s, 3) for s, _ in seeds], temperature=1.0, top_p=0.9)
    assert not torch.equal(together, other_step)
