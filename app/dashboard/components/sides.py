"""What Compare and the Question map set side by side: whole runs, or one training step of a
run.

An evaluation a trainer ran every few steps on the same questions (verl's validation files,
SkyRL's evaluations, rLLM's and prime-rl's eval steps) imports as one run whose episodes
carry their step: its checkpoints are its steps. In a link a step reads `run=5@200`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from app.dashboard import data
from app.dashboard.components.params import Codec
from storage.read_models import RunKey, RunStep, RunSummary, run_of, side_label

MOST_COMPARED = 20
"""Runs (or steps) Compare sets side by side at most: as many as keep their colours apart,
and columns that still read."""
MOST_MAPPED = 50
"""Runs (or steps) the Question map takes at most: a map wider than this reads as noise."""


def steps_of(runs: Sequence[RunSummary]) -> dict[int, list[int]]:
    """Each training run's (or import's) training steps with a finished episode."""
    return {r.id: data.finished_steps(r.id) for r in runs if r.is_training}


def options(runs: Sequence[RunSummary], steps: Mapping[int, Sequence[int]]) -> list[RunKey]:
    """Every run, then each training step of the runs that have them (the runs' list first,
    so a run is found without scrolling past thousands of steps)."""
    keys: list[RunKey] = [r.id for r in runs]
    keys.extend(RunStep(r.id, s) for r in runs for s in steps.get(r.id, ()))
    return keys


def parse_key(text: str) -> RunKey | None:
    """`5` or `5@200` as a key; None for anything else."""
    run, at, step = text.partition("@")
    if not run.isdecimal() or (at and not step.removeprefix("-").isdecimal()):
        return None
    return RunStep(int(run), int(step)) if at else int(run)


def codec(
    name: str, known: Collection[RunKey], runs: Collection[int], most: int
) -> Codec[list[RunKey]]:
    """The repeated side parameter (`run=3&run=5@200`, or `run=3,5@200`); sides not in
    `known`, repeated, or past the first `most` are noted and dropped."""

    def parse(values: list[str]) -> tuple[list[RunKey], list[str]]:
        out: list[RunKey] = []
        problems: list[str] = []
        for v in (x.strip() for value in values for x in value.split(",") if x.strip()):
            key = parse_key(v)
            if key is None:
                problems.append(
                    f"{name}={v!r} in the link is not a run id (or a run and a training step, "
                    f"as in {name}=5@200); ignored."
                )
            elif key not in known:
                problems.append(_unknown(key, runs))
            elif key in out:
                problems.append(f"{name}={v} comes more than once in the link; read once.")
            else:
                out.append(key)
        if len(out) > most:
            problems.append(
                f"The link names {len(out)} runs and training steps; the first {most} are shown."
            )
        return out[:most], problems

    return Codec(parse, lambda value: [str(k) for k in value])


def _unknown(key: RunKey, runs: Collection[int]) -> str:
    if isinstance(key, RunStep) and key.run_id in runs:
        return (
            f"Run {key.run_id} has no finished episode at training step {key.train_step}; ignored."
        )
    return f"No run with id {run_of(key)} in this store; ignored."


def name_of(key: RunKey, by_id: Mapping[int, RunSummary]) -> str:
    """A side as the run picker lists it."""
    if isinstance(key, RunStep):
        return f"{by_id[key.run_id].name} (#{key.run_id}) @ step {key.train_step}"
    return f"{by_id[key].name} (#{key})"


def one_training_run(keys: Sequence[RunKey], by_id: Mapping[int, RunSummary]) -> RunSummary | None:
    """The run, when every side is one of its training steps: a chart then names the run once
    and each side by its step alone."""
    runs = {run_of(k) for k in keys}
    if len(runs) != 1 or not all(isinstance(k, RunStep) for k in keys):
        return None
    return by_id[runs.pop()]


def label_of(key: RunKey, by_id: Mapping[int, RunSummary]) -> str:
    """A side's name in a chart or a table: the run's name, and its step for a step."""
    step = key.train_step if isinstance(key, RunStep) else None
    return side_label(by_id[run_of(key)].name, step)
