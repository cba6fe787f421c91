"""The demo's training run: a short GRPO run (TRL, CPU) of the trained demo checkpoint on the
train-split questions it solves some of the time, its rollouts recorded by app.trl, so the
Training page has a run whose reward and accuracy rise. TRL logs the same rollouts itself
(`log_completions`), and the demo imports that log as a run of its own while it trains
(`following_log`, as `rollscope import --follow` does): the one training seen by rollscope's
recording and by the trainer's files, side by side. The log's run begins first, so the
recording, which holds more (token confidence), is the newer run the pages open on."""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from app.demo.solvable import Solved, probe, sometimes_solved
from rollout_core.datasets import load_named_dataset
from rollout_core.settings import EnvironmentSettings, GenerationSettings
from storage.store import Store

if TYPE_CHECKING:
    from app.importers.importer import Importer

Log = Callable[[str], None]
Reward = Literal["correct", "shaped"]
PROBE_BATCH_SIZE = 64


@dataclass(frozen=True, slots=True)
class GrpoSettings:
    """The demo's GRPO run, sized for `make run`'s 5 minutes on 2 CPU cores."""

    steps: int = 48
    questions: int = 8
    """Train-split questions trained on: those the checkpoint solves closest to half the time
    in a probe before training, so a group can hold right and wrong episodes (on a question
    it never solves every group is all wrong and teaches nothing)."""
    prompts_per_step: int = 8
    """Groups a step plays; equal to `questions`, every step plays every question, so the
    curves move with what the model learns rather than with which questions a step drew."""
    num_generations: int = 4
    """Episodes per prompt: the GRPO group."""
    probe_samples: int = 4
    """Episodes per train-split question in the probe that picks the `questions`."""
    learning_rate: float = 3e-4
    """At 1e-3 the policy collapses within a few steps: it stops answering right at all."""
    temperature: float = 0.7
    """The batch runs' sampling temperature: at 1.0 checkpoint-500 answers almost nothing, and
    groups with no right answer give no learning signal."""
    reward: Reward = "correct"
    """`correct` (`app.trl.correct_reward`): a group's advantages come from right vs wrong
    alone; `shaped` adds the environment's shaping terms, whose small penalties spread
    groups where every episode is wrong."""
    step_budget: int = 4
    """Fewer actions than the batch runs: the conversation stays well inside the model's
    2048-token context (240 + 4 x (48 + 256 + 10) tokens at most)."""
    max_new_tokens: int = 48
    seed: int = 0


def run_name(checkpoint: Path) -> str:
    """The training run's name in the store: `grpo-<checkpoint directory>`."""
    return f"grpo-{checkpoint.name}"


def trl_log_name(checkpoint: Path) -> str:
    """The name of the run imported from TRL's log of the training run."""
    return f"{run_name(checkpoint)}-trl-log"


def trl_log_dir(work_dir: Path) -> Path:
    """The trainer's output_dir, where TRL logs its completions."""
    return work_dir / "grpo"


@contextlib.contextmanager
def following_log(store: Store, work_dir: Path, name: str, log: Log) -> Iterator[None]:
    """Import TRL's log as run `name` while the body trains: its run begins now, a follow
    (`app.importers.follow`) on a thread takes each step's file as TRL finishes it, and the
    files it had not taken yet are read when the body ends. A failed follow leaves its run
    `failed`, which `import_trl_log` reads on from."""
    from app.importers.follow import follow

    root = trl_log_dir(work_dir)
    root.mkdir(parents=True, exist_ok=True)
    importer = _log_import(store, root, name)
    failures: list[BaseException] = []
    # Trained: the follow ends after its look, never inside a file (the importer's own stop
    # would end it there, as a stopped training does).
    trained = threading.Event()

    def follow_until_trained() -> None:
        try:
            follow(importer, on_file=lambda _: None, on_note=log, stop=trained)
        except BaseException as exc:  # told by the main thread, which ends the run
            failures.append(exc)

    thread = threading.Thread(target=follow_until_trained, name="trl-log-follow", daemon=True)
    thread.start()
    try:
        yield
    except BaseException as exc:
        trained.set()
        importer.stop.set()
        thread.join()
        if isinstance(exc, KeyboardInterrupt):
            importer.finish("cancelled", "interrupted by Ctrl-C, with the training")
        else:
            importer.finish("failed", "the training failed")
        raise
    trained.set()
    thread.join()
    if failures:
        why = (str(failures[0]).splitlines() or [type(failures[0]).__name__])[0]
        importer.finish("failed", why)
        log(f"{name}: following TRL's log failed ({why}); it is read again after training")
        return
    _import_the_rest(importer)  # what the follow had not taken: the last step's file, settling
    found = store.find_run(name)
    episodes = found.episodes_finished if found is not None else 0
    log(f"{name}: {episodes} episodes imported from TRL's log as it trained")


