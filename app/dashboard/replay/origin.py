"""Where an imported (or recorded) episode comes from: its file and line, its rewards by name,
rollscope's re-grade beside the file's own score, and the steps whose observation rollscope
filled; for a training run rollscope recorded, the trainer's rewards by name."""

from __future__ import annotations

import streamlit as st

from app.dashboard.components.render import escape_markdown
from app.dashboard.data import cached_read
from app.importers.detect import format_label
from app.render import fmt_num
from storage.imports import EpisodeOrigin
from storage.read_models import EpisodeDetail
from storage.store import Store


@cached_read()
def origin_of(store: Store, episode_id: int) -> EpisodeOrigin | None:
    """The episode's source row and named rewards; None when it has neither."""
    return store.episode_origins([episode_id]).get(episode_id)


@cached_read()
def agents_of_episodes(store: Store, episode_ids: tuple[int, ...]) -> dict[int, str]:
    """The agent of each of these imported episodes whose file names one."""
    found = store.episode_origins(episode_ids)
    return {i: o.agent for i, o in found.items() if o.agent is not None}


def regrade_words(regraded: str) -> str:
    return f"re-graded by rollscope: **{regraded}** (the file's score stands)"


def regrade_of(detail: EpisodeDetail) -> str | None:
    """rollscope's re-grade of an imported episode (`--questions`), in words; None when it
    made none."""
    if detail.run.played_here:
        return None
    found = origin_of(detail.summary.id)
    return None if found is None or found.regraded is None else regrade_words(found.regraded)


def agent_of(detail: EpisodeDetail) -> str | None:
    """The agent whose trace an imported episode is, in words (its name is the file's text,
    escaped); None where the file names none."""
    if detail.run.played_here:
        return None
    found = origin_of(detail.summary.id)
    return (
        None if found is None or found.agent is None else f'agent "{escape_markdown(found.agent)}"'
    )


def show(detail: EpisodeDetail) -> None:
    """One caption line: where an episode of a run rollscope did not play comes from, or, for
    a training run rollscope recorded, how the trainer's reward functions scored it."""
    run = detail.run
    found = origin_of(detail.summary.id)
    if found is None:
        return
    if run.source_format is None:
        if found.rewards:  # read back from the trainer (app.training.trainer_scores)
            st.caption(
                f"the trainer's rewards: {_named(found)} (the reward above is the environment's)"
            )
        return
    parts = []
    if found.path is not None:
        kind = format_label(run.source_format)
        where = f"imported from {kind} file `{found.path}`, line {found.line}"
        if (agent := agent_of(detail)) is not None:
            where += f", {agent}"
        if found.gone:
            where += " (since rewritten without this row)"
        parts.append(where)
    else:
        parts.append(f"recorded by a {run.source_format}")
    if found.rewards:
        parts.append(f"rewards: {_named(found)}")
    if found.regraded is not None:
        parts.append(regrade_words(found.regraded))
    if found.filled_steps:
        steps = ", ".join(str(s) for s in found.filled_steps)
        parts.append(f"observation of step {steps} filled by running its SQL (the file had none)")
    st.caption(" · ".join(parts))


REPLAYED = (
    "Of an earlier play of this training step, which a later play replaced (the trainer "
    "resumed from a checkpoint and played the step again): the Training page leaves it out."
)


@cached_read()
def was_replaced(store: Store, episode_id: int) -> bool:
    """Whether a later play of the episode's training step replaced it."""
    return episode_id in store.replaced_among([episode_id])


def show_replaced(detail: EpisodeDetail) -> None:
    """A line for an episode of a trainer's run that a resumed trainer played again (an
    import's row a rewrite dropped says so on its origin line)."""
    stepped = detail.run.kind != "import" and detail.summary.train_step is not None
    if stepped and was_replaced(detail.summary.id):
        st.caption(REPLAYED)


def _named(found: EpisodeOrigin) -> str:
    """The rewards by name, in name order, as markdown-safe text (the names are a trainer's)."""
    return escape_markdown(
        ", ".join(f"{name} {fmt_num(v, 3)}" for name, v in sorted(found.rewards.items()))
    )
