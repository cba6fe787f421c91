"""Batched runner vs the original one-episode-at-a-time loop: same model, questions, tokens.

Run with `make bench` (or `pytest tests/benchmarks/bench_runner.py -s --benchmarks`).
Environment knobs: BENCH_EPISODES (121, the whole demo benchmark), BENCH_BATCH (32),
BENCH_BUDGET (4), BENCH_NEW_TOKENS (24), BENCH_THREADS (2), BENCH_HIDDEN/BENCH_LAYERS/
BENCH_HEADS/BENCH_KV_HEADS/BENCH_FFN for the model size, BENCH_DEVICE (auto), BENCH_REPEATS (3:
batched runs, the median is reported).

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


def test_batched_vs_sequential(tmp_path: Path) -> None:
    from app.demo.tiny_model import build_model, save_checkpoint
    from app.demo.tokenizer import train_tokenizer
    from rollout_core.prompts import get_system_prompt

    threads = _env_int("BENCH_THREADS", 2)
    torch.set_num_threads(threads)
    episodes, batch = _env_int("BENCH_EPISODES", 121), _env_int("BENCH_BATCH", 32)
    budget, new_tokens = _env_int("BENCH_BUDGET", 4), _env_int("BENCH_NEW_TOKENS", 24)
    ds = load_named_dataset("demo")
    questions = list(ds.questions[:episodes])
    episodes = len(questions)  # the demo benchmark has 121 questions
    texts = [
        get_system_prompt(),
        *(q.question for q in ds.questions),
        *(q.gold_sql for q in ds.questions),
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
    ckpt = save_checkpoint(model, tokenizer, tmp_path / "ckpt")
    device = os.environ.get("BENCH_DEVICE", "auto")
    params = sum(p.numel() for p in model.parameters())
    settings = GenerationSettings(max_new_tokens=new_tokens, device=device)

    seq_policy = HFPolicy(ckpt, settings, shared_prefix=False)
    _sequential(ds, seq_policy, questions[:2], budget)  # warm-up
    seq_policy.generate_seconds = 0.0
    t0 = time.perf_counter()
    seq_out = _sequential(ds, seq_policy, questions, budget)
    seq_wall = time.perf_counter() - t0

    warm = HFPolicy(ckpt, settings)
    warm_tasks = plan_episodes(questions[:batch], samples=1, run_seed=0)
    run_episodes(ds, warm_tasks, warm, ListSink(), batch_size=batch, step_budget=1)
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
        f"identical outputs {same}/{len(bat_out)} steps"
    )
    assert stats.episodes == episodes
    assert len(seq_out) == len(bat_out)


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
