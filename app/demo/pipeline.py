"""`rollscope demo`: train tiny checkpoints offline and fill a store with their rollouts.

1. oracle trajectories on the demo benchmark's train split are the training conversations;
2. a byte-level BPE tokenizer and a ~1M-parameter Llama are trained on them, saving
   checkpoints at a few steps (untrained, early, late);
3. every checkpoint, the oracle and the random baseline play the held-out test split with a few
   samples per question into the store; the trained checkpoints also play the train split,
   greedily (`checkpoint-N-train`), where a tiny model's progress shows (checkpoint-500 answers
   about a quarter of those questions, checkpoint-100 none), so Compare has a difference to show;
4. the last checkpoint is trained with GRPO (TRL) on the training questions it solves some of
   the time (app.demo.grpo), so the Training page has a run that learns.

Each stage is skipped when its output already exists, so a second run takes seconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from app import batch
from app.demo.grpo import GrpoSettings, import_trl_log, run_name, train_demo_run, trl_log_name
from rollout_core.datasets import Dataset, load_named_dataset
from rollout_core.errors import RollscopeError
from rollout_core.policies.registry import make_policy
from rollout_core.records import ListSink, StepRecord
from rollout_core.runner import plan_episodes, run_episodes
from rollout_core.settings import EnvironmentSettings, GenerationSettings
from rollout_core.specs import RunRequest
from storage.read_models import RunSummary
from storage.store import Store

Log = Callable[[str], None]
# Checkpoints saved: untrained, early, late (the demo's timings: docs/benchmarks.md).
DEFAULT_SAVE_AT = (0, 100, 500)


@dataclass(frozen=True, slots=True)
class DemoSettings:
    """What `rollscope demo` builds; the defaults fit in a few minutes on 2 CPU cores."""

    work_dir: Path = Path("demo")
    steps: int = 500
    save_at: Sequence[int] = DEFAULT_SAVE_AT
    train_batch_size: int = 8
    lr: float = 3e-3
    hidden: int = 128
    layers: int = 4
    samples: int = 4
    temperature: float = 0.7
    step_budget: int = 6
    max_new_tokens: int = 48
    batch_size: int = 64
    threads: int | None = None
    seed: int = 0
    grpo: GrpoSettings | None = field(default_factory=GrpoSettings)
    """The short GRPO run of the last checkpoint (None: none)."""


@dataclass
class DemoReport:
    """What was built or reused, with timings."""

    checkpoints: list[Path] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)
    reused: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)


def oracle_conversations(dataset: Dataset) -> list[list[dict[str, str]]]:
    """The oracle's full chats on every question, once with a DESCRIBE and once without."""
    conversations = []
    for budget in (3, 2):
        sink = ListSink()
        tasks = plan_episodes(dataset.questions, samples=1, run_seed=0)
        run_episodes(dataset, tasks, make_policy("oracle"), sink, step_budget=budget)
        last: dict[tuple[str, int], StepRecord] = {}
        for step in sink.steps:
            last[step.question_id, step.sample_index] = step
        for step in last.values():
            conversations.append(
                [
                    *({"role": m["role"], "content": m["content"]} for m in step.prompt),
                    {"role": "assistant", "content": step.raw_output},
                ]
            )
    return conversations


def train_checkpoints(settings: DemoSettings, log: Log) -> list[Path]:
    """Train the tokenizer and model on the train split; returns the checkpoint directories."""
    from app.demo.tiny_model import build_model
    from app.demo.tokenizer import conversation_texts, train_tokenizer
    from app.demo.train import train_on_conversations

    ckpt_dir = settings.work_dir / "checkpoints"
    wanted = [ckpt_dir / f"checkpoint-{s}" for s in sorted(settings.save_at)]
    if all((p / "config.json").is_file() and any(p.glob("*.safetensors")) for p in wanted):
        log(f"reusing checkpoints in {ckpt_dir}")
        return wanted
    train = load_named_dataset("demo:train")
    conversations = oracle_conversations(train)
    log(f"training on {len(conversations)} oracle conversations from {len(train)} questions")
    tokenizer = train_tokenizer(conversation_texts(conversations), vocab_size=2048)
    model = build_model(
        tokenizer,
        hidden=settings.hidden,
        layers=settings.layers,
        heads=4,
        ffn=3 * settings.hidden,
        seed=settings.seed,
        max_positions=2048,
    )
    return train_on_conversations(
        model,
        tokenizer,
        conversations,
        steps=settings.steps,
        save_at=settings.save_at,
        out_dir=ckpt_dir,
        batch_size=settings.train_batch_size,
        lr=settings.lr,
        seed=settings.seed,
        threads=settings.threads,
        log=log,
    )


