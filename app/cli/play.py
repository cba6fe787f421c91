"""Play a created run with a progress bar, then print its summary or why it stopped."""

from __future__ import annotations

import shlex
import sys
import traceback
from typing import TYPE_CHECKING

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from app import batch
from app.cli.output import USER_ERRORS, err, fail, out
from app.cli.store_failures import store_trouble
from app.cli.stores import DEFAULT_STORE
from app.plural import counted
from app.render import fmt_pct, runs_table
from app.store_url import shown_url

if TYPE_CHECKING:
    from rollout_core.records import EpisodeKey, EpisodeRecord
    from rollout_core.runner import RunStats
    from storage.store import Store


def play(
    st: Store,
    url: str,
    run_id: int,
    prepared: batch.Prepared,
    skip: set[EpisodeKey],
    quiet: bool,
) -> None:
    """Play the run into `st` (opened from `url`); exit 1 when it failed, 130 when stopped."""
    progress = Progress(
        TextColumn("{task.description}", style="bold", markup=False),  # a run's name: text
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]} ep/s  acc {task.fields[acc]}"),
        TimeElapsedColumn(),
        console=err,
        disable=quiet,
    )
    task = progress.add_task(
        prepared.spec.name, total=prepared.planned - len(skip), rate="-", acc="-"
    )

    def on_episode(rec: EpisodeRecord, stats: RunStats) -> None:
        elapsed = max(progress.tasks[0].elapsed or 0.0, 1e-9)
        progress.update(
            task, advance=1, rate=f"{stats.episodes / elapsed:.1f}", acc=f"{stats.accuracy:.1%}"
        )

    try:
        with progress:
            stats = batch.play_run(
                st, run_id, prepared, skip=skip, on_episode=on_episode, on_note=err.print
            )
    except batch.Cancelled as exc:
        fail(str(exc), code=130)
    except batch.JobError as exc:
        cause = exc.__cause__
        trouble = None if cause is None else store_trouble(cause)
        if trouble is not None:
            # The episodes written so far are committed; --resume plays the rest.
            fail(
                f"run {run_id} {prepared.spec.name!r} stopped: {trouble.cause}; "
                f"{_kept(st, run_id)}: {trouble.fix}, then {resume_command(prepared, url)}",
                code=trouble.code,
            )
        if cause is not None and not isinstance(cause, USER_ERRORS):
            # Not bad input: a bug or a broken model. The run records the one-line error; the
            # terminal also gets the traceback to debug it.
            traceback.print_exception(cause, file=sys.stderr)
        fail(str(exc), code=1)
    summary = st.get_run(run_id)
    assert summary is not None
    out.print(runs_table([summary], out.width))
    eps = stats.episodes / stats.wall_seconds if stats.wall_seconds else 0.0
    played = counted(stats.episodes, "episode")
    if skip:  # a resumed run: the table above is the whole run's
        played = f"{played} more, beside the {len(skip):,} played before,"
    accuracy = "their accuracy" if skip else "accuracy"
    out.print(
        f"run {summary.id} {summary.name!r}: {played} in {stats.wall_seconds:.1f} s "
        f"({eps:.1f} ep/s), {accuracy} {fmt_pct(stats.accuracy)}",
    )


def resume_command(prepared: batch.Prepared, url: str) -> str:
    """The command that finishes the run, e.g. `rollscope run --resume NAME --store PATH`."""
    store = "" if url == DEFAULT_STORE else f" --store {shlex.quote(shown_url(url))}"
    return f"`rollscope run --resume {shlex.quote(prepared.spec.name)}{store}`"


def _kept(st: Store, run_id: int) -> str:
    """How many finished episodes the failed run keeps, when the store can still say."""
    try:
        summary = st.get_run(run_id)
    except Exception:  # the store that just failed may fail this read too
        summary = None
    if summary is None:
        return "the episodes it finished are kept"
    n = summary.episodes_finished
    return f"its {counted(n, 'finished episode')} {'is' if n == 1 else 'are'} kept"
