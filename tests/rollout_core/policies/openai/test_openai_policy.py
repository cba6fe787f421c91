"""The `openai:` policy against a real server (`transformers serve` on CPU), through a fault
proxy for retries and timeouts, and its reply conversion on vLLM-shaped replies."""

from __future__ import annotations

import asyncio
import concurrent.futures
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from openai.types.chat import ChatCompletion

from rollout_core.errors import SpecError
from rollout_core.policies.base import PolicyError, PolicyRequest
from rollout_core.policies.openai.policy import OpenAIPolicy
from rollout_core.policies.openai.replies import completion_from_reply
from rollout_core.policies.openai.retry import Backoff, GaveUp, call_with_retries
from rollout_core.policies.registry import make_policy
from rollout_core.policies.token_text import fit_pieces, pieces_from_bytes
from rollout_core.records import EpisodeKey, Question, RunSpec
from rollout_core.settings import EndpointSettings, GenerationSettings
from tests.support.serving import FaultProxy, ServedModel

FAST = Backoff(base_seconds=0.05, cap_seconds=0.2)
"""Short waits between attempts: the tests count attempts, they do not time them."""
QUESTION = Question("q1", "concert_singer", "How many singers are there?", "SELECT 1")


def requests(n: int, step_no: int = 1) -> list[PolicyRequest]:
    return [
        PolicyRequest(
            messages=[
                {"role": "system", "content": "Answer with one action."},
                {"role": "user", "content": f"Question {i}: how many singers are there?"},
            ],
            question=QUESTION,
            db_path=Path("unused.sqlite"),
            step_no=step_no,
            seed=1000 + i,
            episode=EpisodeKey("q1", i),
        )
        for i in range(n)
    ]


def policy(
    url: str, model: str, *, new_tokens: int = 6, backoff: Backoff = FAST, **endpoint: Any
) -> OpenAIPolicy:
    settings = GenerationSettings(
        max_new_tokens=new_tokens, endpoint=EndpointSettings(model=model, **endpoint)
    )
    return OpenAIPolicy(url, settings.endpoint, settings, backoff=backoff)  # type: ignore[arg-type]


@pytest.fixture()
def proxy(openai_server: ServedModel) -> Iterator[FaultProxy]:
    fault = FaultProxy(openai_server.port).start()
    yield fault
    fault.close()


# -- against the real server ---------------------------------------------------------------


def test_generates_with_counts_and_truncation_from_the_server(openai_server: ServedModel) -> None:
    p = make_policy(
        f"openai:{openai_server.base_url}",
        GenerationSettings(max_new_tokens=6, endpoint=EndpointSettings(openai_server.model)),
    )
    assert isinstance(p, OpenAIPolicy)
    try:
        out = p.generate(requests(5))
    finally:
        p.close()
    assert len(out) == 5
    for c in out:
        assert c.tokens_in is not None and c.tokens_in > 10  # the rendered chat, from `usage`
        assert c.tokens_out is not None and 1 <= c.tokens_out <= 6
        # transformers serve says "length" exactly when the reply used all its tokens.
        assert c.truncated == (c.tokens_out == 6)
        assert c.tokens is None  # it sends no log-probabilities
    info = p.describe()
    assert info.name == "openai" and info.extra["served_model"] == openai_server.model
    # It rejects vLLM's `return_token_ids` (HTTP 422): the policy stopped sending it.
    assert "token_ids" not in info.extra["features"] and "seed" in info.extra["features"]


def test_seeded_sampling_repeats_and_depends_on_the_seed(openai_server: ServedModel) -> None:
    def sample(seed_offset: int) -> list[str]:
        settings = GenerationSettings(
            max_new_tokens=8,
            temperature=1.0,
            endpoint=EndpointSettings(openai_server.model, concurrency=1),
        )
        p = OpenAIPolicy(openai_server.base_url, settings.endpoint, settings)  # type: ignore[arg-type]
        try:
            reqs = [
                PolicyRequest(r.messages, r.question, r.db_path, 1, r.seed + seed_offset)
                for r in requests(3)
            ]
            return [c.text for c in p.generate(reqs)]
        finally:
            p.close()

    # One request at a time: transformers serve seeds its global generator per request.
    first, again, other = sample(0), sample(0), sample(7)
    assert first == again
    assert first != other


def test_unknown_model_is_refused_with_the_served_ones(openai_server: ServedModel) -> None:
    with pytest.raises(PolicyError, match=r"does not serve model 'nope'.*checkpoint"):
        policy(openai_server.base_url, "nope")


def test_missing_api_key_variable_is_named(openai_server: ServedModel) -> None:
    with pytest.raises(PolicyError, match="ROLLSCOPE_NO_SUCH_KEY"):
        policy(openai_server.base_url, openai_server.model, api_key_env="ROLLSCOPE_NO_SUCH_KEY")


def test_no_server_fails_in_one_line_after_the_deadline() -> None:
    from tests.support.ports import free_port

    url = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(PolicyError, match="did not answer: connection failed") as err:
        policy(url, "m", retry_seconds=0.5)
    assert "\n" not in str(err.value)


