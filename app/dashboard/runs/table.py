"""The Runs table: what a user compares first, short model paths, the best run per dataset."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from pathlib import PurePosixPath
from typing import Any

import pandas as pd
import streamlit as st

from app.dashboard import analysis
from app.dashboard.components.colors import run_color
from app.dashboard.components.render import MISSING, fmt_duration, fmt_time
from app.render import episodes_text
from storage.read_models import RunSummary

BEST = "★"
COLUMNS = [
    "",
    "run",
    "status",
    "progress",
    "accuracy",
    "95% interval",
    "mean reward",
    "mean steps",
    "parse failures",
    "episodes",
    "kind",
    "source",
    "skipped lines",
    "dataset",
    "model",
    "started",
    "duration",
    "id",
]


def short_path(text: str | None) -> str:
    """The last two parts of a path (`…/run1/checkpoint-1000`); a policy prefix kept."""
    if not text:
        return "-"
    prefix, _, path = text.rpartition(":") if text.startswith("hf:") else ("", "", text)
    parts = PurePosixPath(path).parts
    short = path if len(parts) <= 3 else "…/" + "/".join(parts[-2:])
    return f"{prefix}:{short}" if prefix else short


def progress_of(run: RunSummary) -> float | None:
    """The share of its planned episodes a run has finished; None for a run with no plan."""
    return None if run.plan is None else run.episodes_finished / run.plan


def model_of(run: RunSummary) -> str:
    """What played the run: a checkpoint path or the policy name; `-` for an import or an
    env-server run whose files or clients named no model (its policy is the format or the
    server, not a model)."""
    if run.checkpoint:
        return run.checkpoint
    return "-" if run.kind in ("import", "env") else run.policy


def source_of(run: RunSummary, *, whole: bool = False) -> str:
    """Where the run's episodes come from: rollscope itself, or an import's format and files
    (the path's last two parts, or with `whole` all of it)."""
    if run.source_format is None:
        return "rollscope"
    if run.source_path is None:
        return run.source_format
    return f"{run.source_format}: {run.source_path if whole else short_path(run.source_path)}"


def skipped_of(run: RunSummary) -> str:
    """The lines an import left out of its files as malformed; `-` for a run that read none
    (as text: a number column shows a missing value as "None")."""
    return "-" if run.source_path is None else f"{run.skipped_lines:,}"


def interval_text(run: RunSummary) -> str:
    """`41-58%`: the accuracy's 95% Wilson interval over the run's episodes."""
    ci = analysis.wilson_interval(run.correct, run.episodes_finished)
    return "-" if ci is None else f"{ci[0]:.0%}–{ci[1]:.0%}"


def rows(runs: Sequence[RunSummary]) -> pd.DataFrame:
    """One row per run, in `COLUMNS` order."""
    best = analysis.best_runs(runs)
    return pd.DataFrame(
        [
            {
                "": "●",
                "run": f"{BEST} {r.name}" if r.id in best else r.name,
                "status": r.status,
                "progress": progress_of(r),
                "accuracy": r.accuracy,
                "95% interval": interval_text(r),
                "mean reward": r.mean_reward,
                "mean steps": r.mean_steps,
                "parse failures": r.parse_failure_rate,
                "episodes": episodes_text(r),
                "kind": r.kind,
                "source": source_of(r),
                "skipped lines": skipped_of(r),
                "dataset": r.dataset or "-",
                "model": short_path(model_of(r)),
                "started": fmt_time(r.started_at),
                "duration": fmt_duration(r.duration_seconds),
                "id": r.id,
            }
            for r in runs
        ],
        columns=COLUMNS,
    )


_CONFIG: dict[str, Any] = {
    "": st.column_config.TextColumn("", width=28, pinned=True, help="The run's colour everywhere"),
    "run": st.column_config.TextColumn(
        "run",
        pinned=True,
        help=f"{BEST}: the highest accuracy on its dataset among model runs (oracle and random "
        "are baselines, not candidates)",
    ),
    "progress": st.column_config.ProgressColumn(
        "progress", min_value=0.0, max_value=1.0, width="small"
    ),
    "accuracy": st.column_config.NumberColumn(format="percent"),
    "95% interval": st.column_config.TextColumn(
        help="Wilson score interval of the accuracy, episodes as trials (Compare and the "
        "Question map resample questions, wider for few questions asked many times)"
    ),
    "mean reward": st.column_config.NumberColumn(format="%.3f"),
    "mean steps": st.column_config.NumberColumn(format="%.2f"),
    "parse failures": st.column_config.NumberColumn(
        format="percent", help="Share of steps with no action line"
    ),
    "episodes": st.column_config.TextColumn(help="finished / planned"),
    "kind": st.column_config.TextColumn(
        help="batch: `rollscope run` or Launch; training: a training loop's rollouts; "
        "fork: episodes continued from a recorded step; import: files another framework wrote"
    ),
    "source": st.column_config.TextColumn(
        help="rollscope: played by rollscope; otherwise the format and folder `rollscope "
        "import` read (trl, verl, skyrl, rllm, verifiers, messages), or a Recorder's loop; "
        "select the run for the whole path"
    ),
    "skipped lines": st.column_config.TextColumn(
        help="Malformed lines or rows an import left out of its files (`rollscope import` "
        "names each); - for a run that read no files",
    ),
    "model": st.column_config.TextColumn(
        help="The last two parts of the checkpoint path; select the run for the full path"
    ),
}


def table_key(runs: Sequence[RunSummary], generation: int) -> str:
    """A key that changes when the list of runs does (a new run shifts the selected rows)."""
    digest = hashlib.sha1(",".join(str(r.id) for r in runs).encode()).hexdigest()[:10]
    return f"runs_table_{digest}_{generation}"


def show(
    runs: Sequence[RunSummary],
    selected: Sequence[int],
    *,
    key: str,
    on_select: Callable[[list[int]], None],
) -> None:
    """The table with the runs in `selected` ticked; `on_select` gets the ids a user ticks.

    The ticks the table returns are compared with `selected` on every run as well: a tick
    that arrives while the page reruns is folded into that run, and its callback may not fire.
    """
    ids = [r.id for r in runs]
    frame = rows(runs)
    styled = frame.style.apply(lambda _: [f"color: {run_color(i)}" for i in ids], subset=[""])

    def changed() -> None:
        chosen = st.session_state[key].selection.rows
        on_select([ids[i] for i in chosen if i < len(ids)])

    event = st.dataframe(
        styled,
        placeholder=MISSING,
        hide_index=True,
        width="stretch",
        column_config=_CONFIG,
        on_select=changed,
        selection_mode="multi-row",
        selection_default={
            "selection": {"rows": [ids.index(i) for i in selected if i in ids], "columns": []}
        },
        key=key,
    )
    ticked = [ids[i] for i in event.selection.rows if i < len(ids)]
    if set(ticked) != set(selected):
        on_select(ticked)
