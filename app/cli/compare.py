"""`rollscope compare`: runs (or training steps of a run) against a baseline on the questions
they share, in the terminal or as JSON for a script that picks a checkpoint.

The figures are the dashboard's Compare's (`app.dashboard.compare.stats`, pure functions):
accuracy is the mean success rate per question over the questions both played, the difference
has a paired bootstrap interval over those questions, and a run solves a question when half
or more of its samples are right.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table
from rich.text import Text

from app.cli.output import fail, out
from app.cli.stores import DEFAULT_STORE, StoreOpt, open_reader
from app.pictured import picture_controls
from app.render import fmt_pct
from storage.read_models import IdApart, QuestionOutcomes, RunKey, RunStep, RunSummary
from storage.store import Store

if TYPE_CHECKING:  # imported where used: numpy would load with every command
    from app.dashboard.compare.stats import Pairing

LISTED = 10
"""Question ids printed per list in the terminal (JSON lists them all)."""


@dataclass(frozen=True, slots=True)
class Side:
    """A run, or one training step of it, as the command line named it."""

    key: RunKey
    run: RunSummary

    @property
    def label(self) -> str:
        step = f" @ step {self.key.train_step}" if isinstance(self.key, RunStep) else ""
        return f"{self.run.name} (#{self.run.id}){step}"

    def as_json(self) -> dict[str, object]:
        step = self.key.train_step if isinstance(self.key, RunStep) else None
        return {"run": self.run.name, "id": self.run.id, "train_step": step}


@dataclass(frozen=True, slots=True)
class Compared:
    """A run against the baseline: the dashboard's pairing, and the questions one solves and
    the other does not (both played them)."""

    side: Side
    pairing: Pairing
    solved_by_run: list[str]
    solved_by_base: list[str]
    apart: list[IdApart]
    """The ids the two share that ask different questions in each: left out of the pairing."""


def compare(
    baseline: Annotated[
        str, typer.Argument(help="The run the others are set against: a name, an id, or RUN@STEP.")
    ],
    runs: Annotated[
        list[str],
        typer.Argument(help="Runs to set against it: names, ids, or RUN@STEP (a training step)."),
    ],
    store: StoreOpt = DEFAULT_STORE,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Compare runs with a baseline on the questions each shares with it.

    For each run: the questions both played, each one's accuracy on them (a question counts
    once, however many samples it has), the difference with its 95% paired bootstrap interval,
    and the questions one solves and the other does not. A training step of a run, as
    `grpo-run@200` or `7@200`, compares that step's episodes alone: an evaluation run every
    few steps compares checkpoint with checkpoint.
    """
    from app.dashboard.compare import stats

    st = open_reader(store)
    sides = [_side(st, ref) for ref in (baseline, *runs)]
    seen: set[RunKey] = set()
    for side in sides:
        if side.key in seen:
            fail(f"{side.label} is named twice; name each run once")
        seen.add(side.key)
    base = sides[0]
    outcomes, ids_apart = st.compare_outcomes_apart([s.key for s in sides])
    results = []
    for side in sides[1:]:
        apart = stats.apart_between(ids_apart, side.key, base.key)
        # An id that asks another question in each run is not a question both played.
        paired = stats.leave_apart(outcomes, apart)
        pairing = stats.pairing(paired, base.key, side.key)
        if pairing.interval is None:
            why = (
                _apart_line(apart, side, base)
                if apart
                else "compare runs played on the same questions (by id, or by the question's text)"
            )
            fail(f"{side.label} and the baseline {base.label} share no finished question: {why}")
        solved = _solved_apart(paired, base.key, side.key)
        results.append(Compared(side, pairing, *solved, apart))
    if as_json:
        print(json.dumps(_json(base, results), indent=2))
        return
    out.print(Text(picture_controls(f"baseline: {base.label}")))
    for r in results:
        out.print()
        out.print(Text(picture_controls(r.side.label), style="bold"))
        out.print(_report(r))
        if r.apart:
            out.print(Text("  " + _apart_line(r.apart, r.side, base), style="yellow"))
    out.print()
    out.print(
        "accuracy: the mean success rate per question, over the questions both played; "
        "interval: a paired bootstrap over those questions (none under "
        f"{stats.MIN_CI_QUESTIONS}); a run solves a question when half or more of its samples "
        "are right",
        style="dim",
    )


