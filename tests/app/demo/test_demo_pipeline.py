"""`rollscope demo` in small: oracle chats -> tiny checkpoints -> rollouts that improve."""

from __future__ import annotations

import io
import sqlite3
import subprocess
import sys
import textwrap
import warnings
from contextlib import closing, redirect_stderr, redirect_stdout
from typing import NamedTuple

import pytest

from app.demo.grpo import GrpoSettings, probe_questions
from app.demo.pipeline import DemoReport, DemoSettings, build_demo, oracle_conversations
from rollout_core.datasets import load_named_dataset
from rollout_core.records import RunSpec
from storage.store import Store
from storage.training import training_questions, training_steps

pytestmark = pytest.mark.slow

SETTINGS = dict(
    steps=150,
    save_at=(0, 40, 150),
    train_batch_size=8,
    hidden=64,
    layers=2,
    samples=1,
    temperature=0.0,
    step_budget=3,
    max_new_tokens=32,
    grpo=GrpoSettings(
        steps=2,
        questions=4,
        prompts_per_step=2,
        num_generations=2,
        probe_samples=2,
        max_new_tokens=16,
    ),
)


class Built(NamedTuple):
    store: Store
    settings: DemoSettings
    report: DemoReport
    printed: str
    """What the build wrote to stdout and stderr besides its log lines."""
    warned: list[str]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    work = tmp_path_factory.mktemp("demo")
    store = Store(str(work / "store.db"))
    settings = DemoSettings(work_dir=work, **SETTINGS)  # type: ignore[arg-type]
    printed = io.StringIO()
    with (
        redirect_stdout(printed),
        redirect_stderr(printed),
        warnings.catch_warnings(record=True) as caught,
    ):
        warnings.simplefilter("always")
        report = build_demo(store, settings, log=lambda _: None)
    return Built(store, settings, report, printed.getvalue(), [str(w.message) for w in caught])


@pytest.fixture(scope="module")
def demo(built: Built) -> tuple[Store, DemoSettings, DemoReport]:
    return built.store, built.settings, built.report


def test_the_build_prints_nothing_but_its_own_lines(built: Built) -> None:
    # `make run` starts with this build: the trainer's metrics dict per GRPO step, a
    # progress bar per checkpoint load and deprecation warnings buried the demo's own lines.
    assert built.printed == ""
    assert [w for w in built.warned if "deprecated" in w] == []


def test_oracle_conversations_are_whole_chats() -> None:
    train = load_named_dataset("demo:train")
    chats = oracle_conversations(train)
    assert len(chats) == 2 * len(train.questions)
    for chat in chats:
        assert chat[0]["role"] == "system" and chat[-1]["role"] == "assistant"
        assert chat[-1]["content"].startswith("ANSWER ")
    test_questions = {q.question for q in load_named_dataset("demo:test").questions}
    assert not any(chat[1]["content"].split("\n")[0][10:] in test_questions for chat in chats)


def test_checkpoints_load_offline_with_their_chat_template(
    demo: tuple[Store, DemoSettings, DemoReport],
) -> None:
    _, _, report = demo
    assert [p.name for p in report.checkpoints] == [
        "checkpoint-0",
        "checkpoint-40",
        "checkpoint-150",
    ]
    script = textwrap.dedent(
        f"""
        from transformers import AutoModelForCausalLM, AutoTokenizer
        path = {str(report.checkpoints[-1])!r}
        tok = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path)
        text = tok.apply_chat_template(
            [{{"role": "user", "content": "Question: ?"}}], add_generation_prompt=True,
            tokenize=False,
        )
        assert text.endswith("assistant\\n"), text
        print(type(model).__name__)
        """
    )
    env = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(report.checkpoints[0].parent / "hf-home")}
    res = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    assert res.returncode == 0, res.stderr
    assert "LlamaForCausalLM" in res.stdout


def test_training_makes_valid_actions(demo: tuple[Store, DemoSettings, DemoReport]) -> None:
    store, _, _ = demo
    runs = {r.name: r for r in store.list_runs()}
    train_runs = {
        "checkpoint-40-train",
        "checkpoint-150-train",
        "grpo-checkpoint-150",
        "grpo-checkpoint-150-trl-log",  # matched to the train split's questions
    }
    assert (
        set(runs)
        == {"checkpoint-0", "checkpoint-40", "checkpoint-150", "oracle", "random"} | train_runs
    )
    assert all(r.status == "completed" for r in runs.values())
    assert {name for name, r in runs.items() if r.dataset == "demo:train"} == train_runs
    assert runs["checkpoint-150-train"].episodes_finished == len(
        load_named_dataset("demo:train").questions
    )
    untrained = runs["checkpoint-0"].parse_failure_rate
    trained = runs["checkpoint-150"].parse_failure_rate
    assert untrained is not None and trained is not None
    assert untrained > 0.9 and trained < 0.3, (untrained, trained)
    assert runs["oracle"].accuracy == 1.0
    assert (
        runs["checkpoint-150"].checkpoint_fingerprint != runs["checkpoint-0"].checkpoint_fingerprint
    )


