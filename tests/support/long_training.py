"""A real store holding a training run of more groups than a page could read one by one:
`LONG_STEPS` steps, three groups each (over 2,000 with a spread), written through the store's
sink."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from rollout_core.records import IterationBatch, Outcome
from storage.store import Store
from tests.support.records import finish, spec, start, step

LONG_STEPS = 1100


@dataclass(frozen=True)
class LongTraining:
    url: str
    run_id: int


def build_long_training(root: Path) -> LongTraining:
    """Each step draws three questions of two samples: q-mixed one right of two (correctness),
    q-shaped two wrong apart by a penalty (shaping only), q-learnt two wrong before the
    halfway step and two right from it (all rewards equal)."""
    url = str(root / "store.db")
    store = Store(url)
    run_id = store.create_run(spec("grpo-long", kind="training"), episodes_planned=6 * LONG_STEPS)
    rewards = {"q-mixed": (1.0, 0.0), "q-shaped": (0.0, -0.01)}
    starts, steps, ends = [], [], []
    for n in range(LONG_STEPS):
        learnt = (1.0, 1.0) if n >= LONG_STEPS // 2 else (0.0, 0.0)
        for g, (q, pair) in enumerate([("q-learnt", learnt), *rewards.items()]):
            for k, reward in enumerate(pair):
                sample = 2 * n + k
                at = {"train_step": n, "group_index": 3 * n + g}
                starts.append(dataclasses.replace(start(q, sample), **at))  # type: ignore[arg-type]
                steps.append(step(q, sample, 1, action="ANSWER", done=True))
                outcome: Outcome = "correct" if reward >= 1.0 else "wrong"
                ends.append(finish(q, sample, outcome, reward, 1))
    sink = store.sink(run_id)
    # Two batches, not one per episode: a transaction each.
    sink.write(IterationBatch(started=starts))
    sink.write(IterationBatch(steps=steps, finished=ends))
    store.set_run_status(run_id, "completed")
    store.close()
    return LongTraining(url, run_id)
