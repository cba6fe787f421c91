"""Batched runner vs the original one-episode-at-a-time loop: same model, questions, tokens.

Run with `make bench` (or `pytest tests/benchmarks/bench_runner.py -s --benchmarks`).
Environment knobs: BENCH_EPISODES (121, the whole demo benchmark), BENCH_BATCH (32),
BENCH_BUDGET (4), BENCH_NEW_TOKENS (24), BENCH_THREADS (2), BENCH_HIDDEN/BENCH_LAYERS/
BENCH_HEADS/BENCH_KV_HEADS/BENCH_FFN for the model size, BENCH_DEVICE (auto), BENCH_REPEATS (3:
batched runs, the median is reported).

BENCH_POLICY picks what is measured against the sequential loop:
- `hf` (default): the batched transformers policy;
- `vllm`: the batched transformers policy and the in-process vLLM policy (a CUDA GPU with
  `rollscope[vllm]` installed; BENCH_VLLM_MEMORY, 0.5, is the GPU memory share vLLM may take);
- `openai`: the OpenAI-compatible server policy at each concurrency of BENCH_CONCURRENCY
  (`1,8,32`), against `transformers serve` started on the benchmark's checkpoint
  (BENCH_SERVE_ARGS adds flags, e.g. `--continuous-batching`), or against a server already
  running at BENCH_OPENAI_URL serving BENCH_OPENAI_MODEL (e.g. `vllm serve`). Each concurrency
  is also played with episodes advancing as their replies arrive (no lockstep), to show what
  the runner's lockstep costs. BENCH_EPISODES defaults to 48 here; BENCH_REQUEST_TIMEOUT (600)
  is the per-request timeout.

A random-init model of about 0.5B parameters shaped like released small models (grouped-query
attention), for a GPU: BENCH_HIDDEN=896 BENCH_LAYERS=32 BENCH_HEADS=14 BENCH_KV_HEADS=2
BENCH_FFN=4864 BENCH_DEVICE=cuda (0.48B parameters with the benchmark's 1,024-token vocabulary).

Both sides run a short warm-up first (kernels, allocator, tokenizer caches), so the figures
compare steady states. The sequential loop uses the model's stock `sdpa` attention.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from rollout_core.datasets import Dataset, load_named_dataset
from rollout_core.environment import SQLEnvironment
from rollout_core.parse import parse_model_output
from rollout_core.policies.hf.policy import HFPolicy
from rollout_core.prompts import format_observation, initial_messages
from rollout_core.records import ListSink
from rollout_core.runner import plan_episodes, run_episodes
from rollout_core.settings import GenerationSettings


def _env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def _sequential(ds: Dataset, policy: HFPolicy, questions: list[Any], budget: int) -> list[str]:
    """The seed's loop: one episode at a time, one `generate` per step, batch of one."""
    env = SQLEnvironment(dataset=ds, step_budget=budget)
    tok, model = policy.tokenizer, policy.model
    outputs: list[str] = []
    for q in questions:
        obs = env.reset(question_id=q.id)
        messages = initial_messages(obs, budget)
        while not obs.done:
            prompt = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            enc = tok([prompt], return_tensors="pt", add_special_tokens=False).to(policy.device)
            t0 = time.perf_counter()
            with torch.inference_mode():
                out = model.generate(
                    **enc,
                    max_new_tokens=policy.max_new_tokens,
                    do_sample=False,
                    pad_token_id=tok.pad_token_id,
                )
            policy.generate_seconds += time.perf_counter() - t0
            ids = out[0, enc["input_ids"].shape[1] :].tolist()
            if tok.eos_token_id in ids:
                ids = ids[: ids.index(tok.eos_token_id) + 1]
            text = tok.decode(ids, skip_special_tokens=True).strip()
            outputs.append(text)
            obs = env.step(parse_model_output(text))
            messages += [
                {"role": "assistant", "content": text},
                {"role": "user", "content": format_observation(obs)},
            ]
    return outputs


def _policy_kind() -> str:
    kind = os.environ.get("BENCH_POLICY", "hf").strip().lower()
    if kind not in ("hf", "vllm", "openai"):
        raise ValueError(f"BENCH_POLICY must be hf, vllm or openai, got {kind!r}")
    return kind


