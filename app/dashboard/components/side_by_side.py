"""One question's episodes of several runs, step beside step, the first divergence marked."""

from __future__ import annotations

from collections.abc import Sequence

import streamlit as st

from app.dashboard import analysis, data
from app.dashboard.components import nav, params
from app.dashboard.components.compare_summary import run_label
from app.dashboard.components.params import Codec
from app.dashboard.components.render import escape_markdown, fmt_num, show_error, show_text
from storage.read_models import EpisodeDetail, QuestionComparison, RunSummary


def sample_key(run_id: int) -> str:
    """Widget key of a run's sample picker."""
    return f"cmp_sample_{run_id}"


def sample_codec(run_id: int, count: int) -> Codec[int]:
    """A run's sample index inside the repeated `sample=RUN:INDEX` parameter (0 left out)."""
    prefix = f"{run_id}:"

    def parse(values: list[str]) -> tuple[int, list[str]]:
        mine = [v[len(prefix) :] for v in values if v.startswith(prefix)]
        if not mine:
            return 0, []
        if mine[-1].isdigit() and int(mine[-1]) < count:
            return int(mine[-1]), []
        return 0, [
            f"sample={prefix}{mine[-1]} in the link is not a sample of run {run_id} "
            f"(0-{count - 1}); showing sample 0."
        ]

    def dump(value: int) -> list[str]:
        others = [v for v in params.raw(nav.P_SAMPLE) if not v.startswith(prefix)]
        return others + ([f"{prefix}{value}"] if value else [])

    return Codec(parse, dump)


def forget_samples(run_ids: Sequence[int]) -> None:
    """Back to the first sample of every run (a new question)."""
    params.write(nav.P_SAMPLE, [])
    for run_id in run_ids:
        params.forget(sample_key(run_id), nav.P_SAMPLE)


def show(row: QuestionComparison, runs: Sequence[RunSummary]) -> None:
    """The question's episodes of each run that played it, side by side."""
    st.markdown(escape_markdown(row.question))
    played = [(run, row.cells[run.id]) for run in runs if row.cells.get(run.id)]
    played = [(run, cell) for run, cell in played if cell.episode_ids]
    if not played:
        st.info("None of these runs has an episode of this question.")
        return
    details: list[tuple[RunSummary, EpisodeDetail]] = []
    heads = st.columns(len(played))
    for col, (run, cell) in zip(heads, played, strict=True):
        with col:
            st.markdown(run_label(run))
            sample = 0
            if len(cell.episode_ids) > 1:
                count = len(cell.episode_ids)
                bound = params.bind(sample_key(run.id), nav.P_SAMPLE, sample_codec(run.id, count))
                sample = st.selectbox(
                    f"Sample ({cell.correct}/{cell.episodes} correct)", range(count), **bound
                )
            detail = data.get_episode(cell.episode_ids[sample])
            if detail is None:
                continue
            details.append((run, detail))
            st.caption(
                f"**{detail.summary.outcome or 'playing'}** · reward "
                f"{fmt_num(detail.summary.reward, 3)} · {len(detail.steps)} steps"
            )
            st.page_link(
                nav.REPLAY,
                label="Replay",
                icon=":material/replay:",
                query_params={nav.P_EPISODE: str(detail.summary.id)},
            )
    if len(details) < 2:
        names = ", ".join(run.name for run, _ in details) or "no run"
        st.info(f"Only {names} played this question: there is nothing to compare it with.")
    else:
        diverge = analysis.first_divergence([d.steps for _, d in details])
        if diverge is None:
            st.success("All trajectories take the same actions.")
        else:
            st.warning(f"First divergence at step {diverge + 1}.")
        _steps(details, diverge)
        return
    _steps(details, None)


def _steps(details: list[tuple[RunSummary, EpisodeDetail]], diverge: int | None) -> None:
    longest = max((len(d.steps) for _, d in details), default=0)
    for i in range(longest):
        marker = " ◀ first divergence" if diverge == i else ""
        st.markdown(f"**Step {i + 1}**{marker}")
        cols = st.columns(len(details))
        for col, (_, detail) in zip(cols, details, strict=True):
            with col:
                if i >= len(detail.steps):
                    st.caption("(episode over)")
                    continue
                step = detail.steps[i]
                st.caption(
                    f"{step.action} · reward {step.reward:+.3f}"
                    + ("" if step.parsed else " · unparsed")
                )
                show_text(step.argument, language="sql" if step.action == "QUERY" else None)
                if step.error is not None:
                    show_error(step.error)