def test_at_most_concurrency_requests_in_flight(
    openai_server: ServedModel, proxy: FaultProxy
) -> None:
    p = policy(proxy.base_url, openai_server.model, concurrency=2)
    try:
        out = p.generate(requests(6))
    finally:
        p.close()
    assert len(out) == 6 and p.requests == 6
    assert proxy.max_open <= 2  # one connection per request in flight, reused after


def test_dropped_connections_are_retried(openai_server: ServedModel, proxy: FaultProxy) -> None:
    direct = policy(openai_server.base_url, openai_server.model)
    p = policy(proxy.base_url, openai_server.model, concurrency=4)
    try:
        expected = [c.text for c in direct.generate(requests(4))]
        proxy.arm("drop", 3)
        out = p.generate(requests(4))
    finally:
        direct.close()
        p.close()
    assert proxy.faults == 3 and p.retries >= 1
    assert [c.text for c in out] == expected  # greedy: the same replies once through


@pytest.mark.parametrize("status", ["429 Too Many Requests", "503 Service Unavailable"])
def test_rate_limits_and_server_errors_are_retried(
    openai_server: ServedModel, proxy: FaultProxy, status: str
) -> None:
    p = policy(proxy.base_url, openai_server.model, concurrency=1)
    try:
        proxy.arm("status", 2, status_line=status, retry_after="0")
        out = p.generate(requests(1))
    finally:
        p.close()
    assert proxy.faults == 2 and p.retries == 2 and out[0].tokens_out


def test_a_bad_request_is_not_retried(openai_server: ServedModel, proxy: FaultProxy) -> None:
    p = policy(proxy.base_url, openai_server.model, concurrency=1)
    try:
        proxy.arm("status", 1, status_line="400 Bad Request")
        with pytest.raises(PolicyError, match="refused the request: HTTP 400 proxy says 400"):
            p.generate(requests(1))
    finally:
        p.close()
    assert p.retries == 0


def test_a_slow_reply_times_out_and_is_retried(
    openai_server: ServedModel, proxy: FaultProxy
) -> None:
    p = policy(proxy.base_url, openai_server.model, concurrency=1, timeout_seconds=1.0)
    try:
        proxy.arm("delay", 1, delay_seconds=30.0)
        out = p.generate(requests(1))
    finally:
        p.close()
    assert p.retries == 1 and out[0].tokens_out


def test_a_server_that_stays_slow_fails_the_batch_in_one_line(
    openai_server: ServedModel, proxy: FaultProxy
) -> None:
    p = policy(
        proxy.base_url, openai_server.model, concurrency=4, timeout_seconds=0.5, retry_seconds=1.5
    )
    try:
        proxy.arm("delay", 1000, delay_seconds=30.0)
        with pytest.raises(PolicyError, match="did not answer: timed out") as err:
            p.generate(requests(4))
    finally:
        p.close()
    assert "--resume" in str(err.value) and "\n" not in str(err.value)


# -- replies as vLLM sends them (no vLLM server on a CPU machine: its JSON, parsed by the
#    real `openai` types) ---------------------------------------------------------------------


def vllm_reply(
    content: str, tokens: list[tuple[str, float]], *, finish: str = "stop", **extra: Any
) -> ChatCompletion:
    entries = [
        {"token": t, "logprob": lp, "bytes": list(t.encode()), "top_logprobs": []}
        for t, lp in tokens
    ]
    payload = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "Qwen/Qwen2.5-0.5B-Instruct",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "logprobs": {"content": entries},
                "finish_reason": finish,
                **extra,
            }
        ],
        "usage": {
            "prompt_tokens": 40,
            "completion_tokens": len(tokens),
            "total_tokens": 40 + len(tokens),
            "prompt_tokens_details": {"cached_tokens": 32},
        },
    }
    return ChatCompletion.model_validate(payload)


def test_vllm_reply_becomes_a_trace_with_ids_and_an_empty_end_token() -> None:
    reply = vllm_reply(
        "QUERY SELECT 1",
        [("QUERY", -0.1), (" SELECT", -0.5), (" 1", -1.25), ("<|im_end|>", -0.01)],
        token_ids=[11, 22, 33, 2],
    )
    c = completion_from_reply(reply)
    assert c.text == "QUERY SELECT 1" and not c.truncated
    assert (c.tokens_in, c.tokens_out, c.cached_tokens) == (40, 4, 32)
    assert c.tokens is not None
    assert c.tokens.text == ("QUERY", " SELECT", " 1", "")
    assert c.tokens.logprobs == (-0.1, -0.5, -1.25, -0.01)
    assert c.tokens.ids == (11, 22, 33, 2) and c.tokens.entropies is None


def test_a_character_split_over_tokens_goes_to_the_token_that_completes_it() -> None:
    reply = vllm_reply("é!", [("x", -0.1), ("y", -0.2)], finish="length")
    # "é" is two bytes; the server's token strings are placeholders, their bytes are exact.
    raw = reply.model_dump()
    raw["choices"][0]["logprobs"]["content"][0]["bytes"] = [0xC3]
    raw["choices"][0]["logprobs"]["content"][1]["bytes"] = [0xA9, ord("!")]
    c = completion_from_reply(ChatCompletion.model_validate(raw))
    assert c.truncated and c.tokens is not None and c.tokens.text == ("", "é!")


