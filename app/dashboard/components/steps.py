"""One recorded step, shown as the model saw it and as the environment answered."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app.dashboard import requery
from app.dashboard.components.render import show_error, show_prompt, show_text
from app.dashboard.components.tokens import show_tokens
from storage.read_models import EpisodeDetail, StoredStep


def show_action(step: StoredStep) -> None:
    """The parsed action; flagged when no action line was found (fell back to QUERY)."""
    if not step.parsed:
        st.warning(
            "No action line found: the raw output was run as a QUERY.", icon=":material/help:"
        )
    st.caption(f"parsed action: {step.action}")
    show_text(step.argument, language="sql" if step.action == "QUERY" else None)


def show_observation(step: StoredStep) -> None:
    """The environment's answer, the error highlighted."""
    if step.error is not None:
        show_error(step.error)
    if step.observation and step.observation != step.error:
        show_text(step.observation)


def show_step(step: StoredStep, *, with_prompt: bool = True) -> None:
    """Prompt (collapsed), raw output, parsed action, observation and reward of one step."""
    if with_prompt:
        with st.expander("Prompt as the model saw it"):
            show_prompt(step.prompt)
    st.caption("raw model output")
    show_text(step.raw_output)
    if with_prompt:  # the player, not the transcript
        show_tokens(step, key=f"tokens_{step.id}")
    show_action(step)
    st.caption("observation")
    show_observation(step)
    cols = st.columns(4)
    cols[0].metric("reward", f"{step.reward:+.3f}")
    cols[1].metric("tokens in / out", f"{step.tokens_in or '-'} / {step.tokens_out or '-'}")
    cols[2].metric("policy s", f"{step.policy_seconds:.2f}")
    cols[3].metric("env s", f"{step.env_seconds:.3f}")


def show_rerun(result: requery.Rerun) -> None:
    """A query's result now, as a table, and whether it matches the record."""
    if result.error is not None:
        show_error(result.error)
    else:
        st.dataframe(
            pd.DataFrame([list(r) for r in result.rows], columns=result.columns or None),
            hide_index=True,
        )
        if result.truncated:
            st.caption("result cut at the sandbox's row cap")
    if result.matches is True:
        st.success("Same result as recorded.", icon=":material/check:")
    elif result.matches is False:
        st.warning(
            "Differs from the recorded observation (the database changed, or the record "
            "was shortened for the model).",
            icon=":material/difference:",
        )


def rerun_button(detail: EpisodeDetail, step: StoredStep, *, key: str) -> None:
    """A button that runs the step's QUERY again now and shows whether it still matches."""
    if step.action != "QUERY":
        return
    if st.button("Run this query again", key=key, icon=":material/play_arrow:"):
        try:
            path = requery.db_path(detail.run.spec, detail.summary.db_id)
            show_rerun(requery.run_query(path, step.argument, step))
        except (OSError, ValueError) as exc:
            show_error(str(exc))
