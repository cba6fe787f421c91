"""`rollscope run` and `rollscope demo` refuse bad numbers and devices up front: one line, exit 2,
no run in the store (a device torch lacks, more new tokens than the model's context, NaN or
infinite floats, counts past 32 bits, server flags without the openai policy)."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
import torch

from storage.store import Store
from tests.support.cli import in_process
from tests.support.records import spec

OPENAI = ["--policy", "openai:http://127.0.0.1:9/v1", "--model", "m"]
"""A server nobody answers at: every refusal here comes before it is asked."""


def refused(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    *args: str | Path,
) -> str:
    """The one-line error of `rollscope run ARGS` on an existing store, which keeps no run."""
    db = tmp_path / "store.db"
    assert in_process(monkeypatch, capsys, "migrate", "--store", db)[0] == 0
    code, err = in_process(
        monkeypatch, capsys, "run", "--dataset", "demo", "--limit", "2", *args, "--store", db,
        "--quiet",
    )  # fmt: skip
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert sqlite3.connect(db).execute("SELECT COUNT(*) FROM runs").fetchone() == (0,)
    return " ".join(err.split())


@pytest.mark.parametrize(
    ("device", "message"),
    [
        ("tpu", "unknown device 'tpu'; use --device auto, cpu, cuda or cuda:N"),
        ("cuda:99", "device 'cuda:99' is not available: torch here sees"),
        pytest.param(
            "cuda",
            "device 'cuda' is not available: torch here sees 0 CUDA GPU(s); use --device auto "
            "or cpu",
            marks=pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here"),
        ),
    ],
)
def test_a_device_torch_lacks_is_refused(
    tiny_checkpoint: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    device: str,
    message: str,
) -> None:
    err = refused(
        monkeypatch, capsys, tmp_path, "--policy", f"hf:{tiny_checkpoint}", "--device", device
    )
    assert message in err


@pytest.mark.parametrize("tokens", ["1024", "100000"])
def test_new_tokens_past_the_models_context_are_refused(
    tiny_checkpoint: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tokens: str,
) -> None:
    # The tiny checkpoint's context is 1024 tokens: the prompt needs one of them at least.
    err = refused(
        monkeypatch, capsys, tmp_path, "--policy", f"hf:{tiny_checkpoint}",
        "--max-new-tokens", tokens,
    )  # fmt: skip
    assert f"--max-new-tokens {tokens} does not fit the model's context of 1024 tokens" in err
    assert "give 1023 or fewer" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # Numbers that are not finite: NaN passes every range check and is no JSON.
        (["--query-timeout", "nan"], "--query-timeout must be a finite number, got nan"),
        (["--query-timeout", "inf"], "--query-timeout must be a finite number, got inf"),
        (["--temperature", "nan"], "--temperature must be a finite number, got nan"),
        (["--top-p", "-inf"], "--top-p must be a finite number, got -inf"),
        ([*OPENAI, "--request-timeout", "nan"], "--request-timeout must be a finite number"),
        ([*OPENAI, "--retry-deadline", "nan"], "--retry-deadline must be a finite number"),
        ([*OPENAI, "--retry-deadline", "inf"], "--retry-deadline must be a finite number"),
        # An empty name is no dataset (typer keeps the last --dataset given).
        (["--dataset", " "], "the dataset named is empty"),
        # A server's flags, given to a policy that has no server.
        (["--concurrency", "4"], "error: --concurrency applies to the openai policy only"),
        (
            ["--model", "m", "--request-timeout", "5"],
            "error: --model, --request-timeout apply to the openai policy only",
        ),
        (
            ["--policy", "openai:http://127.0.0.1:9/v1", "--concurrency", "4"],
            "needs the model's name: --model NAME",
        ),
    ],
)
def test_bad_numbers_and_misplaced_flags_are_refused(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    message: str,
) -> None:
    assert message in refused(monkeypatch, capsys, tmp_path, *args)


@pytest.mark.parametrize(
    "flag",
    [
        "--samples", "--step-budget", "--batch-size", "--max-new-tokens", "--threads",
        "--sample-rows", "--max-observation-tokens", "--limit",
    ],
)  # fmt: skip
def test_counts_past_32_bits_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], flag: str
) -> None:
    err = refused(monkeypatch, capsys, tmp_path, flag, "3000000000")
    assert f"{flag} must be at most 2,147,483,647 (32 bits), got 3,000,000,000" in err


def test_episodes_past_32_bits_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    err = refused(monkeypatch, capsys, tmp_path, "--limit", "200", "--samples", "20000000")
    assert "--samples 20,000,000 make 2,420,000,000 episodes, more than the 2,147,483,647" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--samples", "0"], "--samples must be at least 1, got 0"),
        (["--samples", "3000000000"], "--samples must be at most 2,147,483,647"),
        (["--grpo-steps", "3000000000"], "--grpo-steps must be at most 2,147,483,647"),
    ],
)
def test_demo_checks_its_counts_before_training(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    message: str,
) -> None:
    work = tmp_path / "demo"
    code, err = in_process(
        monkeypatch, capsys, "demo", *args, "--dir", work, "--store", tmp_path / "s.db"
    )
    assert code == 2 and message in " ".join(err.split()), err
    assert not work.exists() and not (tmp_path / "s.db").exists()  # nothing trained or made


def test_resume_of_a_run_rollscope_did_not_play_says_how_that_run_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    store_path = tmp_path / "others.db"
    store = Store(f"sqlite:///{store_path}")
    made = {
        "imported": (spec("imported", kind="import"), "verl", "rollscope import PATH --name"),
        "served": (spec("served", kind="env", policy="env-server"), None, "rollscope env-server"),
        "looped": (spec("looped", kind="training"), "recorder", "Recorder(store, run='looped'"),
        "trained": (spec("trained", kind="training"), None, "make_rollout_func(..., resume=True)"),
    }
    for run_spec, source, _ in made.values():
        run = store.create_run(run_spec, episodes_planned=None, source_format=source)
        store.set_run_status(run, "failed")
    store.close()
    for name, (_, _, said) in made.items():
        code, err = in_process(monkeypatch, capsys, "run", "--resume", name, "--store", store_path)
        assert code == 2 and f"run {name!r} was " in err and said in err, err


def test_resume_refuses_a_questions_file_that_changed_under_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from tests.support.benchmark import make_benchmark

    questions, db_dir = make_benchmark(tmp_path)
    db = tmp_path / "store.db"
    play = ("run", "--questions", questions, "--db-dir", db_dir, "--limit", "2", "--quiet")
    code, err = in_process(monkeypatch, capsys, *play, "--name", "r", "--store", db)
    assert code == 0, err
    with sqlite3.connect(db) as conn:  # as a crash leaves it: resumable
        conn.execute("UPDATE runs SET status = 'failed' WHERE id = 1")
    store = Store(f"sqlite:///{db}")
    try:
        items = json.loads(questions.read_text())
        original = questions.read_text()
        items[1]["query"] = items[1]["query"] + " LIMIT 1"  # the second played question
        questions.write_text(json.dumps(items))
        resume = ("run", "--resume", "r", "--store", db, "--quiet")
        code, err = in_process(monkeypatch, capsys, *resume)
        assert code == 2
        assert (
            f"run 'r' cannot be resumed: question {items[1]['id']!r}, which it played, reads "
            "another database, question or gold query there now"
        ) in " ".join(err.split())
        assert store.get_run(1).status == "failed"  # type: ignore[union-attr]
        questions.write_text(original)
        code, err = in_process(monkeypatch, capsys, *resume)
        assert code == 0, err
        assert store.get_run(1).status == "completed"  # type: ignore[union-attr]
    finally:
        store.close()


def _stopped_before_its_last_question(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[Path, Path, list[dict[str, Any]]]:
    """Run `r` played on a small benchmark, as a crash before its last question leaves it:
    its questions file, its store, and the file's questions."""
    import json

    from tests.support.benchmark import make_benchmark

    questions, db_dir = make_benchmark(tmp_path)
    db = tmp_path / "store.db"
    play = ("run", "--questions", questions, "--db-dir", db_dir, "--quiet")
    code, err = in_process(monkeypatch, capsys, *play, "--name", "r", "--store", db)
    assert code == 0, err
    items = json.loads(questions.read_text())
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA foreign_keys = ON")  # the episode's steps go with it
        conn.execute("DELETE FROM episodes WHERE question_id = ?", (items[-1]["id"],))
        conn.execute("UPDATE runs SET status = 'failed' WHERE id = 1")
    return questions, db, items


