"""`rollscope tag` labels an episode or a step; `rollscope tags` lists the labels in use."""

from __future__ import annotations

import dataclasses
import getpass
import json
from typing import Annotated

import typer

from app.cli.episode_ids import episode_id as parse_episode_id
from app.cli.output import USER_ERRORS, err, fail, jsonable, one_line, out
from app.cli.stores import DEFAULT_STORE, StoreOpt, open_reader, open_store
from app.plural import counted

_Opt = typer.Option


def tag(
    episode_id: Annotated[
        int,
        typer.Argument(
            parser=parse_episode_id, metavar="EPISODE", help="Episode to label.", show_default=False
        ),
    ],
    tag_name: Annotated[str, typer.Argument(metavar="TAG", help="A short label, e.g. wrong-join.")],
    note: Annotated[str | None, _Opt(help="Free text kept with the tag.")] = None,
    step: Annotated[int | None, _Opt(help="Label this step rather than the episode.")] = None,
    remove: Annotated[bool, _Opt("--remove", help="Take the tag off instead.")] = False,
    author: Annotated[
        str | None, _Opt(help="Who labels it; default: $USER.", show_default=False)
    ] = None,
    store: StoreOpt = DEFAULT_STORE,
) -> None:
    """Tag an episode (or one of its steps) with a label and a note; --remove takes it off.

    Tagging again with the same tag replaces the note. List tags with `rollscope tags`.
    """
    from storage.tagging import clean_tag

    if remove and note is not None:
        fail("--remove takes a tag off; it has no --note")
    st = open_store(store, existing="tags go on episodes recorded there")
    where = f"episode {episode_id}" + ("" if step is None else f" step {step}")
    try:
        if remove:
            if not st.remove_annotation(episode_id, clean_tag(tag_name), step=step):
                fail(f"{where} has no tag {tag_name.strip()!r} (see `rollscope tags --run RUN`)")
            out.print(f"{where}: removed {tag_name.strip()!r}")
            return
        made = st.annotate(episode_id, tag_name, note=note, step=step, author=author or _login())
    except USER_ERRORS as exc:
        fail(one_line(exc))
    out.print(f"{where}: tagged {made.tag!r}")


def tags(
    run_refs: Annotated[
        list[str] | None, _Opt("--run", help="Run name or id; repeatable (default: all runs).")
    ] = None,
    tag_name: Annotated[
        str | None, _Opt("--tag", help="List the episodes carrying this tag, with their notes.")
    ] = None,
    limit: Annotated[int, _Opt(min=1, help="Episodes listed with --tag at most.")] = 100,
    as_json: Annotated[bool, _Opt("--json", help="Machine-readable output.")] = False,
    store: StoreOpt = DEFAULT_STORE,
) -> None:
    """Tags in use and how many episodes carry each; --tag lists those episodes."""
    from app.render import annotated_table, tag_table
    from storage.models import INTEGER_RANGE
    from storage.read_models import EpisodeFilter
    from storage.tagging import AnnotationError, clean_tag

    st = open_reader(store)
    run_ids = []
    for ref in dict.fromkeys(run_refs or []):
        found = st.find_run(ref)
        if found is None:
            fail(f"no run {ref!r} in the store (list them with `rollscope runs`)")
        run_ids.append(found.id)
    if tag_name is None:
        counts = st.annotation_tags(run_ids)
        if as_json:
            print(json.dumps([dataclasses.asdict(c) for c in counts], indent=2))
        elif not counts:
            out.print("no tags yet: add one with `rollscope tag EPISODE TAG --note ...`")
        else:
            out.print(tag_table(counts))
        return
    try:
        wanted = clean_tag(tag_name)  # as `rollscope tag` stored it
    except AnnotationError as exc:
        fail(one_line(exc))
    flt = EpisodeFilter(run_ids=tuple(run_ids), tags=(wanted,), finished_only=False)
    page = st.list_episodes(flt, limit=min(limit, INTEGER_RANGE.stop - 1))  # any more is all
    details = st.get_episodes([e.id for e in page.items])
    if as_json:
        rows = [
            {"episode_id": d.summary.id, "run_name": d.summary.run_name}
            | {"question_id": d.summary.question_id, "outcome": d.summary.outcome}
            | {"annotations": [dataclasses.asdict(a) for a in d.annotations if a.tag == wanted]}
            for d in details
        ]
        print(json.dumps(jsonable(rows), indent=2))
        if page.next_cursor is not None:  # on stderr: stdout stays the list
            err.print(f"the first {counted(len(details), 'episode')} listed; --limit N for more")
    elif not details:
        out.print(f"no episode carries the tag {wanted!r}")
    else:
        out.print(annotated_table(details, wanted))
        if page.next_cursor is not None:
            out.print(f"(first {len(details)} shown; --limit for more)")


def _login() -> str | None:
    """Who runs this command, for an annotation's author."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no $USER and no passwd entry (some containers)
        return None
