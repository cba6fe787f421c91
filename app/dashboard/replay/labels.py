"""Replay's labels: an episode's (or a step's) tags and notes, added and removed by a person.

Tags and notes are user text: they are shown as text or code, never as markdown or HTML.
"""

from __future__ import annotations

import getpass

import streamlit as st

from app.dashboard import data
from app.dashboard.components.render import escape_markdown, fmt_time, show_error, show_text
from app.dashboard.episodes.reads import tag_counts
from storage.engine import StoreError
from storage.read_models import Annotation, EpisodeDetail
from storage.tagging import AnnotationError

_ERROR = "rp_label_error"
_AUTHOR = "rp_label_author"


def default_author() -> str:
    """Who a label is recorded as until a person types a name: the dashboard's user (`$USER`);
    the dashboard knows no login."""
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no user name in the environment or the password database
        return "anonymous"


def _add(episode_id: int, shown: int) -> None:
    ss = st.session_state
    tag = ss.get("rp_label_tag") or ""
    step = shown if ss.get("rp_label_on_step") else None
    author = (ss.get(_AUTHOR) or "").strip() or default_author()
    try:
        data.writer().annotate(
            episode_id, tag, note=ss.get("rp_label_note") or None, step=step, author=author
        )
    except (AnnotationError, StoreError, RuntimeError) as exc:
        ss[_ERROR] = str(exc)
        return
    ss.pop(_ERROR, None)
    ss["rp_label_note"] = ""
    ss["rp_label_tag"] = None
    data.clear()


def _remove(episode_id: int, tag: str, step: int | None) -> None:
    try:
        data.writer().remove_annotation(episode_id, tag, step=step)
    except (AnnotationError, StoreError, RuntimeError) as exc:
        st.session_state[_ERROR] = str(exc)
        return
    data.clear()


def _where(a: Annotation) -> str:
    return "episode" if a.step is None else f"step {a.step}"


def _existing(episode_id: int, notes: list[Annotation], writable: bool) -> None:
    if not notes:
        st.caption("No labels yet.")
        return
    for a in notes:
        with st.container(horizontal=True, vertical_alignment="center", gap="small"):
            st.markdown(
                f":material/label: **{escape_markdown(a.tag)}** · {_where(a)}",
                width="content",
            )
            who = f"{escape_markdown(a.author)}, " if a.author else ""
            st.caption(f"{who}{fmt_time(a.created_at)}", width="content")
            if writable:
                st.button(
                    "Remove",
                    icon=":material/close:",
                    type="tertiary",
                    key=f"rp_unlabel_{a.id}",
                    on_click=_remove,
                    args=(episode_id, a.tag, a.step),
                    help=f"Take the tag off this {_where(a)}",
                )
        if a.note:
            show_text(a.note)


def show(detail: EpisodeDetail, step: int, writable: bool) -> None:
    """The episode's labels with a remove control each, and a form to add one (`writable`;
    it labels the episode, or the step shown)."""
    episode_id = detail.summary.id
    notes = data.store().annotations(episode_id)  # read now: a label shows the moment it is added
    st.subheader("Labels")
    _existing(episode_id, notes, writable)
    if not writable:
        return
    known = [t.tag for t in tag_counts((detail.run.id,))]
    with st.form("rp_label", border=True):
        c1, c2 = st.columns([1, 2])
        c1.selectbox(
            "Tag",
            known,
            index=None,
            accept_new_options=True,
            placeholder="Pick or type a tag",
            help="A tag this run's episodes already carry, or a new one typed here.",
            key="rp_label_tag",
        )
        if _AUTHOR not in st.session_state:
            st.session_state[_AUTHOR] = default_author()
        c1.text_input("Labelled by", key=_AUTHOR, help="Recorded with the label.")
        c1.checkbox(
            f"Only step {step}",
            key="rp_label_on_step",
            help="Label the step shown above rather than the whole episode.",
        )
        c2.text_area("Note (optional)", key="rp_label_note", height=80)
        st.form_submit_button(
            "Add label", icon=":material/new_label:", on_click=_add, args=(episode_id, step)
        )
    if message := st.session_state.pop(_ERROR, None):
        show_error(message)
