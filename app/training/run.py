"""A training session as one run in the store: created when the trainer first asks for
rollouts, `running` with a heartbeat while it trains, `completed`, `failed` or `cancelled` after.

The statuses and moves are storage.lifecycle's; the heartbeat thread is the batch job's. A
process that dies while training leaves its run reading `interrupted` (lifecycle tells it from
the pid, or from the heartbeat on another host), with every episode played so far in the store.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from app.batch import JobError
from app.batch import _Heartbeat as Heartbeat  # the batch job's beat, reused as it is
from rollout_core.datasets import Dataset
from rollout_core.records import PolicyInfo, RunSpec, RunStatus
from storage import lifecycle
from storage.store import Store
from storage.training import Counters, counters


def evaluation_name(name: str) -> str:
    """The run a training run's evaluation rollouts go to, unless named otherwise."""
    return f"{name}-eval"


def evaluation_spec(spec: RunSpec, name: str, dataset: Dataset, size: int) -> RunSpec:
    """The spec of run `name`, the evaluation of training run `spec` (as started, with the
    trainer's settings): its questions, its groups of `size`, the run it evaluates."""
    training = spec.training
    return replace(
        spec,
        name=name,
        dataset=dataset.name,
        questions_path=str(dataset.questions_path),
        db_dir=str(dataset.db_dir),
        limit=None,
        question_ids=None,
        samples=size,
        training=None if training is None else replace(training, num_generations=size),
        evaluation_of=spec.name,
    )


class TrainingRun:
    """The run a trainer's rollouts go to; `start` once, `finish` once."""

    def __init__(
        self, store: Store, name: str, *, resume: bool, evaluation: str | None = None
    ) -> None:
        self.store = store
        self.name = name
        self.resume = resume
        self.run_id: int | None = None
        self.evaluation = (
            None if evaluation is None else TrainingRun(store, evaluation, resume=resume)
        )
        """The run of the trainer's evaluation rollouts, apart so that the training curves
        count training alone; started at the first evaluation, ended with this one."""
        self._beat: Heartbeat | None = None
        self._ended = False

    def check_name(self) -> None:
        """Refuse, before any training starts, a name that is taken (or a run that cannot
        be continued), the evaluation's included."""
        self._check_own_name()
        if self.evaluation is None:
            return
        if self.evaluation.name == self.name:
            raise JobError(f"the evaluation run needs a name of its own, not {self.name!r}")
        try:
            self.evaluation._check_own_name()
        except JobError as exc:
            raise JobError(
                f"{exc} (the name the trainer's evaluation rollouts record under: "
                "eval_name=... gives another)"
            ) from None

    def _check_own_name(self) -> None:
        found = self.store.run_named(self.name)
        if found is None:
            return
        if not self.resume:
            # resume=True takes up a training run that did not finish, and nothing else.
            resumable = found.kind == "training" and found.status in lifecycle.RESUMABLE
            raise JobError(
                f"a run named {self.name!r} already exists in this store ({found.status}); "
                "choose another name"
                + (", or pass resume=True to continue it" if resumable else "")
            )
        if found.kind != "training":
            raise JobError(f"run {self.name!r} is a {found.kind} run, not a training run")
        refusal = lifecycle.resume_refusal(self.name, found.status)
        if refusal is not None:
            raise JobError(refusal)

    def start(
        self, spec: RunSpec, planned: int | None, info: PolicyInfo, *, at_step: int | None = None
    ) -> tuple[int, Counters]:
        """Create (or reopen) the run as `running` and start its heartbeat. `at_step`: the
        training step the trainer begins at; reopened, the run's episodes of that step and
        later are of a play the trainer is about to replace (resumed from a checkpoint, or
        started over) and are marked so."""
        found = self.store.run_named(self.name) if self.resume else None
        if found is None:
            run_id = self.store.create_run(spec, episodes_planned=planned, policy_info=info)
            numbering = Counters()
        else:
            run_id = found.id
            self.store.set_run_status(run_id, "running")
            self.store.set_policy_info(run_id, info)
            self.store.delete_unfinished_episodes(run_id)
            if at_step is not None:
                self.store.mark_replayed(run_id, at_step)
            numbering = counters(self.store, run_id)
        self.run_id = run_id
        self._beat = Heartbeat(self.store, run_id)
        self._beat.start()
        return run_id, numbering

    def finish(self, status: RunStatus, error: str | None = None) -> None:
        """Stop the heartbeat and set the final status (once; later calls do nothing), the
        evaluation's too."""
        if self.evaluation is not None:
            self.evaluation.finish(status, error)
        if self._ended or self.run_id is None:
            return
        self._ended = True
        if self._beat is not None:
            self._beat.stopped.set()
        self.store.set_run_status(self.run_id, status, error=error)

    def finish_raised(self, exc: BaseException) -> None:
        """End the run for an exception that stops training: Ctrl-C reads `cancelled`, any
        other `failed` with its error."""
        if isinstance(exc, KeyboardInterrupt):
            self.finish("cancelled", "interrupted by Ctrl-C")
        else:
            self.finish("failed", f"{type(exc).__name__}: {exc}".splitlines()[0])

    @contextmanager
    def recording(self) -> Iterator[None]:
        """Around `trainer.train()`: a crash reads `failed` with its error, Ctrl-C `cancelled`."""
        try:
            yield
        except BaseException as exc:
            self.finish_raised(exc)
            raise
        self.finish("completed")

    def callback(self, scored: Callable[[], None]) -> Any:
        """A transformers TrainerCallback that completes the run when training ends. `scored`
        (the writes the trainer's scores make possible) runs after each optimizer step and
        evaluation, once the trainer has scored the batches before them, and before the run
        completes."""
        from transformers import TrainerCallback

        run = self

        class _Follow(TrainerCallback):
            def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                scored()

            def on_evaluate(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                scored()

            def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                scored()
                with contextlib.suppress(lifecycle.RunStateError):
                    run.finish("completed")

        return _Follow()
