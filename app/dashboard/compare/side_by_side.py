"""One question's episodes of several runs, step beside step, the first divergence marked."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import streamlit as st

from app.dashboard import analysis, data
from app.dashboard.analysis import fork_source, steps_before
from app.dashboard.compare.summary import run_label
from app.dashboard.components import agents, nav, params
from app.dashboard.components.colors import run_color, short_name
from app.dashboard.components.confidence import confidence_chart, has_confidence
from app.dashboard.components.outcome import outcome_label
from app.dashboard.components.params import Codec
from app.dashboard.components.render import (
    escape_markdown,
    show_error,
    show_step_action,
    show_step_result,
    show_text,
)
from app.dashboard.replay import origin, requery
from app.plural import counted
from app.render import fmt_num
from storage.read_models import (
    EpisodeDetail,
    QuestionComparison,
    RunCell,
    RunKey,
    RunStep,
    RunSummary,
)


def sample_key(run_id: RunKey) -> str:
    """Widget key of a run's (or a training step's) sample picker."""
    return f"cmp_sample_{run_id}"


def sample_codec(run_id: RunKey, count: int, default: int = 0) -> Codec[int]:
    """A run's sample index inside the repeated `sample=RUN:INDEX` parameter (`5@200:3` for a
    training step of a run; the default, sample 0 or the one a shown fork continues, left
    out)."""
    prefix = f"{run_id}:"

    def parse(values: list[str]) -> tuple[int, list[str]]:
        mine = [v[len(prefix) :] for v in values if v.startswith(prefix)]
        if not mine:
            return default, []
        if mine[-1].isdecimal() and int(mine[-1]) < count:
            return int(mine[-1]), []
        return default, [
            f"sample={prefix}{mine[-1]} in the link is not a sample of {_named(run_id)} "
            f"(0-{count - 1}); showing sample {default}."
        ]

    def dump(value: int) -> list[str]:
        others = [v for v in params.raw(nav.P_SAMPLE) if not v.startswith(prefix)]
        return others + ([f"{prefix}{value}"] if value != default else [])

    return Codec(parse, dump)


def _named(key: RunKey) -> str:
    if isinstance(key, RunStep):
        return f"run {key.run_id} at step {key.train_step}"
    return f"run {key}"


def _follow_forks(run_ids: Sequence[RunKey]) -> None:
    # Another sample of a fork run: the other runs show the episodes it continues again.
    reset = {str(i) for i in run_ids}
    kept = [v for v in params.raw(nav.P_SAMPLE) if v.partition(":")[0] not in reset]
    params.write(nav.P_SAMPLE, kept)
    for run_id in run_ids:
        st.session_state.pop(sample_key(run_id), None)


def forget_samples(run_ids: Sequence[RunKey]) -> None:
    """Back to the first sample of every run (a new question)."""
    params.write(nav.P_SAMPLE, [])
    for run_id in run_ids:
        params.forget(sample_key(run_id), nav.P_SAMPLE)


@dataclass(frozen=True, slots=True)
class _Column:
    run: RunSummary
    cell: RunCell
    bound: dict[str, Any] | None
    """The sample picker's binding; None when the run has one episode of the question."""


def _pick_samples(played: list[tuple[RunSummary, RunCell]]) -> list[_Column]:
    """Each run's sample picker; a fork run's is read first, so that the run it continues shows
    the episode its chosen sample continues unless the link says otherwise."""
    forks = [run.key for run, _ in played if fork_source(run) is not None]
    others = [run.key for run, _ in played if run.key not in forks]
    continued: set[int] = set()
    bound: dict[RunKey, dict[str, Any]] = {}
    for run, cell in sorted(played, key=lambda p: p[0].key not in forks):
        count = len(cell.episode_ids)
        default = 0
        if run.key not in forks:
            default = next((i for i, e in enumerate(cell.episode_ids) if e in continued), 0)
        if count > 1:
            bound[run.key] = params.bind(
                sample_key(run.key),
                nav.P_SAMPLE,
                sample_codec(run.key, count, default),
                on_change=(lambda: _follow_forks(others)) if run.key in forks else None,
            )
        if run.key in forks:
            chosen = st.session_state.get(sample_key(run.key), 0) if count > 1 else 0
            detail = data.get_episode(cell.episode_ids[min(chosen, count - 1)])
            if detail is not None and detail.summary.forked_from is not None:
                continued.add(detail.summary.forked_from)
    return [_Column(run, cell, bound.get(run.key)) for run, cell in played]


