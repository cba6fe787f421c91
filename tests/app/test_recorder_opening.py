"""Opening a Recorder's run: who else records it, and what the refusal offers. Every process
of a multi-GPU trainer runs the loop's `Recorder(...)` at once; the one that comes second is
refused with a RecorderError naming the process that records it, whichever moment it looked."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from app.recorder import Recorder, RecorderError
from storage.read_models import RunSummary
from storage.store import Store

TURNS = [{"role": "user", "content": "Q?"}, {"role": "assistant", "content": "ANSWER 5"}]


def _url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 's.db'}"


@contextmanager
def _recording_elsewhere(url: str, run: str, *, resume: bool = False) -> Iterator[int]:
    """Another process recording `run` for the block; yields its pid."""
    script = (
        "import sys\n"
        "from app.recorder import Recorder\n"
        f"with Recorder({url!r}, run={run!r}, resume={resume}):\n"
        "    print('open', flush=True)\n"
        "    sys.stdin.readline()\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        assert child.stdout.readline() == "open\n"
        yield child.pid
    finally:
        child.stdin.close()
        assert child.wait(timeout=60) == 0


def _looked_up_before(
    store: Store, monkeypatch: pytest.MonkeyPatch, seen: RunSummary | None
) -> None:
    """The store's first look for the run finds `seen`: what it held a moment before the other
    process made (or took over) the run."""
    looks = [seen]
    real = store.run_named
    monkeypatch.setattr(store, "run_named", lambda name: looks.pop() if looks else real(name))


def test_a_run_made_by_another_process_since_it_was_looked_up_is_refused_as_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(_url(tmp_path))
    with _recording_elsewhere(_url(tmp_path), "grpo-sql") as pid:
        _looked_up_before(store, monkeypatch, None)  # both looked before either made it
        with pytest.raises(RecorderError) as refused:
            Recorder(store, run="grpo-sql", kind="training")
    assert str(refused.value).startswith(
        f"run 'grpo-sql' is being recorded now by another process (pid {pid} on "
    )
    assert [r.name for r in store.list_runs()] == ["grpo-sql"]


def test_a_run_another_process_resumed_since_it_was_looked_up_is_refused_as_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(_url(tmp_path))
    with Recorder(store, run="grpo-sql") as rec:
        rec.episode(question="Q?", turns=TURNS, reward=1.0)
        rec.close("failed", "RuntimeError: the trainer died")
    failed = store.run_named("grpo-sql")
    with _recording_elsewhere(_url(tmp_path), "grpo-sql", resume=True) as pid:
        _looked_up_before(store, monkeypatch, failed)
        with pytest.raises(RecorderError) as refused:
            Recorder(store, run="grpo-sql", resume=True)
    assert str(refused.value).startswith(
        f"run 'grpo-sql' is being recorded now by another process (pid {pid} on "
    )


def test_a_second_recorder_in_the_same_process_is_told_so(tmp_path: Path) -> None:
    with Recorder(_url(tmp_path), run="dup") as first:
        with pytest.raises(RecorderError) as refused:
            Recorder(_url(tmp_path), run="dup", resume=True)
        first.episode(question="Q?", turns=TURNS, reward=1.0)
    said = str(refused.value)
    assert said.startswith("run 'dup' is being recorded now by another Recorder in this process")
    assert "another process" not in said


def test_resume_is_offered_only_where_it_would_be_taken(tmp_path: Path) -> None:
    with Recorder(_url(tmp_path), run="done") as rec:
        rec.episode(question="Q?", turns=TURNS, reward=1.0)
    with pytest.raises(RecorderError) as taken:
        Recorder(_url(tmp_path), run="done")
    assert str(taken.value) == (
        "a run named 'done' already exists in this store (completed); choose another name"
    )
    with pytest.raises(RecorderError) as resumed:
        Recorder(_url(tmp_path), run="done", resume=True)
    assert str(resumed.value) == (
        "run 'done' is already completed, and records no more; choose another name"
    )
    # A failed run goes on: resume=True is offered, and taken.
    with pytest.raises(RuntimeError), Recorder(_url(tmp_path), run="broke"):
        raise RuntimeError("the trainer died")
    with pytest.raises(RecorderError, match=re.escape("or pass resume=True to record more")):
        Recorder(_url(tmp_path), run="broke")
    Recorder(_url(tmp_path), run="broke", resume=True).close()


def test_a_loop_resumed_at_a_step_marks_the_episodes_it_plays_again(tmp_path: Path) -> None:
    from storage.training import played_again, training_steps

    store = Store(_url(tmp_path))
    rec = Recorder(store, run="grpo", kind="training")
    for step in range(3):
        rec.episode(question="Q?", turns=TURNS, reward=0.0, step=step)
    rec.close("failed", "RuntimeError: node lost")
    with Recorder(store, run="grpo", kind="training", resume=True, resumed_at_step=1) as rec:
        for step in (1, 2):
            rec.episode(question="Q?", turns=TURNS, reward=1.0, step=step)
    run_id = rec.run_id
    assert [(s.train_step, s.episodes, s.reward) for s in training_steps(store, run_id)] == [
        (0, 1, 0.0), (1, 1, 1.0), (2, 1, 1.0)
    ]  # fmt: skip
    assert played_again(store, run_id).by_step == {1: 1, 2: 1}


@pytest.mark.parametrize(
    ("kw", "said"),
    [
        ({"resumed_at_step": 3}, "give it with resume=True and kind='training'"),
        ({"resumed_at_step": 3, "resume": True}, "give it with resume=True and kind='training'"),
        ({"resumed_at_step": "3", "resume": True, "kind": "training"}, "not a whole number"),
    ],
)
def test_resumed_at_step_alone_or_not_a_number_is_refused(
    tmp_path: Path, kw: dict[str, object], said: str
) -> None:
    with pytest.raises(RecorderError, match=re.escape(said)):
        Recorder(_url(tmp_path), run="grpo", **kw)  # type: ignore[arg-type]
    assert not (tmp_path / "s.db").exists() or not Store(_url(tmp_path)).list_runs()


def test_a_loops_evaluation_run_names_the_run_it_evaluates(tmp_path: Path) -> None:
    from rollout_core.records import RunSpec

    store = Store(_url(tmp_path))
    with Recorder(store, run="grpo-eval", kind="training", evaluation_of=" grpo ") as rec:
        rec.episode(question="Q?", turns=TURNS, reward=1.0, step=100)
    found = store.get_run(rec.run_id)
    assert found is not None and RunSpec.from_stored(found.spec).evaluation_of == "grpo"


@pytest.mark.parametrize(
    ("kw", "said"),
    [
        ({"evaluation_of": "grpo"}, "give it with kind='training'"),
        ({"evaluation_of": 7, "kind": "training"}, "evaluation_of is 7"),
        ({"evaluation_of": "  ", "kind": "training"}, "evaluation_of: the run name is empty"),
    ],
)
def test_an_evaluation_of_no_training_run_is_refused(
    tmp_path: Path, kw: dict[str, object], said: str
) -> None:
    with pytest.raises(RecorderError, match=re.escape(said)):
        Recorder(_url(tmp_path), run="grpo-eval", **kw)  # type: ignore[arg-type]
    assert not (tmp_path / "s.db").exists() or not Store(_url(tmp_path)).list_runs()
