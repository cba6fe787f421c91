"""`rollscope compare`: runs against a baseline on the questions they share, with the figures
worked out here by hand (a question counts once, its success rate the share of its samples
right; solved at half or more), in the terminal and as JSON; bad references fail in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rollout_core.records import IterationBatch, Outcome
from storage.store import Store
from tests.support.cli import rollscope, rollscope_here
from tests.support.records import finish, spec, start, step

# (question, outcomes of its samples); ckpt-2000 also plays q6, which ckpt-1000 did not.
CKPT_1000: dict[str, list[Outcome]] = {f"q{i}": ["correct" if i < 2 else "wrong"] for i in range(6)}
CKPT_2000: dict[str, list[Outcome]] = {
    "q0": ["wrong", "wrong"],
    "q1": ["correct", "correct"],
    "q2": ["correct", "wrong"],  # half right: solved
    "q3": ["correct", "correct"],
    "q4": ["wrong", "wrong"],
    "q5": ["wrong", "wrong"],
    "q6": ["correct", "correct"],
}


def _episode(
    q: str, sample: int, outcome: Outcome, train_step: int | None = None
) -> IterationBatch:
    reward = 1.0 if outcome == "correct" else 0.0
    return IterationBatch(
        started=[start(q, sample, train_step=train_step)],
        steps=[step(q, sample, 1, action="ANSWER", done=True, reward=reward)],
        finished=[finish(q, sample, outcome, reward, 1)],
    )


def _run(store: Store, name: str, played: dict[str, list[Outcome]], **kw: object) -> None:
    run = store.create_run(spec(name, **kw), episodes_planned=None)
    sink = store.sink(run)
    for q, outcomes in played.items():
        for sample, outcome in enumerate(outcomes):
            sink.write(_episode(q, sample, outcome))


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    path = tmp_path / "runs.db"
    store = Store(f"sqlite:///{path}")
    try:
        _run(store, "ckpt-1000", CKPT_1000)
        _run(store, "ckpt-2000", CKPT_2000)
        _run(store, "other-set", {"z1": ["correct"]})
        training = store.create_run(spec("grpo", kind="training"), episodes_planned=None)
        sink = store.sink(training)
        # Step 10 answers q0 and q1 wrong; step 20 answers both right, twice each.
        steps: list[tuple[int, Outcome]] = [(10, "wrong"), (20, "correct")]
        for train_step, outcome in steps:
            for q in ("q0", "q1"):
                for sample in (0, 1):
                    index = sample + (2 if train_step == 20 else 0)
                    sink.write(_episode(q, index, outcome, train_step=train_step))
    finally:
        store.close()
    return path


def test_the_figures_are_per_question_over_the_shared_questions(store_path: Path) -> None:
    done = rollscope("compare", "ckpt-1000", "ckpt-2000", "--store", store_path, "--json")
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["baseline"] == {"run": "ckpt-1000", "id": 1, "train_step": None}
    (vs,) = got["runs"]
    assert (vs["run"], vs["id"], vs["train_step"], vs["questions"]) == ("ckpt-2000", 2, None, 6)
    assert vs["baseline_accuracy"] == pytest.approx(2 / 6)
    assert vs["accuracy"] == pytest.approx(2.5 / 6)  # q0..q5: 0, 1, 0.5, 1, 0, 0
    assert vs["difference"] == pytest.approx(0.5 / 6)
    low, high = vs["interval_95"]
    assert -1.0 <= low <= vs["difference"] <= high <= 1.0 and low < high
    assert vs["solved_not_by_baseline"] == ["q2", "q3"]
    assert vs["solved_by_baseline_only"] == ["q0"]


def test_the_terminal_report_says_the_same(store_path: Path) -> None:
    done = rollscope("compare", "1", "ckpt-2000", "--store", store_path)
    assert done.returncode == 0, done.stderr
    lines = [" ".join(line.split()) for line in done.stdout.splitlines()]
    at = lines.index("ckpt-2000 (#2)")
    assert lines[0] == "baseline: ckpt-1000 (#1)"
    assert lines[at + 1 : at + 3] == [
        "questions both played 6",
        "accuracy 41.7%, the baseline's 33.3%",
    ]
    # The interval's bounds are the bootstrap's (checked against the figure in JSON above).
    assert lines[at + 3].startswith("difference +8.3 pts, 95% interval ")
    assert lines[at + 4 : at + 6] == [
        "solves, baseline not 2: q2, q3",
        "baseline solves, not it 1: q0",
    ]


def test_training_steps_of_a_run_compare_as_checkpoints(store_path: Path) -> None:
    done = rollscope("compare", "grpo@10", "4@20", "--store", store_path, "--json")
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["baseline"] == {"run": "grpo", "id": 4, "train_step": 10}
    (vs,) = got["runs"]
    assert (vs["train_step"], vs["questions"], vs["difference"]) == (20, 2, 1.0)
    assert vs["interval_95"] is None  # two questions: too few for an interval
    assert vs["solved_not_by_baseline"] == ["q0", "q1"]
    report = rollscope("compare", "grpo@10", "grpo@20", "--store", store_path)
    assert "grpo (#4) @ step 20" in report.stdout
    assert "+100.0 pts, too few questions for an interval" in " ".join(report.stdout.split())


@pytest.mark.parametrize(
    ("refs", "message"),
    [
        (["ckpt-1000", "nope"], "no run 'nope' in the store"),
        (["ckpt-1000", "grpo@30"], "run 'grpo' has no finished episode at training step 30"),
        (["ckpt-1000", "ckpt-2000@5"], "run 'ckpt-2000' is a batch run: it has no training steps"),
        (["ckpt-1000", "1"], "ckpt-1000 (#1) is named twice"),
        (["ckpt-1000", "other-set"], "other-set (#3) and the baseline ckpt-1000 (#1) share no"),
    ],
)
def test_bad_references_fail_in_one_line(
    store_path: Path,
    refs: list[str],
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    done = rollscope_here(monkeypatch, capsys, "compare", *refs, "--store", store_path)
    assert done.returncode == 2
    assert done.stdout == ""
    assert message in " ".join(done.stderr.split())