def _run_requests(checkpoints: list[Path], settings: DemoSettings) -> list[RunRequest]:
    environment = EnvironmentSettings(step_budget=settings.step_budget)

    def generation(temperature: float) -> GenerationSettings:
        return GenerationSettings(
            temperature=temperature,
            max_new_tokens=settings.max_new_tokens,
            seed=settings.seed,
            batch_size=settings.batch_size,
            threads=settings.threads,
        )

    def checkpoint_run(path: Path, dataset: str, name: str, *, greedy: bool) -> RunRequest:
        return RunRequest(
            policy=f"hf:{path.resolve()}",
            dataset=dataset,
            name=name,
            samples=1 if greedy else settings.samples,
            generation=generation(0.0 if greedy else settings.temperature),
            environment=environment,
        )

    runs = [checkpoint_run(path, "demo:test", path.name, greedy=False) for path in checkpoints]
    runs += [
        RunRequest(
            policy=name,
            dataset="demo:test",
            name=name,
            samples=n,
            generation=generation(0.0),
            environment=environment,
        )
        for name, n in (("oracle", 1), ("random", settings.samples))
    ]
    # Greedy on the questions it learned from; the untrained checkpoint is left out (on any
    # split it writes nothing parseable).
    runs += [
        checkpoint_run(path, "demo:train", f"{path.name}-train", greedy=True)
        for path in checkpoints[1:]
    ]
    return runs


def build_demo(store: Store, settings: DemoSettings, log: Log = print) -> DemoReport:
    """Build (or reuse) the demo checkpoints and rollouts in `store`."""
    report = DemoReport()
    t0 = time.perf_counter()
    report.checkpoints = train_checkpoints(settings, log)
    report.seconds["train"] = time.perf_counter() - t0
    requests = _run_requests(report.checkpoints, settings)
    for request in requests:  # all before any is played: a refusal leaves the store as it was
        found = store.find_run(str(request.name))
        if found is not None and (found.policy, found.dataset) != (request.policy, request.dataset):
            raise _not_the_demos(found)
    if settings.grpo is not None:
        _check_grpo_names(store, report.checkpoints[-1])
    for request in requests:
        name = str(request.name)
        existing = store.find_run(name)
        if existing is not None and existing.status == "completed":
            report.reused.append(name)
            continue
        if existing is not None:  # an earlier demo stopped half-way: play it again whole
            store.delete_run(existing.id)
        t1 = time.perf_counter()
        run_id, prepared = batch.start_run(store, request)
        stats = batch.play_run(store, run_id, prepared)
        report.runs.append(name)
        report.seconds[name] = time.perf_counter() - t1
        log(
            f"{name}: {stats.episodes} episodes, accuracy {stats.accuracy:.1%}, "
            f"{report.seconds[name]:.1f} s"
        )
    if settings.grpo is not None:
        _grpo_run(store, report, settings, settings.grpo, log)
    report.seconds["total"] = time.perf_counter() - t0
    return report


def _grpo_run(
    store: Store, report: DemoReport, settings: DemoSettings, grpo: GrpoSettings, log: Log
) -> None:
    """The trained checkpoint, trained on with GRPO for a few steps (TRL), recorded live, and
    TRL's own log of it imported beside it."""
    checkpoint = report.checkpoints[-1]
    name, log_name = run_name(checkpoint), trl_log_name(checkpoint)
    existing = store.find_run(name)
    if existing is not None and existing.status == "completed":
        report.reused.append(name)
    else:
        # Stopped half-way: trained again from the checkpoint, with a new log.
        for stale in (existing, store.find_run(log_name)):
            if stale is not None:
                store.delete_run(stale.id)
        t1 = time.perf_counter()
        trained = train_demo_run(
            store,
            checkpoint,
            settings.work_dir,
            grpo,
            log,
            threads=settings.threads,
            follow_log=log_name,
        )
        if trained is None:
            return
        report.runs.append(name)
        report.seconds[name] = time.perf_counter() - t1
        followed = store.find_run(log_name)
        if followed is not None and followed.status == "completed":
            report.runs.append(log_name)
            return
    imported = store.find_run(log_name)
    if imported is not None and imported.status == "completed":
        report.reused.append(log_name)
        return
    t1 = time.perf_counter()
    if import_trl_log(store, settings.work_dir, log_name, log):
        report.runs.append(log_name)
        report.seconds[log_name] = time.perf_counter() - t1


def _check_grpo_names(store: Store, checkpoint: Path) -> None:
    """DemoClash where the GRPO run's names (the training run and TRL's log of it) are taken
    by runs the demo did not make."""
    for name, kind in ((run_name(checkpoint), "training"), (trl_log_name(checkpoint), "import")):
        found = store.find_run(name)
        if found is not None and (found.kind, found.dataset) != (kind, "demo:train"):
            raise _not_the_demos(found)


class DemoClash(RollscopeError):
    """The store holds a run of a name the demo uses that the demo did not make."""


def _not_the_demos(run: RunSummary) -> DemoClash:
    """The refusal to reuse or replace a run of the demo's names that is someone else's."""
    return DemoClash(
        f"the store already holds a run named {run.name!r} that the demo did not make "
        f"({run.kind}, policy {run.policy}, dataset {run.dataset or 'none'}); the demo neither "
        "reuses nor replaces it: build the demo in a store of its own (--store demo.db)"
    )