def _sample_names(cell: RunCell) -> Callable[[int], str]:
    """A sample's name in the picker of a run of several agents: its number and its agent."""
    named = origin.agents_of_episodes(tuple(cell.episode_ids))

    def name(i: int) -> str:
        agent = named.get(cell.episode_ids[i])
        return str(i) if agent is None else f'{i} · agent "{agent}"'

    return name


def show(row: QuestionComparison, runs: Sequence[RunSummary]) -> None:
    """The question's episodes of each run that played it, side by side."""
    st.markdown(escape_markdown(row.question))
    played = [(run, row.cells[run.key]) for run in runs if row.cells.get(run.key)]
    played = [(run, cell) for run, cell in played if cell.episode_ids]
    if not played:
        st.info("None of these runs has an episode of this question.")
        return
    details: list[tuple[RunSummary, EpisodeDetail]] = []
    several = {i for i, names in agents.agents_of(runs).items() if len(names) > 1}
    columns = _pick_samples(played)
    heads = st.columns(len(columns))
    for col, c in zip(heads, columns, strict=True):
        run, cell = c.run, c.cell
        with col:
            st.markdown(run_label(run))
            sample = 0
            if c.bound is not None:
                sample = st.selectbox(
                    f"Sample ({cell.correct}/{cell.episodes} correct)",
                    range(len(cell.episode_ids)),
                    format_func=_sample_names(cell) if run.id in several else str,
                    **c.bound,
                )
            detail = data.get_episode(cell.episode_ids[sample])
            if detail is None:
                continue
            details.append((run, detail))
            # An import's outcome is its file's score; rollscope's own grade of it stands beside.
            regraded = origin.regrade_of(detail)
            # A run of several agents' traces a line: whose trace this is.
            agent = origin.agent_of(detail) if run.id in several else None
            st.caption(
                f"**{outcome_label(detail.summary.outcome)}** · reward "
                f"{fmt_num(detail.summary.reward, 3)} · {counted(len(detail.steps), 'step')}"
                + (f" · {agent}" if agent else "")
                + (f" · {regraded}" if regraded else "")
            )
            if detail.summary.answer is not None:
                st.caption("submitted answer")
                show_text(detail.summary.answer)
            st.page_link(
                nav.REPLAY,
                label="Replay",
                icon=":material/replay:",
                query_params={nav.P_EPISODE: str(detail.summary.id)},
            )
    # "#N" means a run id elsewhere: a sample is named as such.
    traced = [
        (f"{short_name(run.label)} #{run.id} · sample {d.summary.sample_index}", d.steps)
        for run, d in details
    ]
    if any(has_confidence(steps) for _, steps in traced):
        colors = _colors([run for run, _ in details])
        st.plotly_chart(
            confidence_chart(traced, colors=colors), width="stretch", key="cmp_confidence"
        )
    elif details:
        st.caption(
            "Not drawn, as these episodes' records hold none: token log-probability and "
            "entropy per step (the confidence chart)."
        )
    _gold(details)
    if len(details) < 2:
        names = ", ".join(run.label for run, _ in details) or "no run"
        st.info(f"Only {names} played this question: there is nothing to compare it with.")
        _steps(details, None, {})
        return
    diverge = analysis.first_divergence([d.steps for _, d in details])
    forks = fork_points(details)
    for point in forks.values():
        st.info(point.sentence(diverge), icon=":material/call_split:")
    if diverge is None:
        st.success("All trajectories take the same actions.")
    elif not forks:
        st.warning(f"First divergence at step {diverge + 1}.")
    _steps(details, diverge, forks)


