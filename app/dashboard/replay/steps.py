"""One recorded step, shown as the model saw it and as the environment answered."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app.dashboard.components.render import (
    no_reply,
    show_error,
    show_prompt,
    show_text,
)
from app.dashboard.replay import requery
from app.dashboard.replay.tokens import show_tokens
from app.render import action_label, fmt_signed
from rollout_core.records import RunKind
from storage.read_models import EpisodeDetail, StoredStep


def chip(step: StoredStep) -> str:
    """A step's label in the step strip: number, action, marks, reward (markdown)."""
    marks = []
    if step.error is not None:
        marks.append(":red[:material/error:]")
    if not step.parsed:
        marks.append(":orange[:material/help:]")
    if step.action == "ANSWER" and step.error is None:
        # An answer earns 1.0 when it is right (rollout_core/rewards.py), 0 otherwise.
        marks.append(":green[:material/check:]" if step.reward >= 1.0 else ":red[:material/close:]")
    reward = f" {fmt_signed(step.reward, 2)}" if step.reward else ""
    label = action_label(step)
    return f"{step.step_no} {label} {' '.join(marks)}{reward}".replace("  ", " ")


def show_action(step: StoredStep) -> None:
    """The parsed action; flagged when no action line was found (rollscope's environment ran
    the output as a QUERY; an imported or recorded turn without SQL took no action)."""
    if step.action is None or step.argument is None:
        st.warning(
            "No SQL found in this turn: it is recorded as an unparsed step.",
            icon=":material/help:",
        )
        return
    if step.fell_back:
        st.warning(
            "No action line found: the raw output was run as a QUERY.", icon=":material/help:"
        )
    st.caption(f"parsed action: {step.action}")
    show_text(step.argument, language="sql" if step.action == "QUERY" else None)


def show_observation(step: StoredStep) -> None:
    """The environment's answer; an error once, in red (the model saw it as `Error: ...`)."""
    if step.error is not None:
        show_error(step.error)
    if step.observation is None:
        if step.error is None:
            st.caption(no_reply(step))
    elif step.observation and step.observation not in (step.error, f"Error: {step.error}"):
        show_text(step.observation)
    elif not step.observation and step.error is None:
        st.caption("(empty)")


def show_numbers(step: StoredStep) -> None:
    """Reward, tokens and timings of a step, on one line; an imported step has neither
    tokens nor timings, and shows none rather than zeros."""
    parts = [f"reward **{fmt_signed(step.reward, 3)}**"]
    if step.tokens_in or step.tokens_out:
        parts.append(f"tokens {step.tokens_in or '-'} in / {step.tokens_out or '-'} out")
    if step.policy_seconds is not None:
        parts.append(f"policy {step.policy_seconds:.2f} s")
    if step.env_seconds is not None:
        parts.append(f"environment {step.env_seconds:.3f} s")
    if step.truncated:
        parts.append("output cut")
    st.caption(" · ".join(parts))


def show_step(step: StoredStep, *, kind: RunKind, with_prompt: bool = True) -> None:
    """Output and parsed action beside the observation, then the numbers; prompt folded.
    `kind`: the run's; an env-server run holds what its clients sent, the model's text or
    only the action."""
    left, right = st.columns(2)
    with left:
        st.caption("raw output, as the client sent it" if kind == "env" else "raw model output")
        show_text(step.raw_output)
        if with_prompt:  # the player, not the transcript
            show_tokens(step, key=f"tokens_{step.id}")
        show_action(step)
    with right:
        st.caption("observation")
        show_observation(step)
    show_numbers(step)
    if with_prompt:
        with st.expander("Prompt as the model saw it"):
            show_prompt(step.prompt)


def show_rerun(result: requery.Rerun) -> None:
    """A query's result now, as a table, and whether it matches the record."""
    if result.error is not None:
        show_error(result.error)
    else:
        st.dataframe(
            pd.DataFrame([list(r) for r in result.rows], columns=result.columns or None),
            placeholder="NULL",  # as SQL writes it: a text "-" or "None" is another value
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
    """For a parsed QUERY step: a button that runs the query again and says if it matches."""
    if step.action != "QUERY" or step.argument is None or not step.parsed:
        return  # an unparsed output "ran" as QUERY is prose, not a query worth running again
    if not requery.can_run_sql(detail.run):
        return
    if st.button("Run this query again", key=key, icon=":material/play_arrow:"):
        try:
            path = requery.db_path(detail.run, detail.summary.db_id)
            limits = requery.limits_of(detail.run.spec)
            show_rerun(requery.run_query(path, step.argument, step, limits))
        except (OSError, ValueError) as exc:
            show_error(str(exc))