def _bench_checkpoint(tmp_path: Path, questions: list[Any]) -> tuple[Path, int]:
    """A random-init checkpoint sized by the BENCH_* knobs; returns it and its parameters."""
    from app.demo.tiny_model import build_model, save_checkpoint
    from app.demo.tokenizer import train_tokenizer
    from rollout_core.prompts import get_system_prompt

    texts = [
        get_system_prompt(),
        *(q.question for q in questions),
        *(q.gold_sql for q in questions),
    ]
    tokenizer = train_tokenizer(texts, vocab_size=1024)
    model = build_model(
        tokenizer,
        hidden=_env_int("BENCH_HIDDEN", 128),
        layers=_env_int("BENCH_LAYERS", 4),
        heads=_env_int("BENCH_HEADS", 4),
        ffn=_env_int("BENCH_FFN", 384),
        kv_heads=_env_int("BENCH_KV_HEADS", 0) or None,
    )
    params = sum(p.numel() for p in model.parameters())
    return save_checkpoint(model, tokenizer, tmp_path / "ckpt"), params


@pytest.mark.timeout(3600)
def test_batched_vs_sequential(tmp_path: Path) -> None:
    kind = _policy_kind()
    if kind == "openai":
        pytest.skip("BENCH_POLICY=openai measures the server policy (test_openai_concurrency)")
    threads = _env_int("BENCH_THREADS", 2)
    torch.set_num_threads(threads)
    episodes, batch = _env_int("BENCH_EPISODES", 121), _env_int("BENCH_BATCH", 32)
    budget, new_tokens = _env_int("BENCH_BUDGET", 4), _env_int("BENCH_NEW_TOKENS", 24)
    ds = load_named_dataset("demo")
    questions = list(ds.questions[:episodes])
    episodes = len(questions)  # the demo benchmark has 121 questions
    ckpt, params = _bench_checkpoint(tmp_path, list(ds.questions))
    device = os.environ.get("BENCH_DEVICE", "auto")
    settings = GenerationSettings(max_new_tokens=new_tokens, device=device)

    seq_policy = HFPolicy(ckpt, settings, shared_prefix=False)
    _sequential(ds, seq_policy, questions[:2], budget)  # warm-up
    seq_policy.generate_seconds = 0.0
    t0 = time.perf_counter()
    seq_out = _sequential(ds, seq_policy, questions, budget)
    seq_wall = time.perf_counter() - t0
    del seq_policy

    warm = HFPolicy(ckpt, settings)
    warm_tasks = plan_episodes(questions[:batch], samples=1, run_seed=0)
    run_episodes(ds, warm_tasks, warm, ListSink(), batch_size=batch, step_budget=1)
    del warm
    runs = []
    for _ in range(_env_int("BENCH_REPEATS", 3)):
        bat_policy = HFPolicy(ckpt, settings)
        sink = ListSink()
        tasks = plan_episodes(questions, samples=1, run_seed=0)
        t0 = time.perf_counter()
        stats = run_episodes(ds, tasks, bat_policy, sink, batch_size=batch, step_budget=budget)
        runs.append((time.perf_counter() - t0, bat_policy, sink, stats))
    runs.sort(key=lambda r: r[0])
    bat_wall, bat_policy, sink, stats = runs[len(runs) // 2]
    bat_out = [s.raw_output for s in sorted(sink.steps, key=lambda s: (s.question_id, s.step_no))]
    seq_sorted = _sort_like(seq_out, questions, sink)

    same = sum(a == b for a, b in zip(seq_sorted, bat_out, strict=False))
    seq_eps, bat_eps = episodes / seq_wall, stats.episodes / bat_wall
    overhead = 1 - bat_policy.generate_seconds / bat_wall
    prefix_share = bat_policy.prefix_seconds / bat_wall
    # Where the time outside generate goes: the policy's own work around it, the environment's
    # steps, and the rest of the runner (resets, parsing, records, the sink).
    in_policy = (stats.policy_seconds - bat_policy.generate_seconds) / bat_wall - prefix_share
    in_env = sum(s.env_seconds for s in sink.steps) / bat_wall
    in_runner = 1 - stats.policy_seconds / bat_wall - in_env
    reused = bat_policy.reused_tokens / max(1, sum(s.tokens_in or 0 for s in sink.steps))
    print(
        f"\nmodel {params / 1e6:.2f}M params on {bat_policy.device}, {threads} threads; "
        f"{episodes} episodes x budget {budget}, {new_tokens} new tokens, batch {batch}\n"
        f"  sequential: {seq_wall:7.2f} s  {seq_eps:7.2f} episodes/s  "
        f"({len(seq_out)} generate calls)\n"
        f"  batched:    {bat_wall:7.2f} s  {bat_eps:7.2f} episodes/s  "
        f"({stats.policy_calls} generate calls; median of "
        f"{', '.join(f'{r[0]:.2f}' for r in runs)} s)\n"
        f"  speed-up {bat_eps / seq_eps:.1f}x; batched wall time outside generate "
        f"{overhead:.1%} (of which computing shared prefixes {prefix_share:.1%}); "
        f"prompt tokens reused from the cache {reused:.0%}; "
        f"shared prefix held once in {bat_policy.shared_prefix_calls}/{stats.policy_calls} calls; "
        f"identical outputs {same}/{len(bat_out)} steps\n"
        f"  outside generate: policy {in_policy:.1%} (prompts, cache assembly, token traces), "
        f"shared prefixes {prefix_share:.1%}, environment steps {in_env:.1%}, "
        f"rest of the runner {in_runner:.1%} (resets, parsing, records, sink)"
    )
    assert stats.episodes == episodes
    assert len(seq_out) == len(bat_out)
    if kind == "vllm":
        del runs, bat_policy
        _vllm_row(ds, questions, ckpt, seq_sorted, seq_eps, batch, budget, new_tokens, bat_eps)


def _vllm_row(
    ds: Dataset,
    questions: list[Any],
    ckpt: Path,
    seq_sorted: list[str],
    seq_eps: float,
    batch: int,
    budget: int,
    new_tokens: int,
    hf_eps: float,
) -> None:
    """The vLLM policy on the same episodes; prints its row beside the two above."""
    import gc

    from rollout_core.policies.vllm import VLLMPolicy
    from rollout_core.settings import GenerationSettings

    gc.collect()
    torch.cuda.empty_cache()  # give the transformers models back before vLLM sizes its cache
    settings = GenerationSettings(max_new_tokens=new_tokens, dtype="bf16")
    memory = float(os.environ.get("BENCH_VLLM_MEMORY", "0.5"))
    policy = VLLMPolicy(str(ckpt), settings, gpu_memory_utilization=memory)
    warm_tasks = plan_episodes(questions[:batch], samples=1, run_seed=0)
    run_episodes(ds, warm_tasks, policy, ListSink(), batch_size=batch, step_budget=1)
    runs = []
    for _ in range(_env_int("BENCH_REPEATS", 3)):
        sink = ListSink()
        tasks = plan_episodes(questions, samples=1, run_seed=0)
        t0 = time.perf_counter()
        stats = run_episodes(ds, tasks, policy, sink, batch_size=batch, step_budget=budget)
        runs.append((time.perf_counter() - t0, sink, stats))
    runs.sort(key=lambda r: r[0])
    wall, sink, stats = runs[len(runs) // 2]
    out = [
        s.raw_output.strip() for s in sorted(sink.steps, key=lambda s: (s.question_id, s.step_no))
    ]
    same = sum(a == b for a, b in zip(seq_sorted, out, strict=False))
    prompt = sum(s.tokens_in or 0 for s in sink.steps)
    cached = sum(s.cached_tokens or 0 for s in sink.steps)
    traced = sum(s.tokens is not None for s in sink.steps)
    eps = stats.episodes / wall
    print(
        f"  vllm:       {wall:7.2f} s  {eps:7.2f} episodes/s  ({stats.policy_calls} LLM.chat "
        f"calls; median of {', '.join(f'{r[0]:.2f}' for r in runs)} s)\n"
        f"  vllm speed-up {eps / seq_eps:.1f}x over sequential, {eps / hf_eps:.1f}x over batched "
        f"transformers; prompt tokens from vLLM's prefix cache {cached / max(1, prompt):.0%}; "
        f"steps with a token trace {traced}/{len(sink.steps)}; outputs identical to the "
        f"sequential loop's {same}/{len(out)} steps (bf16 kernels differ; not expected equal)"
    )
    assert stats.episodes == len(questions)


@pytest.mark.timeout(3600)
def test_openai_concurrency(tmp_path: Path) -> None:
    """The `openai:` policy at each concurrency, in lockstep and with episodes advancing as
    their replies arrive; prints one row per concurrency."""
    if _policy_kind() != "openai":
        pytest.skip("set BENCH_POLICY=openai to measure the server policy")
    from rollout_core.policies.openai.policy import OpenAIPolicy
    from rollout_core.settings import EndpointSettings, GenerationSettings
    from tests.support.ports import free_port
    from tests.support.serving import ServedModel

    episodes = _env_int("BENCH_EPISODES", 48)
    budget, new_tokens = _env_int("BENCH_BUDGET", 4), _env_int("BENCH_NEW_TOKENS", 24)
    levels = [int(c) for c in os.environ.get("BENCH_CONCURRENCY", "1,8,32").split(",")]
    # A continuous-batching server's first request sets up its cache: minutes on a small CPU.
    timeout = float(os.environ.get("BENCH_REQUEST_TIMEOUT", "600"))
    ds = load_named_dataset("demo")
    questions = list(ds.questions[:episodes])
    server = None
    url, model = os.environ.get("BENCH_OPENAI_URL"), os.environ.get("BENCH_OPENAI_MODEL")
    if not url:
        ckpt, params = _bench_checkpoint(tmp_path, list(ds.questions))
        server = ServedModel(
            ckpt,
            free_port(),
            tmp_path / "serve.log",
            os.environ.get("BENCH_SERVE_ARGS", "").split(),
        )
        server.start()
        url, model = server.base_url, server.model
        flags = " ".join(server.extra_args) or "(no flags)"
        where = f"transformers serve {flags} on a {params / 1e6:.2f}M model, CPU"
    else:
        where = f"{url} serving {model}"
    assert model, "give BENCH_OPENAI_MODEL with BENCH_OPENAI_URL"
    rows = []
    try:
        for concurrency in levels:
            settings = GenerationSettings(
                max_new_tokens=new_tokens,
                batch_size=concurrency,
                endpoint=EndpointSettings(model, concurrency=concurrency, timeout_seconds=timeout),
            )
            assert settings.endpoint is not None
            policy = OpenAIPolicy(url, settings.endpoint, settings)
            try:
                tasks = plan_episodes(questions, samples=1, run_seed=0)
                run_episodes(
                    ds,
                    tasks[:concurrency],
                    policy,
                    ListSink(),
                    batch_size=concurrency,
                    step_budget=1,
                )  # warm-up
                policy.request_seconds = policy.generate_seconds = 0.0
                t0 = time.perf_counter()
                sink = ListSink()
                stats = run_episodes(
                    ds, tasks, policy, sink, batch_size=concurrency, step_budget=budget
                )
                lock_wall = time.perf_counter() - t0
                in_flight = policy.request_seconds / lock_wall
                t0 = time.perf_counter()
                steps = _pipelined(policy, ds, tasks, budget, concurrency)
                free_wall = time.perf_counter() - t0
            finally:
                policy.close()
            rows.append(
                (concurrency, stats.episodes / lock_wall, len(sink.steps) / lock_wall, in_flight,
                 episodes / free_wall, steps / free_wall)
            )  # fmt: skip
    finally:
        if server is not None:
            server.stop()
    print(
        f"\nopenai policy against {where}; {episodes} episodes x budget {budget}, "
        f"{new_tokens} new tokens, greedy\n"
        "  concurrency  lockstep ep/s  steps/s  mean in flight   as-they-arrive ep/s  steps/s"
    )
    for c, l_eps, l_sps, flight, f_eps, f_sps in rows:
        print(
            f"  {c:11d}  {l_eps:13.2f}  {l_sps:7.2f}  {flight:14.1f}   {f_eps:19.2f}  {f_sps:7.2f}"
        )


def _pipelined(policy: Any, ds: Dataset, tasks: list[Any], budget: int, concurrency: int) -> int:
    """Play `tasks` with each episode advancing as soon as its reply arrives (no lockstep):
    `concurrency` episodes live at once on the policy's event loop. Returns the steps taken."""
    import asyncio

    from rollout_core.policies.base import PolicyRequest

    queue = list(reversed(tasks))
    steps = 0

    async def play(task: Any) -> None:
        nonlocal steps
        env = SQLEnvironment(dataset=ds, step_budget=budget)
        try:
            obs = env.reset(seed=task.seed, question_id=task.question.id)
            messages = initial_messages(obs, budget)
            while not obs.done:
                request = PolicyRequest(
                    list(messages), task.question, ds.db_path(task.question.db_id),
                    obs.step + 1, task.seed, tuple(env.tables), budget - obs.step, task.key,
                )  # fmt: skip
                reply = await policy._one(request)  # the policy's own per-request coroutine
                obs = env.step(parse_model_output(reply.text))
                steps += 1
                messages += [
                    {"role": "assistant", "content": reply.text},
                    {"role": "user", "content": format_observation(obs)},
                ]
        finally:
            env.close()

    async def worker() -> None:
        while queue:
            await play(queue.pop())

    async def main() -> None:
        await asyncio.gather(*(worker() for _ in range(concurrency)))

    policy._loop.run(main())
    return steps


def _sort_like(seq_out: list[str], questions: list[Any], sink: ListSink) -> list[str]:
    """Sequential outputs keyed like the batched ones: by (question id, step)."""
    steps_per_q: dict[str, int] = {}
    for s in sink.steps:
        steps_per_q[s.question_id] = max(steps_per_q.get(s.question_id, 0), s.step_no)
    keyed: list[tuple[str, int, str]] = []
    i = 0
    for q in questions:
        for step in range(1, steps_per_q.get(q.id, 0) + 1):
            if i < len(seq_out):
                keyed.append((q.id, step, seq_out[i]))
            i += 1
    return [text for _, _, text in sorted(keyed)]