def test_resume_refuses_a_questions_file_that_lost_a_question_the_run_has_yet_to_play(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Resumed, the run plays its questions file's questions again: one gone that the run had
    # yet to play ended the run `completed` without it, fewer episodes than it planned.
    import json

    questions, db, items = _stopped_before_its_last_question(tmp_path, monkeypatch, capsys)
    original = questions.read_text()
    questions.write_text(json.dumps(items[:-1]))
    resume = ("run", "--resume", "r", "--store", db, "--quiet")
    code, err = in_process(monkeypatch, capsys, *resume)
    assert code == 2
    assert (
        f"run 'r' cannot be resumed: it planned {len(items)} episodes and its questions "
        f"({questions}) give {len(items) - 1} now: the file changed since"
    ) in " ".join(err.split())
    store = Store(f"sqlite:///{db}")
    try:
        assert store.get_run(1).status == "failed"  # type: ignore[union-attr]
        questions.write_text(original)
        code, err = in_process(monkeypatch, capsys, *resume)
        assert code == 0, err
        assert store.get_run(1).status == "completed"  # type: ignore[union-attr]
        with closing(sqlite3.connect(db)) as conn:
            played = conn.execute("SELECT COUNT(DISTINCT question_id) FROM episodes").fetchone()
        assert played == (len(items),)
    finally:
        store.close()


def test_resume_refuses_a_checkpoint_folder_holding_another_model(
    tmp_path: Path,
    tiny_checkpoint: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A training job saving into the folder the run plays from: the same path, other weights.
    import shutil

    from transformers import AutoModelForCausalLM

    checkpoint = tmp_path / "checkpoint-latest"
    shutil.copytree(tiny_checkpoint, checkpoint)
    db = tmp_path / "store.db"
    play = ("run", "--policy", f"hf:{checkpoint}", "--dataset", "demo", "--limit", "1")
    code, err = in_process(
        monkeypatch, capsys, *play, "--step-budget", "1", "--max-new-tokens", "4",
        "--name", "r", "--store", db, "--quiet",
    )  # fmt: skip
    assert code == 0, err
    with sqlite3.connect(db) as conn:  # as a crash leaves it: resumable
        conn.execute("UPDATE runs SET status = 'failed' WHERE id = 1")
        (before,) = conn.execute("SELECT checkpoint_fingerprint FROM runs").fetchone()
    model = AutoModelForCausalLM.from_pretrained(checkpoint)
    with torch.no_grad():
        next(model.parameters()).add_(0.5)
    model.save_pretrained(checkpoint)
    code, err = in_process(monkeypatch, capsys, "run", "--resume", "r", "--store", db, "--quiet")
    assert code == 2
    said = " ".join(err.split())
    assert f"run 'r' cannot be resumed: its checkpoint {checkpoint} holds another model" in said
    assert f"the run played {before}" in said
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT status, checkpoint_fingerprint FROM runs").fetchone() == (
            "failed",
            before,
        )


def test_run_id_of_a_completed_run_points_nowhere_it_cannot_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "store.db"
    play = ("run", "--dataset", "demo", "--limit", "1", "--name", "done", "--quiet")
    assert in_process(monkeypatch, capsys, *play, "--store", db)[0] == 0
    code, err = in_process(monkeypatch, capsys, "run", "--run-id", "1", "--store", db)
    assert code == 2
    assert err.strip() == "error: run 1 is completed, not queued"  # --resume would refuse it


def test_resume_of_a_run_whose_questions_moved_says_where_they_were(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.support.benchmark import make_benchmark

    questions, db_dir = make_benchmark(tmp_path / "bench")
    db = tmp_path / "store.db"
    play = ("run", "--questions", questions, "--db-dir", db_dir, "--limit", "1", "--quiet")
    assert in_process(monkeypatch, capsys, *play, "--name", "r", "--store", db)[0] == 0
    with sqlite3.connect(db) as conn:  # as a crash leaves it: resumable
        conn.execute("UPDATE runs SET status = 'failed' WHERE id = 1")
    (tmp_path / "bench").rename(tmp_path / "moved")
    for command in (("run", "--resume", "r"), ("fork", "1", "--step", "1", "--policy", "random")):
        code, err = in_process(monkeypatch, capsys, *command, "--store", db)
        assert code == 2, command
        said = " ".join(err.split())
        assert f"run 'r' was played on the questions file {questions}, which is not" in said
        assert "--questions" not in said  # neither takes one


def test_resume_takes_an_unchanged_file_whose_text_the_store_cleaned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The store keeps NUL as U+FFFD: the file's question is the same, though not equal.
    import json

    from tests.support.benchmark import make_benchmark

    questions, db_dir = make_benchmark(tmp_path)
    items = json.loads(questions.read_text())
    items[0]["question"] += "\u0000"
    questions.write_text(json.dumps(items))
    db = tmp_path / "store.db"
    play = ("run", "--questions", questions, "--db-dir", db_dir, "--limit", "2", "--quiet")
    assert in_process(monkeypatch, capsys, *play, "--name", "r", "--store", db)[0] == 0
    with sqlite3.connect(db) as conn:  # as a crash leaves it: one episode unfinished
        conn.execute("UPDATE runs SET status = 'failed' WHERE id = 1")
        conn.execute("UPDATE episodes SET outcome = NULL WHERE id = 2")
    code, err = in_process(monkeypatch, capsys, "run", "--resume", "r", "--store", db, "--quiet")
    assert code == 0, err


@pytest.mark.parametrize("change", ["swapped", "edited"])
def test_resume_refuses_a_question_it_has_yet_to_play_swapped_or_edited(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    change: str,
) -> None:
    # As many questions as before, so the plan's count is the run's: its questions' digest,
    # kept on the spec, tells the file gives others.
    import json

    questions, db, items = _stopped_before_its_last_question(tmp_path, monkeypatch, capsys)
    unplayed = items[-1]["id"]
    with closing(sqlite3.connect(db)) as conn:
        [(digest,)] = conn.execute("SELECT json_extract(spec, '$.questions_sha256') FROM runs")
    assert isinstance(digest, str) and len(digest) == 64
    original = questions.read_text()
    other = dict(items[-1])
    if change == "swapped":
        other["id"] = f"{unplayed}-new"
    else:
        other["question"] = other["question"] + " Answer in words."
    questions.write_text(json.dumps([*items[:-1], other]))
    resume = ("run", "--resume", "r", "--store", db, "--quiet")
    code, err = in_process(monkeypatch, capsys, *resume)
    assert code == 2
    assert (
        f"run 'r' cannot be resumed: its questions ({questions}) are not the ones it planned "
        "to play (the file changed since"
    ) in " ".join(err.split())
    with closing(sqlite3.connect(db)) as conn:
        assert conn.execute("SELECT status FROM runs").fetchall() == [("failed",)]
        assert conn.execute("SELECT count(*) FROM episodes WHERE question_id LIKE ?",
                            (f"{unplayed}%",)).fetchone() == (0,)  # fmt: skip
    questions.write_text(original)
    code, err = in_process(monkeypatch, capsys, *resume)
    assert code == 0, err
    with closing(sqlite3.connect(db)) as conn:
        assert conn.execute("SELECT status FROM runs").fetchall() == [("completed",)]