def test_tokens_that_do_not_join_to_the_text_give_no_trace() -> None:
    c = completion_from_reply(vllm_reply("ANSWER 5", [("ANSWER", -0.1), (" 6", -0.2)]))
    assert c.text == "ANSWER 5" and c.tokens is None and c.tokens_out == 2


def test_top_logprobs_are_kept_per_token() -> None:
    raw = vllm_reply("A", [("A", -0.2)]).model_dump()
    raw["choices"][0]["logprobs"]["content"][0]["top_logprobs"] = [
        {"token": "A", "logprob": -0.2, "bytes": [65]},
        {"token": "B", "logprob": -1.9, "bytes": [66]},
    ]
    c = completion_from_reply(ChatCompletion.model_validate(raw))
    assert c.tokens is not None and c.tokens.top == ((("A", -0.2), ("B", -1.9)),)


# -- pieces and retries, alone --------------------------------------------------------------


@given(st.lists(st.text(max_size=4), max_size=12))
def test_pieces_that_join_are_kept_and_any_fit_joins_to_the_text(pieces: list[str]) -> None:
    text = "".join(pieces)
    assert fit_pieces(pieces, text) == tuple(pieces)
    for target in (text.strip(), text[: len(text) // 2]):
        fitted = fit_pieces(pieces, target)
        if fitted is not None:
            assert "".join(fitted) == target and len(fitted) == len(pieces)


@given(st.text(max_size=20), st.integers(min_value=1, max_value=4))
def test_pieces_from_bytes_join_to_the_utf8_text(text: str, width: int) -> None:
    data = text.encode()
    chunks = [list(data[i : i + width]) for i in range(0, len(data), width)]
    assert "".join(pieces_from_bytes(chunks)) == text


def test_backoff_doubles_up_to_its_cap_with_jitter() -> None:
    backoff, rng = Backoff(base_seconds=1.0, cap_seconds=8.0), random.Random(0)
    for attempt, step in [(0, 1.0), (1, 2.0), (2, 4.0), (3, 8.0), (10, 8.0)]:
        delays = [backoff.delay(attempt, rng) for _ in range(50)]
        assert all(step / 2 <= d <= step for d in delays)
        assert len(set(delays)) > 1  # jittered


def _in_own_loop(coro: Any) -> Any:
    """Run a coroutine on a fresh loop in its own thread, as the policy does (another test in
    the session may have left an event loop running in this one)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def test_retries_stop_at_the_deadline_and_final_errors_pass_through() -> None:
    calls = []

    async def flaky() -> str:
        calls.append(1)
        raise ConnectionError("down")

    async def run(classify: Any) -> str:
        return await call_with_retries(
            flaky,
            timeout_seconds=1.0,
            deadline_seconds=0.3,
            classify=classify,
            backoff=Backoff(base_seconds=0.05, cap_seconds=0.05),
            rng=random.Random(0),
        )

    with pytest.raises(GaveUp) as gave_up:
        _in_own_loop(run(lambda exc: 0.0))
    assert gave_up.value.attempts == len(calls) >= 2
    calls.clear()
    with pytest.raises(ConnectionError):
        _in_own_loop(run(lambda exc: None))
    assert len(calls) == 1


# -- settings in the run spec ---------------------------------------------------------------


def test_endpoint_settings_round_trip_through_the_stored_spec() -> None:
    from rollout_core.specs import RunRequest, build_spec

    endpoint = EndpointSettings("m", api_key_env="VLLM_API_KEY", concurrency=8, retry_seconds=9)
    plan = build_spec(
        RunRequest(
            policy="openai:http://127.0.0.1:8000/v1/",
            dataset="demo",
            limit=1,
            generation=GenerationSettings(endpoint=endpoint),
        )
    )
    stored = plan.spec.to_stored()
    assert stored["generation"]["endpoint"]["api_key_env"] == "VLLM_API_KEY"
    assert RunSpec.from_stored(stored) == plan.spec
    older = {
        **stored,
        "generation": {k: v for k, v in stored["generation"].items() if k != "endpoint"},
    }
    assert RunSpec.from_stored(older).generation.endpoint is None  # specs stored before it
    bad = {
        **stored,
        "generation": {**stored["generation"], "endpoint": {"model": "m", "concurrency": 0}},
    }
    with pytest.raises(SpecError, match="concurrency must be between 1 and 1024"):
        RunSpec.from_stored(bad)


def test_importing_the_policies_imports_no_client_or_engine() -> None:
    code = (
        "import sys, rollout_core.specs, rollout_core.policies.registry, "
        "rollout_core.policies.openai, rollout_core.policies.vllm, app.dashboard.launch.form\n"
        "print(sorted(m for m in ('openai', 'vllm', 'torch', 'httpx2') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
