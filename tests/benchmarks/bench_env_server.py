"""Steps per second through `rollscope env-server`: 32 clients at once over the WebSocket
route, playing the oracle's actions, every step recorded; beside the same episodes played in
process by the runner, and the cost of the network hop per step.

Run on request: `pytest tests/benchmarks/bench_env_server.py --benchmarks -s`.
Target: at least 1,000 steps/s over the WebSocket route. The server is a process of its own;
the clients share one event loop in this one. On a shared machine wall time is noisy: each
figure is printed with the load average, and with the steps per CPU-second the server and the
clients used, which the load moves less.
"""

from __future__ import annotations

import asyncio
import os
import re
import resource
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

pytest.importorskip("openenv")

from openenv.core.generic_client import GenericEnvClient

from rollout_core.datasets import load_named_dataset
from rollout_core.policies.scripted import OraclePolicy
from rollout_core.records import ListSink, RunSpec
from rollout_core.runner import plan_episodes, run_episodes
from rollout_core.settings import EnvironmentSettings
from storage.store import Store
from tests.benchmarks.bench_sink import machine_reference

pytestmark = [pytest.mark.benchmark, pytest.mark.timeout(1800)]

CLIENTS = 32
EPISODES = int(os.environ.get("ROLLSCOPE_BENCH_ENV_EPISODES", "1200"))
SEQUENTIAL_STEPS = 300
TARGET = 1_000
REPO = Path(__file__).resolve().parents[2]


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def cpu_self() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def cpu_of(pid: int) -> float:
    """CPU seconds (user + system) a process and its children (workers) have used so far."""
    stat = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    ticks = int(stat[11]) + int(stat[12]) + int(stat[13]) + int(stat[14])
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return ticks / os.sysconf("SC_CLK_TCK") + sum(cpu_of(int(c)) for c in children)


def oracle_scripts() -> dict[str, list[str]]:
    """Each demo question's oracle outputs, as the runner's oracle writes them."""
    dataset = load_named_dataset("demo")
    sink = ListSink()
    tasks = plan_episodes(dataset.questions, 1, 0)
    run_episodes(dataset, tasks, OraclePolicy(), sink, batch_size=32)
    scripts: dict[str, list[str]] = defaultdict(list)
    for step in sink.steps:
        scripts[step.question_id].append(step.raw_output)
    return dict(scripts)


def in_process(store_url: str, episodes: int, batch: int) -> tuple[int, float, float]:
    """The runner playing the oracle into the store, one transaction per iteration."""
    dataset = load_named_dataset("demo")
    store = Store(store_url)
    spec = RunSpec(
        name=f"in-process-{batch}",
        policy="oracle",
        dataset="demo",
        questions_path=str(dataset.questions_path),
        db_dir=str(dataset.db_dir),
        environment=EnvironmentSettings(),
    )
    run_id = store.create_run(spec, episodes_planned=episodes)
    samples = -(-episodes // len(dataset.questions))
    tasks = plan_episodes(dataset.questions, samples, 0)[:episodes]
    cpu, t0 = cpu_self(), time.perf_counter()
    stats = run_episodes(dataset, tasks, OraclePolicy(), store.sink(run_id), batch_size=batch)
    wall, cpu = time.perf_counter() - t0, cpu_self() - cpu
    store.close()
    return stats.steps, wall, cpu


async def play_clients(url: str, scripts: dict[str, list[str]], episodes: int) -> int:
    questions = sorted(scripts)
    plan = [questions[i % len(questions)] for i in range(episodes)]
    shares = [plan[i::CLIENTS] for i in range(CLIENTS)]

    async def client(share: list[str]) -> int:
        steps = 0
        async with GenericEnvClient(base_url=url) as env:
            for qid in share:
                await env.reset(question_id=qid)
                for text in scripts[qid]:
                    result = await env.step({"raw_output": text})
                    steps += 1
                assert result.done
        return steps

    return sum(await asyncio.gather(*(client(s) for s in shares)))


async def sequential_steps(url: str, scripts: dict[str, list[str]], n: int) -> float:
    """Mean seconds per step of one client alone."""
    qid = sorted(scripts)[0]
    done, t0 = 0, time.perf_counter()
    async with GenericEnvClient(base_url=url) as env:
        while done < n:
            await env.reset(question_id=qid)
            for text in scripts[qid]:
                await env.step({"raw_output": text})
                done += 1
    return (time.perf_counter() - t0) / done


def start_server(
    store: str, log: Path, workers: int = 1, name: str = "bench"
) -> tuple[subprocess.Popen[bytes], str]:
    out = log.open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "env-server", "--name", name, "--dataset", "demo",
         "--store", store, "--port", "0", "--max-sessions", str(CLIENTS + 4),
         "--workers", str(workers)],
        stdout=out, stderr=subprocess.STDOUT, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        found = re.search(r"at (http://127\.0\.0\.1:\d+)", log.read_text())
        if found:
            return proc, found.group(1)
        assert proc.poll() is None, log.read_text()
        time.sleep(0.1)
    raise AssertionError(log.read_text())


def test_env_server_steps_per_second(tmp_path: Path) -> None:
    scripts = oracle_scripts()
    store = f"sqlite:///{tmp_path / 'bench.db'}"
    print(
        f"\n{CLIENTS} clients, {EPISODES} oracle episodes of the demo, SQLite store; "
        f"machine reference {machine_reference():,.0f} rows/s"
    )

    steps, wall, cpu = in_process(store, EPISODES, CLIENTS)
    print(
        f"in process (runner, batch {CLIENTS}): {steps / wall:,.0f} steps/s, "
        f"{steps / cpu:,.0f} steps per CPU-second [load {load()}]"
    )
    steps1, wall1, _ = in_process(store, 200, 1)
    inproc_step = wall1 / steps1

    for workers in (1, 2):
        route(store, scripts, workers, tmp_path / f"server-{workers}.log", inproc_step)


def route(
    store: str, scripts: dict[str, list[str]], workers: int, log: Path, inproc: float
) -> None:
    """The clients over the WebSocket route, then (one worker) one client alone."""
    name = f"bench-{workers}"
    proc, url = start_server(store, log, workers, name)
    try:
        cpu, server_cpu, t0 = cpu_self(), cpu_of(proc.pid), time.perf_counter()
        played = asyncio.run(play_clients(url, scripts, EPISODES))
        wall, client_cpu = time.perf_counter() - t0, cpu_self() - cpu
        server_cpu = cpu_of(proc.pid) - server_cpu
        served_load = load()
        per_step = asyncio.run(sequential_steps(url, scripts, SEQUENTIAL_STEPS))
        seq_load = load()
    finally:
        proc.send_signal(signal.SIGINT)
        status = proc.wait(60)
    rate = played / wall
    print(
        f"over the WebSocket route, {workers} worker{'s' if workers > 1 else ''}: "
        f"{rate:,.0f} steps/s (target {TARGET:,}), "
        f"{played / server_cpu:,.0f} steps per server CPU-second, "
        f"{played / (server_cpu + client_cpu):,.0f} per CPU-second of server and clients "
        f"[load {served_load}]"
    )
    print(
        f"one client alone: {per_step * 1e3:.2f} ms a step over the route, "
        f"{inproc * 1e3:.2f} ms in process: the hop costs {(per_step - inproc) * 1e3:.2f}"
        f" ms a step [load {seq_load}]"
    )
    check = Store(store, read_only=True)
    run = check.find_run(name)
    assert run is not None and run.episodes_finished > EPISODES, "every episode is recorded"
    check.close()
    assert status == 0
