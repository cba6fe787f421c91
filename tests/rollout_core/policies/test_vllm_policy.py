"""The `vllm:` policy: vLLM's outputs as Completions, its refusals without a GPU, and (on a GPU
machine with vLLM installed) a real `LLM.chat` batch.

vLLM cannot be installed in the CPU test environment, so its output objects are stood in for
by the few fields the policy reads (`RequestOutput`, `CompletionOutput`, `Logprob`).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from rollout_core.errors import RollscopeError
from rollout_core.policies.base import PolicyError, PolicyRequest
from rollout_core.policies.registry import make_policy
from rollout_core.policies.vllm import completion_from_output
from rollout_core.records import EpisodeKey, Question
from rollout_core.settings import GenerationSettings
from rollout_core.specs import RunRequest, build_spec


def _gpu_with_vllm() -> str | None:
    """Why the GPU tests cannot run here, or None when they can."""
    if importlib.util.find_spec("vllm") is None:
        return "needs vLLM (pip install 'rollscope[vllm]' on a GPU machine); not installed here"
    import torch

    if not torch.cuda.is_available():
        return "needs a CUDA GPU; none is visible"
    return None


NO_GPU = _gpu_with_vllm()


@dataclass
class Logprob:
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class CompletionOutput:
    text: str
    token_ids: list[int]
    logprobs: list[dict[int, Logprob]] | None
    finish_reason: str | None = "stop"
    index: int = 0


@dataclass
class RequestOutput:
    outputs: list[CompletionOutput]
    prompt_token_ids: list[int] | None = field(default_factory=lambda: list(range(30)))
    num_cached_tokens: int | None = 16


def output(text: str, tokens: list[tuple[int, str, float]], **kw: object) -> RequestOutput:
    positions = [{i: Logprob(lp, 1, piece)} for i, piece, lp in tokens]
    first = CompletionOutput(text, [i for i, _, _ in tokens], positions, **kw)  # type: ignore[arg-type]
    return RequestOutput([first])


def test_output_becomes_a_completion_with_counts_cache_and_trace() -> None:
    out = output(
        "ANSWER 5",
        [(7, "ANSWER", -0.25), (8, " 5", -1.5), (2, "</s>", -0.01)],
    )
    c = completion_from_output(out)
    assert c.text == "ANSWER 5" and not c.truncated
    assert (c.tokens_in, c.tokens_out, c.cached_tokens) == (30, 3, 16)
    assert c.tokens is not None
    assert c.tokens.text == ("ANSWER", " 5", "")  # the end token the text leaves out
    assert c.tokens.logprobs == (-0.25, -1.5, -0.01) and c.tokens.ids == (7, 8, 2)
    assert c.tokens.entropies is None


def test_a_reply_cut_by_max_tokens_is_truncated() -> None:
    c = completion_from_output(
        output("QUERY SEL", [(5, "QUERY", -0.1), (6, " SEL", -0.2)], finish_reason="length")
    )
    assert c.truncated and c.tokens is not None and c.tokens.text == ("QUERY", " SEL")


def test_pieces_that_do_not_join_or_missing_logprobs_give_no_trace() -> None:
    # A character split over byte-level tokens comes back as replacement characters.
    bad = completion_from_output(output("é", [(5, "\ufffd", -0.1), (6, "\ufffd", -0.2)]))
    assert bad.text == "é" and bad.tokens is None and bad.tokens_out == 2
    out = output("A", [(5, "A", -0.1)])
    out.outputs[0].logprobs = None
    assert completion_from_output(out).tokens is None


def test_without_a_gpu_the_policy_refuses_in_one_line(tiny_checkpoint: Path) -> None:
    if NO_GPU is None:
        pytest.skip("a GPU is visible here: the refusal cannot be seen")
    with pytest.raises(PolicyError, match="needs a CUDA GPU") as err:
        make_policy(f"vllm:{tiny_checkpoint}", GenerationSettings())
    assert "\n" not in str(err.value)


def test_a_cpu_device_is_refused_before_vllm_is_imported(tiny_checkpoint: Path) -> None:
    with pytest.raises(PolicyError, match="runs on the CUDA GPU"):
        make_policy(f"vllm:{tiny_checkpoint}", GenerationSettings(device="cpu"))


def test_spec_checks_a_local_checkpoint_and_keeps_a_model_id(tiny_checkpoint: Path) -> None:
    local = build_spec(RunRequest(policy=f"vllm:{tiny_checkpoint}", dataset="demo", limit=1))
    assert local.spec.policy == f"vllm:{tiny_checkpoint}"
    assert local.spec.checkpoint == str(tiny_checkpoint)
    hub = build_spec(RunRequest(policy="vllm:Qwen/Qwen2.5-0.5B-Instruct", dataset="demo", limit=1))
    assert hub.spec.checkpoint == "Qwen/Qwen2.5-0.5B-Instruct"
    half_saved = tiny_checkpoint.parent / "no-weights"
    half_saved.mkdir(exist_ok=True)
    (half_saved / "config.json").write_text("{}")
    with pytest.raises(RollscopeError, match="no weights"):
        build_spec(RunRequest(policy=f"vllm:{half_saved}", dataset="demo", limit=1))


# -- on a GPU with vLLM ---------------------------------------------------------------------


@pytest.mark.skipif(NO_GPU is not None, reason=f"vLLM policy on a GPU: {NO_GPU}")
def test_vllm_plays_a_batch_with_traces_cache_and_seeds(tmp_path: Path) -> None:
    from app.demo.tiny_model import make_random_checkpoint
    from rollout_core.policies.vllm import VLLMPolicy
    from rollout_core.prompts import get_system_prompt

    texts = [get_system_prompt(), "DESCRIBE singer", "QUERY SELECT COUNT(*) FROM singer"] * 20
    # Heads of 64 dimensions: the attention kernels' smallest common size.
    ckpt = make_random_checkpoint(
        tmp_path / "ckpt", texts, vocab_size=512, hidden=256, layers=2, heads=4, ffn=512
    )
    settings = GenerationSettings(temperature=1.0, max_new_tokens=8, seed=3)
    policy = VLLMPolicy(str(ckpt), settings, gpu_memory_utilization=0.3)
    question = Question("q", "db", "How many singers?", "SELECT 1")
    system = {"role": "system", "content": get_system_prompt()}

    def ask(seed: int, step: int, turns: list[dict[str, str]]) -> PolicyRequest:
        return PolicyRequest(
            [system, *turns], question, Path("x"), step, seed, episode=EpisodeKey("q", seed)
        )

    first = policy.generate([ask(s, 1, [{"role": "user", "content": "Go."}]) for s in range(4)])
    again = policy.generate([ask(s, 1, [{"role": "user", "content": "Go."}]) for s in range(4)])
    assert [c.text for c in first] == [c.text for c in again]  # per-request seeds
    for c in first:
        assert c.tokens_out is not None and 1 <= c.tokens_out <= 8
        assert c.truncated == (c.tokens_out == 8)
        if c.tokens is not None:
            assert "".join(c.tokens.text) == c.text and c.tokens.logprobs is not None
            assert all(lp <= 0 for lp in c.tokens.logprobs)
    follow = [
        ask(s, 2, [{"role": "user", "content": "Go."}, {"role": "assistant", "content": c.text},
                   {"role": "user", "content": "Next."}])
        for s, c in enumerate(first)
    ]  # fmt: skip
    second = policy.generate(follow)
    assert all((c.cached_tokens or 0) > 0 for c in second)  # the system prompt, from the cache
    info = policy.describe()
    assert info.name == "vllm" and info.model_class == "LlamaForCausalLM"