def import_trl_log(store: Store, work_dir: Path, name: str, log: Log) -> bool:
    """Import TRL's log of the training run as run `name` (what it has not imported yet),
    matched to the demo's train split; False when there is no log to import."""
    root = trl_log_dir(work_dir)
    if not (root / "completions").is_dir():
        return False
    importer = _log_import(store, root, name)
    t0 = time.perf_counter()
    episodes = _import_the_rest(importer)
    log(f"{name}: {episodes} episodes imported from TRL's log, {time.perf_counter() - t0:.1f} s")
    return True


def _log_import(store: Store, root: Path, name: str) -> Importer:
    """The import of TRL's log in `root` as run `name`, opened (made, or reopened to read on)."""
    from app.importers.detect import format_of
    from app.importers.importer import Importer, ImportOptions

    # The questions file lines the episodes up with the demo's own runs (Compare, the
    # Question map) and grades their answers against the gold SQL.
    options = ImportOptions(path=root, name=name, questions="demo:train")
    importer = Importer(store, format_of(root, "trl"), options)
    importer.open()
    return importer


def _import_the_rest(importer: Importer) -> int:
    """Read what the log holds that the run does not yet, and complete the run; the episodes
    read (the run is left failed, and the error raised, where reading fails)."""
    try:
        episodes = sum(r.episodes for r in importer.import_files(importer.files()))
    except BaseException as exc:
        importer.finish("failed", str(exc))
        raise
    importer.finish("completed")
    return episodes


