"""Annotations and forks in the store: tags and notes on episodes and steps, the tag filter,
run labels, and a fork's provenance on its episodes and steps."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from rollout_core.records import IterationBatch
from storage.read_models import EpisodeFilter
from storage.store import Store, StoreError
from storage.tagging import MAX_TAG, AnnotationError
from tests.support.records import finish, play, spec, start, step
from tests.support.stores import write_run


def _run(store: Store, name: str = "run-a") -> tuple[int, list[int]]:
    """A run of three finished episodes (q1 correct, q2 wrong, q3 budget exhausted)."""
    played = [
        play("q1", 0, "correct", 1.0, 3),
        play("q2", 0, "wrong", 0.0, 2),
        play("q3", 0, "budget_exhausted", 0.0, 4),
    ]
    run_id = write_run(store, spec(name), played, status=None)
    ids = [e.id for e in store.list_episodes(EpisodeFilter(run_ids=(run_id,))).items]
    return run_id, ids


def test_a_tag_on_an_episode_and_on_a_step_comes_back_with_its_note(store: Store) -> None:
    _, (e1, e2, _) = _run(store)
    before = datetime.now(UTC)
    made = store.annotate(e1, "  wrong-join ", note="joined on name", author="ada")
    store.annotate(e1, "slow", step=2)
    store.annotate(e2, "wrong-join")
    assert made.tag == "wrong-join" and made.step is None
    notes = store.annotations(e1)
    assert [(a.tag, a.step, a.note, a.author) for a in notes] == [
        ("wrong-join", None, "joined on name", "ada"),
        ("slow", 2, None, None),
    ]
    assert all(a.created_at >= before.replace(microsecond=0) for a in notes)
    detail = store.get_episode(e1)
    assert detail is not None and detail.annotations == notes


def test_the_same_tag_again_replaces_its_note(store: Store) -> None:
    _, (e1, _, _) = _run(store)
    store.annotate(e1, "wrong-join", note="first look")
    store.annotate(e1, "wrong-join", note="second look", author="bo")
    store.annotate(e1, "wrong-join", note="on step 1", step=1)
    assert [(a.step, a.note, a.author) for a in store.annotations(e1)] == [
        (None, "second look", "bo"),
        (1, "on step 1", None),
    ]


def test_removing_a_tag(store: Store) -> None:
    _, (e1, _, _) = _run(store)
    store.annotate(e1, "a")
    store.annotate(e1, "a", step=1)
    assert store.remove_annotation(e1, "a", step=1)
    assert not store.remove_annotation(e1, "a", step=1)
    assert [(a.tag, a.step) for a in store.annotations(e1)] == [("a", None)]


@pytest.mark.parametrize(
    ("tag", "note", "step", "problem"),
    [
        ("", None, None, "empty"),
        ("   ", None, None, "empty"),
        ("x" * (MAX_TAG + 1), None, None, "characters long"),
        ("two\nlines", None, None, "one line"),
        ("ok", None, 0, "choose a step from 1 to 3"),
        ("ok", None, 4, "choose a step from 1 to 3"),
        ("ok", "n" * 10_001, None, "note is 10001 characters"),
    ],
)
def test_bad_annotations_are_refused_and_nothing_is_written(
    store: Store, tag: str, note: str | None, step: int | None, problem: str
) -> None:
    _, (e1, _, _) = _run(store)
    with pytest.raises(AnnotationError, match=problem):
        store.annotate(e1, tag, note=note, step=step)
    assert store.annotations(e1) == []


def test_an_unknown_episode_is_refused(store: Store) -> None:
    with pytest.raises(AnnotationError, match="no episode 999"):
        store.annotate(999, "x")


def test_episodes_filter_by_tag_on_the_episode_or_a_step(store: Store) -> None:
    run_a, (a1, a2, a3) = _run(store, "run-a")
    run_b, (b1, _, _) = _run(store, "run-b")
    store.annotate(a1, "loop")
    store.annotate(a3, "loop", step=2)
    store.annotate(a2, "typo")
    store.annotate(b1, "loop")

    def ids(flt: EpisodeFilter) -> list[int]:
        return [e.id for e in store.list_episodes(flt).items]

    assert ids(EpisodeFilter(tags=("loop",))) == [a1, a3, b1]
    assert ids(EpisodeFilter(run_ids=(run_a,), tags=("loop",))) == [a1, a3]
    assert ids(EpisodeFilter(run_ids=(run_a,), tags=("loop", "typo"))) == [a1, a2, a3]
    assert ids(EpisodeFilter(run_ids=(run_b,), tags=("typo",))) == []
    page = store.list_episodes(EpisodeFilter(tags=("loop",)), with_total=True, limit=2)
    assert page.total == 3 and page.next_cursor is not None


def test_tag_counts_per_run_most_used_first(store: Store) -> None:
    run_a, (a1, a2, a3) = _run(store, "run-a")
    _, (b1, _, _) = _run(store, "run-b")
    store.annotate(a1, "loop")
    store.annotate(a1, "loop", step=1)  # one episode, counted once
    store.annotate(a2, "loop")
    store.annotate(a3, "typo")
    store.annotate(b1, "zeta")
    store.tag_run(run_a, "sweep", "lr-1e-5")  # a run label is not an episode tag
    assert [(c.tag, c.episodes) for c in store.annotation_tags([run_a])] == [
        ("loop", 2),
        ("typo", 1),
    ]
    assert [c.tag for c in store.annotation_tags()] == ["loop", "typo", "zeta"]


def test_run_labels_live_beside_episode_tags(store: Store) -> None:
    run_id, (e1, _, _) = _run(store)
    store.tag_run(run_id, "sweep", "lr-3e-5")
    store.tag_run(run_id, "sweep", "lr-1e-5")
    store.annotate(e1, "sweep")
    assert store.run_tags(run_id) == {"sweep": "lr-1e-5"}
    assert [a.tag for a in store.annotations(e1)] == ["sweep"]


def test_deleting_a_run_deletes_its_annotations(store: Store) -> None:
    run_id, (e1, _, _) = _run(store)
    store.annotate(e1, "x")
    store.tag_run(run_id, "k", "v")
    assert store.delete_run(run_id)
    assert store.annotation_tags() == []
    other, _ = _run(store, "run-b")
    assert store.run_tags(run_id) == {} and store.run_tags(other) == {}


def test_a_reader_cannot_annotate(store: Store) -> None:
    _, (e1, _, _) = _run(store)
    reader = Store(store.url, read_only=True)
    try:
        with pytest.raises(StoreError, match="read-only"):
            reader.annotate(e1, "x")
        with pytest.raises(StoreError, match="read-only"):
            reader.remove_annotation(e1, "x")
    finally:
        reader.close()
    assert store.annotations(e1) == []


def test_a_fork_episode_keeps_its_source_and_replayed_steps(store: Store) -> None:
    _, (source, _, _) = _run(store)
    run_id = store.create_run(spec("fork", kind="fork"), episodes_planned=1)
    started = dataclasses.replace(start("q1"), forked_from=source, fork_step=3)
    steps = [dataclasses.replace(step("q1", 0, i), replayed=i < 3) for i in (1, 2)]
    store.sink(run_id).write(
        IterationBatch(
            started=[started],
            steps=[*steps, step("q1", 0, 3, action="ANSWER", done=True)],
            finished=[finish("q1", 0, "correct", 1.0, 3)],
        )
    )
    (ep,) = store.list_episodes(EpisodeFilter(run_ids=(run_id,))).items
    assert (ep.forked_from, ep.fork_step) == (source, 3)
    detail = store.get_episode(ep.id)
    assert detail is not None
    assert [s.replayed for s in detail.steps] == [True, True, False]
    assert [d.summary.id for d in store.get_episodes([ep.id, source, 10**9])] == sorted(
        [ep.id, source]
    )