def test_the_last_checkpoint_is_trained_with_grpo_on_the_train_split(
    demo: tuple[Store, DemoSettings, DemoReport],
) -> None:
    store, _, report = demo
    run = store.find_run("grpo-checkpoint-150")
    assert run is not None and run.kind == "training" and run.dataset == "demo:train"
    assert "grpo-checkpoint-150" in report.runs
    # 2 GRPO steps x 2 prompts x 2 episodes each, every episode tagged with its step and group
    assert [(s.train_step, s.episodes, s.groups) for s in training_steps(store, run.id)] == [
        (0, 4, 2),
        (1, 4, 2),
    ]


def test_trls_log_of_the_training_run_imports_as_the_same_episodes(
    demo: tuple[Store, DemoSettings, DemoReport],
) -> None:
    # The trainer logs its rollouts itself (log_completions); imported, they read as the
    # episodes rollscope recorded: the same questions, steps and answers, a step later (TRL
    # numbers a log by the optimizer step its rollouts led to).
    store, settings, report = demo
    recorded = store.find_run("grpo-checkpoint-150")
    imported = store.find_run("grpo-checkpoint-150-trl-log")
    assert recorded is not None and imported is not None
    assert (imported.kind, imported.source_format, imported.status) == (
        "import",
        "trl",
        "completed",
    )
    assert "grpo-checkpoint-150-trl-log" in report.runs

    def episodes(run_id: int, later: int) -> list[tuple[int, str, int, bool]]:
        with closing(sqlite3.connect(settings.work_dir / "store.db")) as conn:
            found = conn.execute(
                "SELECT train_step, question_id, steps, outcome = 'correct' FROM episodes "
                "WHERE run_id = ?",
                (run_id,),
            ).fetchall()
        return sorted((step + later, q, n, bool(c)) for step, q, n, c in found)

    assert episodes(imported.id, 0) == episodes(recorded.id, 1)
    assert max(n for _, _, n, _ in episodes(imported.id, 0)) > 1  # its turns, split


def test_the_training_run_plays_the_questions_its_checkpoint_solves_closest_to_half_the_time(
    demo: tuple[Store, DemoSettings, DemoReport],
) -> None:
    # On a question the checkpoint never (or always) solves, every GRPO group is all wrong (all
    # right) and its advantages are zero or shaping noise: the run trained on such questions
    # showed no learning.
    store, settings, report = demo
    assert settings.grpo is not None
    run = store.find_run("grpo-checkpoint-150")
    assert run is not None
    picked = RunSpec.from_stored(run.spec).question_ids
    assert picked is not None and len(set(picked)) == settings.grpo.questions
    played = {q.question_id for q in training_questions(store, run.id)}
    assert played and played <= set(picked)
    found = probe_questions(report.checkpoints[-1], settings.grpo, settings.threads)
    distance = {q.question_id: abs(q.rate - 0.5) for q in found}
    others = set(distance) - set(picked)
    assert max(distance[q] for q in picked) <= min(distance[q] for q in others)


def test_second_build_reuses_everything(demo: tuple[Store, DemoSettings, DemoReport]) -> None:
    store, settings, _ = demo
    again = build_demo(store, settings, log=lambda _: None)
    assert again.runs == []
    assert sorted(again.reused) == sorted(r.name for r in store.list_runs())
    assert again.seconds["total"] < 10


def test_trls_log_is_followed_from_before_the_training_so_the_recording_is_the_newer_run(
    demo: tuple[Store, DemoSettings, DemoReport],
) -> None:
    # The pages open on the newest training run: the recording, which holds what the log
    # lacks (token confidence). The log's run began first, followed as TRL wrote it.
    store, _, report = demo
    recorded = store.find_run("grpo-checkpoint-150")
    imported = store.find_run("grpo-checkpoint-150-trl-log")
    assert recorded is not None and imported is not None
    assert imported.id < recorded.id and imported.created_at <= recorded.created_at
    training = [r.name for r in store.list_runs() if r.is_training]
    assert training[0] == "grpo-checkpoint-150"
    assert report.runs[-2:] == ["grpo-checkpoint-150", "grpo-checkpoint-150-trl-log"]


def test_a_users_runs_of_the_demos_names_are_neither_reused_nor_replaced(
    demo: tuple[Store, DemoSettings, DemoReport], tmp_path_factory: pytest.TempPathFactory
) -> None:
    # `rollscope run` and `make run` share the default store: a user's own `oracle` (on the
    # train split) or an unfinished `checkpoint-150` of another policy is not the demo's.
    from app.demo.pipeline import DemoClash
    from tests.support.records import play, spec
    from tests.support.stores import write_run

    _, settings, _ = demo
    store = Store(str(tmp_path_factory.mktemp("users") / "store.db"))
    try:
        write_run(store, spec("oracle", dataset="demo:train"), [play("q1", 0, "correct", 1, 1)])
        mine = spec("checkpoint-150", policy="openai:http://127.0.0.1:9/v1")
        write_run(store, mine, [play("q1", 0, "wrong", 0, 1)], status="failed")
        with pytest.raises(DemoClash, match="a run named 'checkpoint-150' that the demo did not"):
            build_demo(store, settings, log=lambda _: None)
        kept = {r.name: (r.status, r.episodes_finished) for r in store.list_runs()}
        assert kept == {"oracle": ("completed", 1), "checkpoint-150": ("failed", 1)}
    finally:
        store.close()