def train_demo_run(
    store: Store,
    checkpoint: Path,
    work_dir: Path,
    settings: GrpoSettings,
    log: Log,
    *,
    question_ids: list[str] | None = None,
    threads: int | None = None,
    follow_log: str | None = None,
) -> str | None:
    """Train `checkpoint` with GRPO for a few steps into run `grpo-<checkpoint>` on
    `question_ids` (by default those `pick_questions` finds), importing TRL's log as run
    `follow_log` while it trains where one is named; returns the run's name, or None when TRL
    is not installed (`pip install 'rollscope[trl]'`)."""
    try:
        from trl.trainer.grpo_config import GRPOConfig
        from trl.trainer.grpo_trainer import GRPOTrainer
    except ImportError:
        log("no training run: TRL is not installed (pip install 'rollscope[trl]')")
        return None
    # Imported here, not at the top: they import torch, and the CLI imports this module.
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.trainer_callback import PrinterCallback

    from app.demo.train import torch_threads
    from app.trl import (
        checkpointing_off,
        correct_reward,
        make_rollout_func,
        shaped_reward,
        training_dataset,
    )
    from rollout_core.policies.hf.quiet import quiet_progress

    name = run_name(checkpoint)
    if question_ids is None:
        question_ids = pick_questions(checkpoint, settings, threads, log)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    rollout = make_rollout_func(
        dataset="demo:train",
        store=store,
        name=name,
        question_ids=question_ids,
        step_budget=settings.step_budget,
        max_new_tokens=settings.max_new_tokens,
        batch_size=settings.prompts_per_step * settings.num_generations,
        seed=settings.seed,
        threads=threads,
    )
    # A training stopped half-way left its log: this run's log starts anew (the trainer
    # makes the folder again).
    shutil.rmtree(trl_log_dir(work_dir) / "completions", ignore_errors=True)
    args = GRPOConfig(
        output_dir=str(trl_log_dir(work_dir)),
        per_device_train_batch_size=settings.prompts_per_step * settings.num_generations,
        num_generations=settings.num_generations,
        max_steps=settings.steps,
        learning_rate=settings.learning_rate,
        temperature=settings.temperature,
        beta=0.0,
        use_cpu=True,
        bf16=False,  # fp32 on CPU: the recorded log-probs are the ones the trainer scores
        **checkpointing_off(GRPOConfig),
        report_to=[],
        log_completions=True,  # completions/completions_NNNNN.parquet, which the demo imports
        logging_steps=1,
        save_strategy="no",
        disable_tqdm=True,
        seed=settings.seed,
    )
    # TRL's hints take prompts as strings and rewards as list[float | None]; the prompts here
    # are chat messages and the rewards floats, which it handles the same.
    reward_funcs: list[Any] = [shaped_reward if settings.reward == "shaped" else correct_reward]
    with quiet_progress():
        model = AutoModelForCausalLM.from_pretrained(checkpoint, local_files_only=True)
        tokenizer = AutoTokenizer.from_pretrained(checkpoint, local_files_only=True)
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=reward_funcs,
        args=args,
        train_dataset=training_dataset(
            "demo:train", question_ids=question_ids, step_budget=settings.step_budget
        ),
        rollout_func=cast(Any, rollout),
    )
    # The demo says what it trained in one line; the trainer's own would print each step's
    # metrics (with its progress bar off), which the Training page shows from the store.
    trainer.remove_callback(PrinterCallback)
    t0 = time.perf_counter()
    # TRL prints a table of the logged completions at every step; the demo imports them.
    following = (
        following_log(store, work_dir, follow_log, log)
        if follow_log is not None
        else contextlib.nullcontext()
    )
    with (
        following,
        torch_threads(threads),
        rollout.recording(),
        warnings.catch_warnings(),
        open(os.devnull, "w") as quiet,
        contextlib.redirect_stdout(quiet),
    ):
        # TRL reads the model's deprecated `is_gradient_checkpointing` every step: its
        # warning, not ours.
        warnings.filterwarnings(
            "ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning
        )
        trainer.train()
    log(f"{name}: {settings.steps} GRPO steps, {time.perf_counter() - t0:.1f} s")
    return name


def pick_questions(
    checkpoint: Path, settings: GrpoSettings, threads: int | None, log: Log
) -> list[str]:
    """The `settings.questions` train-split questions `checkpoint` solves closest to half the
    time in `probe_questions`."""
    t0 = time.perf_counter()
    found = probe_questions(checkpoint, settings, threads)
    picked = sometimes_solved(found, settings.questions)
    mixed = sum(0 < q.correct < q.episodes for q in found)
    log(
        f"{run_name(checkpoint)}: {checkpoint.name} solves {mixed} of {len(found)} training "
        f"questions some of the time ({settings.probe_samples} tries each at temperature "
        f"{settings.temperature:g}); trains on {min(mixed, len(picked))} of them"
        + (f" and {len(picked) - mixed} it always or never solves" if mixed < len(picked) else "")
        + f", {time.perf_counter() - t0:.1f} s"
    )
    return picked


def probe_questions(checkpoint: Path, settings: GrpoSettings, threads: int | None) -> list[Solved]:
    """Every train-split question played `probe_samples` times by `checkpoint`, sampled and
    budgeted as the training run plays it."""
    return probe(
        checkpoint,
        load_named_dataset("demo:train"),
        samples=settings.probe_samples,
        generation=GenerationSettings(
            temperature=settings.temperature,
            max_new_tokens=settings.max_new_tokens,
            seed=settings.seed,
            batch_size=PROBE_BATCH_SIZE,
            threads=threads,
        ),
        environment=EnvironmentSettings(step_budget=settings.step_budget),
    )