def _colors(runs: Sequence[RunSummary]) -> list[str]:
    """Each shown episode's line colour: its run's, and for a second step of one run, the run
    colour after it (two steps of a run would otherwise draw alike)."""
    seen: dict[int, int] = {}
    colors = []
    for run in runs:
        seen[run.id] = seen.get(run.id, -1) + 1
        colors.append(run_color(run.id + seen[run.id]))
    return colors


def _gold(details: Sequence[tuple[RunSummary, EpisodeDetail]]) -> None:
    """The gold SQL and its result now, written as the steps' results are (as the model reads
    them), so each submitted answer and query result reads against it at a glance. Any shown
    run that records the gold SQL and its database runs it: an imported run often has neither."""
    golds = [(run, d) for run, d in details if d.gold_sql]
    if not golds:
        return
    held = [(run, d, path) for run, d in golds if (path := _database(run, d)) is not None]
    # A run whose database is there before one whose folder has gone (that one says so).
    held.sort(key=lambda h: not h[2].is_file())
    gold = (held[0][1] if held else golds[0][1]).gold_sql or ""
    with st.expander("Gold SQL and its result", expanded=True):
        show_text(gold, language="sql")
        if not held:
            st.caption(
                "No result: these runs hold no database for this question (an imported run "
                "names its databases with `rollscope import --questions F --db-dir D`)."
            )
            return
        run, _, path = held[0]
        try:
            result = requery.run_query(path, gold, limits=requery.limits_of(run.spec))
        except OSError as exc:
            show_error(str(exc))
            return
        if result.error is not None:
            show_error(result.error)
        else:
            show_text(result.text)


def _database(run: RunSummary, detail: EpisodeDetail) -> Path | None:
    """Where the run keeps the episode's database; None when it names none."""
    try:
        return requery.db_path(run, detail.summary.db_id)
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class ForkPoint:
    """A shown fork episode whose source episode is shown beside it."""

    fork_run: str
    source_run: str
    source_episode: int
    step: int
    """The first step the fork's own policy played (1-based)."""

    def sentence(self, diverge: int | None) -> str:
        """What the reader should know about the alignment."""
        replayed = (
            f"{steps_before(self.step)} replayed as recorded, so the two can differ only from "
            f"step {self.step}"
            if self.step > 1
            else "it plays from step 1"
        )
        then = (
            "; they take the same actions throughout."
            if diverge is None
            else f"; the first different action is at step {diverge + 1}."
        )
        return (
            f"{escape_markdown(self.fork_run)} continues {escape_markdown(self.source_run)}'s "
            f"episode {self.source_episode} from step {self.step}: {replayed}{then}"
        )


def fork_points(details: Sequence[tuple[RunSummary, EpisodeDetail]]) -> dict[int, ForkPoint]:
    """For each shown fork episode whose source is shown too: where it takes over (0-based step
    index -> the fork)."""
    shown = {d.summary.id: run for run, d in details}
    found: dict[int, ForkPoint] = {}
    for run, d in details:
        source, step = d.summary.forked_from, d.summary.fork_step
        if source is None or step is None or source not in shown:
            continue
        found[step - 1] = ForkPoint(run.label, shown[source].label, source, step)
    return found


def _steps(
    details: list[tuple[RunSummary, EpisodeDetail]],
    diverge: int | None,
    forks: dict[int, ForkPoint],
) -> None:
    longest = max((len(d.steps) for _, d in details), default=0)
    for i in range(longest):
        marks = []
        if i in forks:
            marks.append(f"◀ fork: {escape_markdown(forks[i].fork_run)} plays from here")
        if diverge == i:
            marks.append("◀ first divergence")
        st.markdown(f"**Step {i + 1}** " + " · ".join(marks))
        cols = st.columns(len(details))
        for col, (_, detail) in zip(cols, details, strict=True):
            with col:
                if i >= len(detail.steps):
                    st.caption("(episode over)")
                    continue
                step = detail.steps[i]
                show_step_action(step)
                show_step_result(step)