def _side(st: Store, ref: str) -> Side:
    """The run (or training step) a command-line reference names; exits when none."""
    found = st.find_run(ref)
    if found is not None:
        return Side(found.id, found)
    name, at, step = ref.rpartition("@")
    if at and step.strip().removeprefix("-").isdecimal():
        run = st.find_run(name)
        if run is not None:
            from storage.training import finished_steps

            train_step = int(step)
            if not run.is_training:
                fail(f"run {run.name!r} is a {run.kind} run: it has no training steps to name")
            if train_step not in finished_steps(st, run.id):
                fail(
                    f"run {run.name!r} has no finished episode at training step {train_step} "
                    "(its steps are on the Training page)"
                )
            return Side(RunStep(run.id, train_step), run)
    fail(f"no run {ref!r} in the store (list them with `rollscope runs`; a step is RUN@STEP)")


def _solved_apart(
    outcomes: list[QuestionOutcomes], base: RunKey, run: RunKey
) -> tuple[list[str], list[str]]:
    """The questions both played that `run` solves and `base` does not, and the reverse."""
    from app.dashboard.compare.stats import solved

    by_run: list[str] = []
    by_base: list[str] = []
    for row in outcomes:
        a, b = solved(row, base), solved(row, run)
        if a is None or b is None or a == b:
            continue
        (by_run if b else by_base).append(row.question_id)
    return by_run, by_base


def _interval(pairing: Pairing) -> tuple[float, float] | None:
    """The 95% interval of the difference; None over too few questions for one."""
    from app.dashboard.compare.stats import MIN_CI_QUESTIONS

    ci = pairing.interval
    return None if ci is None or ci.n < MIN_CI_QUESTIONS else (ci.low, ci.high)


def _report(r: Compared) -> Table:
    """A run's figures against the baseline: a grid of label and value that wraps at any
    terminal width."""
    p = r.pairing
    interval = _interval(p)
    spread = (
        "too few questions for an interval"
        if interval is None
        else f"95% interval {interval[0] * 100:+.1f} to {interval[1] * 100:+.1f}"
    )
    grid = Table.grid(padding=(0, 2))
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    for label, value in (
        ("  questions both played", f"{p.questions:,}"),
        ("  accuracy", f"{fmt_pct(p.run)}, the baseline's {fmt_pct(p.base)}"),
        ("  difference", f"{(p.delta or 0.0) * 100:+.1f} pts, {spread}"),
        ("  solves, baseline not", _listed(r.solved_by_run)),
        ("  baseline solves, not it", _listed(r.solved_by_base)),
    ):
        grid.add_row(label, Text(picture_controls(value)))
    return grid


def _apart_line(apart: list[IdApart], side: Side, base: Side) -> str:
    """The line saying which shared ids the comparison leaves out, and why."""
    from app.dashboard.compare.stats import ids_apart_line

    return ids_apart_line(apart, side.label, base.label, picture_controls)


def _listed(question_ids: list[str]) -> str:
    """How many questions, and the first `LISTED` of them."""
    if not question_ids:
        return "0"
    shown = ", ".join(question_ids[:LISTED])
    more = f", and {len(question_ids) - LISTED:,} more" if len(question_ids) > LISTED else ""
    return f"{len(question_ids):,}: {shown}{more}"


def _json(base: Side, results: list[Compared]) -> dict[str, object]:
    return {
        "baseline": base.as_json(),
        "runs": [
            {
                **r.side.as_json(),
                "questions": r.pairing.questions,
                "accuracy": r.pairing.run,
                "baseline_accuracy": r.pairing.base,
                "difference": r.pairing.delta,
                "interval_95": _interval(r.pairing),
                "solved_not_by_baseline": r.solved_by_run,
                "solved_by_baseline_only": r.solved_by_base,
                "question_ids_apart": [
                    {
                        "question_id": a.question_id,
                        "question": a.question,
                        "baseline_question": a.against_question,
                    }
                    for a in r.apart
                ],
            }
            for r in results
        ],
    }
