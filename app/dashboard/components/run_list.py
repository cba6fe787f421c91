"""The runs a page offers: the newest (`data.RUNS_LISTED`), and any older run its link names,
so that a link to an old run opens it on every page."""

from __future__ import annotations

from collections.abc import Sequence

from app.dashboard import data
from app.dashboard.components import nav, params, sides
from storage.models import BIG_INTEGER_RANGE
from storage.read_models import RunSummary, run_of


def offered(
    *, training: bool = False, fresh: bool = False, linked: Sequence[str] | None = None
) -> list[RunSummary]:
    """The newest runs (`training`: that may carry training steps), then the older runs the
    link's `run` parameter names (or the `run` values `linked` gives: those of a list a page
    was opened from), oldest last. `fresh`: the newest read now, not cached (a live table's
    rows then match its progress bars)."""
    if fresh:
        runs = data.store().list_runs(limit=data.RUNS_LISTED, training=training)
    else:
        runs = data.list_runs(training)
    listed = {r.id for r in runs}
    named = {
        run_of(key)
        for value in (params.get_all(nav.P_RUN) if linked is None else linked)
        for part in value.split(",")
        if (key := sides.parse_key(part.strip())) is not None
    }
    # An id past what a store holds names no run: the page's own notice says so.
    older_ids = sorted((i for i in named - listed if i in BIG_INTEGER_RANGE), reverse=True)
    older = (data.get_run(i) for i in older_ids)
    return runs + [r for r in older if r is not None and (r.is_training or not training)]


def older_note(shown: int) -> str | None:
    """A line for a page listing every run it offers, when the store holds more than the
    newest it lists: how to reach the others; None when it lists them all."""
    if shown < data.RUNS_LISTED or (held := data.count_runs()) <= shown:
        return None
    return (
        f"The newest {data.RUNS_LISTED:,} of the store's {held:,} runs are listed; open an "
        f"older one with its id in the link (`?{nav.P_RUN}=ID`), or list them all with "
        "`rollscope runs --limit N`."
    )
