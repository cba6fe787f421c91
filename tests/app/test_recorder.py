"""The Recorder, around a loop of one's own in the shape of the original `rollout_func`: it
plays each prompt's episode against the environment itself and hands the conversation over."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from app.recorder import Recorder, RecorderError
from rollout_core.environment import SQLEnvironment
from rollout_core.parse import parse_model_output
from storage.store import Store
from tests.app.importers.conftest import rows
from tests.support.benchmark import QUESTIONS, make_benchmark

GROUP = 2
_ANSWER = ({"role": "user", "content": "Q?"}, {"role": "assistant", "content": "ANSWER 5"})


def _nested(levels: int) -> list[Any]:
    """Lists `levels` deep."""
    value: list[Any] = []
    for _ in range(levels - 1):
        value = [value]
    return value


def scripted_model(question: str, sample: int, turn: int) -> str:
    """Stands in for `model.generate`: looks, queries, then answers (right on even samples)."""
    gold = next(sql for _, q, sql in QUESTIONS if q == question)
    if turn == 0:
        return "DESCRIBE singer"
    if turn == 1:
        return f"QUERY: {gold}"
    return "ANSWER: 5" if sample % 2 == 0 else "ANSWER: 4"


def rollout_func(
    prompts: list[str], env: SQLEnvironment, rec: Recorder, step: int
) -> list[dict[str, Any]]:
    """The original loop's shape: one episode per prompt, the caller's own environment calls,
    a reward per episode; the Recorder is the one line it gains."""
    results = []
    for i, question in enumerate(prompts):
        qid = next(q for q, text, _ in QUESTIONS if text == question)
        obs = env.reset(question_id=qid)
        messages: list[dict[str, str]] = [{"role": "user", "content": obs.question}]
        while not obs.done:
            text = scripted_model(question, i, env.state.step_count)
            obs = env.step(parse_model_output(text))
            messages.append({"role": "assistant", "content": text})
            messages.append({"role": "user", "content": obs.error or obs.result})
        correct = bool(env.state.answer_correct)
        reward = env.state.total_reward
        rec.episode(
            question=question, question_id=qid, turns=messages, reward=reward,
            rewards={"correct": float(correct), "shaped": reward}, correct=correct,
            step=step,
        )  # fmt: skip
        results.append({"content": messages, "correct": correct, "reward": reward})
    return results


@pytest.fixture
def env(tmp_path: Path) -> SQLEnvironment:
    questions, db_dir = make_benchmark(tmp_path / "bench")
    return SQLEnvironment(questions, db_dir, step_budget=4)


def test_a_loop_of_ones_own_is_recorded_as_a_training_run(
    env: SQLEnvironment, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    count_q = QUESTIONS[0][1]
    with Recorder(url, run="own-loop", kind="training", model="ckpt-9") as rec:
        for step in range(3):
            rollout_func([count_q] * GROUP, env, rec, step)
        assert rec.store.get_run(rec.run_id).status == "running"  # type: ignore[union-attr]
    store = Store(url)
    try:
        run = store.find_run("own-loop")
        assert run is not None
        assert (run.kind, run.status, run.source_format, run.checkpoint) == (
            "training", "completed", "recorder", "ckpt-9",
        )  # fmt: skip
        # A Recorder plans no number of episodes: it takes those the loop gives.
        assert (run.episodes_finished, run.episodes_planned, run.correct) == (6, None, 3)
        assert rows(
            store,
            "SELECT train_step, group_index, count(*), sum(outcome = 'correct') FROM episodes "
            "GROUP BY 1, 2 ORDER BY 1",
        ) == [(0, 0, 2, 1), (1, 1, 2, 1), (2, 2, 2, 1)]
        first = store.get_episode(1)
        assert first is not None
        assert [(s.action, s.argument) for s in first.steps] == [
            ("DESCRIBE", "singer"),
            ("QUERY", QUESTIONS[0][2]),
            ("ANSWER", "5"),
        ]
        # A step's observation is the reply after it: the last message of the next prompt.
        assert first.steps[1].observation == first.steps[2].prompt[-1]["content"]
        assert "5" in first.steps[1].observation
        assert first.summary.failure_class == "correct"
        assert rows(store, "SELECT name, sum(value) FROM episode_rewards GROUP BY 1") == [
            ("correct", 3.0),
            ("shaped", pytest.approx(run.mean_reward * 6)),
        ]
    finally:
        store.close()


def test_a_failing_loop_fails_the_run_and_keeps_what_it_recorded(
    env: SQLEnvironment, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with (
        pytest.raises(RuntimeError, match="reward server down"),
        Recorder(url, run="breaks") as rec,
    ):
        rollout_func([QUESTIONS[0][1]], env, rec, 0)
        raise RuntimeError("reward server down")
    store = Store(url)
    try:
        run = store.find_run("breaks")
        assert run is not None
        assert (run.status, run.error, run.episodes_finished) == (
            "failed", "RuntimeError: reward server down", 1,
        )  # fmt: skip
        with pytest.raises(RecorderError, match="already exists"):
            Recorder(store, run="breaks")
        with Recorder(store, run="breaks", resume=True) as rec:
            rollout_func([QUESTIONS[0][1]], env, rec, 1)
        assert store.find_run("breaks").episodes_finished == 2  # type: ignore[union-attr]
    finally:
        store.close()


def test_turns_without_an_assistant_message_are_refused(tmp_path: Path) -> None:
    rec = Recorder(f"sqlite:///{tmp_path / 's.db'}", run="r")
    with pytest.raises(RecorderError, match="no assistant message"):
        rec.episode(question="Q?", turns=[{"role": "user", "content": "Q?"}], reward=0.0)
    rec.close()


def test_a_reward_must_be_a_finite_number(tmp_path: Path) -> None:
    import numpy as np

    turns = [{"role": "assistant", "content": "ANSWER: 5"}]
    with Recorder(f"sqlite:///{tmp_path / 's.db'}", run="r") as rec:
        for reward, rewards, problem in (
            (float("nan"), None, "reward is nan, not a finite number"),
            ("high", None, "reward is 'high', not a number"),
            (1.0, {"format": float("inf")}, "rewards['format'] is inf, not a finite number"),
        ):
            with pytest.raises(RecorderError, match=problem.replace("[", r"\[")):
                rec.episode(question="Q?", turns=turns, reward=reward, rewards=rewards)
        # A trainer's numpy scalar and a reward past what thousandths hold are numbers.
        rec.episode(question="Q?", turns=turns, reward=np.float32(0.5))
        rec.episode(question="Q?", turns=turns, reward=1.7976931348623157e308)
    assert rows(rec.store, "SELECT reward FROM episodes ORDER BY id") == [
        (0.5,),
        (1.7976931348623157e308,),
    ]


def test_a_rollouts_duration_is_stored_when_the_loop_timed_it(tmp_path: Path) -> None:
    import numpy as np

    turns = [{"role": "assistant", "content": "ANSWER: 5"}]
    with Recorder(f"sqlite:///{tmp_path / 's.db'}", run="r") as rec:
        rec.episode(question="Q?", turns=turns, reward=1.0, seconds=np.float64(2.5))
        rec.episode(question="Q?", turns=turns, reward=1.0)  # untimed: NULL, not 0
        for seconds, problem in ((-1.0, "seconds is -1.0"), ("2s", "seconds is '2s'")):
            with pytest.raises(RecorderError, match=problem):
                rec.episode(question="Q?", turns=turns, reward=1.0, seconds=seconds)
    # The loop sampled under a seed of its own, at times of its own, which no rollout names:
    # NULL, not 0 or the time it was recorded.
    known = "SELECT duration_seconds, seed, started_at, ended_at FROM episodes ORDER BY id"
    assert rows(rec.store, known) == [(2.5, None, None, None), (None, None, None, None)]


def test_a_turn_without_an_action_is_stored_with_none(tmp_path: Path) -> None:
    turns = [
        {"role": "assistant", "content": "Let me think about the singers first."},
        {"role": "user", "content": "Go on."},
        {"role": "assistant", "content": "ANSWER: 5"},
    ]
    with Recorder(f"sqlite:///{tmp_path / 's.db'}", run="r") as rec:
        rec.episode(question="Q?", turns=turns, reward=1.0)
    # The loop's own environment answered the prose; nothing ran it as a QUERY here.
    steps = "SELECT action, argument, parsed FROM steps ORDER BY step_no"
    assert rows(rec.store, steps) == [(None, None, 0), ("ANSWER", "5", 1)]
    counters = "SELECT steps, unparsed_steps, query_steps, answer_steps FROM episodes"
    assert rows(rec.store, counters) == [(2, 1, 0, 1)]
    # Its SQL ran in the loop's environment, not here: whether a query failed is not known.
    assert rows(rec.store, "SELECT has_sql_error FROM episodes") == [(None,)]


def test_the_loops_token_count_log_probability_and_advantage_are_stored(tmp_path: Path) -> None:
    import torch

    turns = [{"role": "assistant", "content": "ANSWER: 5"}]
    with Recorder(_url(tmp_path), run="r", kind="training") as rec:
        rec.episode(
            question="Q?", turns=turns, reward=1.0, step=1, tokens_out=torch.tensor(42),
            mean_logprob=torch.tensor(-0.25), advantage=torch.tensor(-0.75),
        )  # fmt: skip
        rec.episode(question="Q?", turns=turns, reward=0.0, step=1)  # not given: NULL
        for call, problem in (
            ({"tokens_out": -3}, "tokens_out is -3: give the tokens the model wrote, 0 or more"),
            ({"tokens_out": 4.5}, "tokens_out is 4.5, not a whole number"),
            ({"mean_logprob": 0.7}, "mean_logprob is 0.7: a log-probability is 0 or less"),
            ({"mean_logprob": float("nan")}, "mean_logprob is nan, not a finite number"),
            ({"advantage": float("inf")}, "advantage is inf, not a finite number"),
            ({"advantage": "high"}, "advantage is 'high'"),
        ):
            with pytest.raises(RecorderError, match="^" + re.escape(problem)):
                rec.episode(question="Q?", turns=turns, reward=1.0, **call)
    known = "SELECT tokens_out, mean_logprob, trainer_advantage FROM episodes ORDER BY id"
    assert rows(rec.store, known) == [(42, -0.25, -0.75), (None, None, None)]


def test_held_episodes_reach_the_store_without_another_call(tmp_path: Path) -> None:
    # A trainer records a step's rollouts, then spends a while updating the model: what it
    # recorded is in the store within flush_seconds all the same.
    import time

    with Recorder(_url(tmp_path), run="r", kind="training", flush_seconds=0.2) as rec:
        for _ in range(3):
            rec.episode(question="Q?", turns=_answer(), reward=1.0, step=0, group=None)
        reader = Store(_url(tmp_path), read_only=True)
        waited = time.monotonic()
        while rows(reader, "SELECT count(*) FROM episodes") != [(3,)]:
            assert time.monotonic() - waited < 10, "held episodes were not written"
            time.sleep(0.05)
        reader.close()


def test_a_recorder_never_closed_writes_what_it_held_at_exit(tmp_path: Path) -> None:
    import subprocess
    import sys

    script = (
        "from app.recorder import Recorder\n"
        f"rec = Recorder({str(tmp_path / 's.db')!r}, run='r', flush_seconds=3600)\n"
        "rec.episode(question='Q?', turns=[{'role': 'assistant', 'content': 'ANSWER 5'}], "
        "reward=1.0)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    store = Store(_url(tmp_path), read_only=True)
    assert rows(store, "SELECT count(*) FROM episodes") == [(1,)]
    store.close()


def test_steps_and_groups_of_numpy_and_torch_integers_are_stored_as_integers(
    tmp_path: Path,
) -> None:
    np = pytest.importorskip("numpy")
    torch = pytest.importorskip("torch")
    with Recorder(_url(tmp_path), run="r", kind="training") as rec:
        rec.episode(question="Q?", turns=_answer(), reward=np.float32(1.0), step=np.int64(1))
        rec.episode(question="Q?", turns=_answer(), reward=torch.tensor(0.5), step=torch.tensor(2))
        rec.episode(question="R?", turns=_answer(), reward=0.0, step=1, group=np.int64(7))
    store = rec.store
    assert rows(store, "SELECT typeof(train_step), train_step FROM episodes ORDER BY id") == [
        ("integer", 1),
        ("integer", 2),
        ("integer", 1),
    ]


def test_a_verdict_of_numpy_or_torch_bools_is_taken(tmp_path: Path) -> None:
    np = pytest.importorskip("numpy")
    torch = pytest.importorskip("torch")
    with Recorder(_url(tmp_path), run="r") as rec:
        for correct in (np.False_, torch.tensor(True), 0):  # a reward of 1 either way
            rec.episode(question="Q?", turns=_answer(), reward=1.0, correct=correct)
    outcomes = "SELECT outcome FROM episodes ORDER BY id"
    assert rows(rec.store, outcomes) == [("wrong",), ("correct",), ("wrong",)]


def test_a_rollout_cut_at_the_length_limit_marks_its_last_step(tmp_path: Path) -> None:
    np = pytest.importorskip("numpy")
    turns = [
        {"role": "assistant", "content": "QUERY: SELECT 1"},
        {"role": "tool", "content": "1"},
        {"role": "assistant", "content": "ANSWER: the count of singers is"},
    ]
    with Recorder(_url(tmp_path), run="r") as rec:
        rec.episode(question="Q?", turns=turns, reward=0.0, truncated=np.True_)
        rec.episode(question="Q?", turns=turns, reward=0.0, truncated=False)
        rec.episode(question="Q?", turns=turns, reward=0.0)  # not said: nothing tells
    cut = "SELECT e.id, s.step_no, s.truncated FROM steps s JOIN episodes e ON e.id = s.episode_id"
    # The flag tells of the last output; the earlier turns' are not known (NULL).
    assert rows(rec.store, cut + " ORDER BY e.id, s.step_no") == [
        (1, 1, None), (1, 2, 1), (2, 1, None), (2, 2, 0), (3, 1, None), (3, 2, None)
    ]  # fmt: skip


def test_rollouts_of_a_step_that_come_back_late_join_its_groups(tmp_path: Path) -> None:
    # An asynchronous loop: a step-1 rollout returns after step 2's began.
    with Recorder(_url(tmp_path), run="r", kind="training") as rec:
        for step in (1, 1, 2, 1, 3, 2):
            rec.episode(question="Q?", turns=_answer(), reward=1.0, step=step)
    groups = "SELECT train_step, group_index, count(*) FROM episodes GROUP BY 1, 2 ORDER BY 1"
    assert [(s, n) for s, _, n in rows(rec.store, groups)] == [(1, 3), (2, 2), (3, 1)]


def test_a_lone_surrogate_in_the_loops_text_is_stored_as_the_replacement_character(
    tmp_path: Path,
) -> None:
    # Held, it failed the write at close() (no UTF-8 holds it), and the batch with it.
    turns = [{"role": "assistant", "content": "ANSWER \ud800"}]
    with Recorder(_url(tmp_path), run="r") as rec:
        rec.episode(question="Q \udfff?", turns=turns, reward=1.0)
        rec.episode(question="Q?", turns=_answer(), reward=1.0)
    stored = "SELECT e.question, s.raw_output FROM episodes e JOIN steps s ON s.episode_id = e.id"
    assert rows(rec.store, stored + " ORDER BY e.id")[0] == ("Q \ufffd?", "ANSWER \ufffd")
    assert rec.store.get_run(rec.run_id).status == "completed"  # type: ignore[union-attr]


def test_a_step_past_the_stores_range_is_refused_and_recording_goes_on(tmp_path: Path) -> None:
    # Held until the next write, it failed that write and every one after it.
    with Recorder(_url(tmp_path), run="r", kind="training") as rec:
        with pytest.raises(RecorderError, match=r"^step is 18,446,744,073,709,551,616, out of"):
            rec.episode(question="Q?", turns=_answer(), reward=1.0, step=2**64)
        rec.episode(question="Q?", turns=_answer(), reward=1.0, step=3)
    assert rows(rec.store, "SELECT train_step FROM episodes") == [(3,)]
    assert rec.store.get_run(rec.run_id).status == "completed"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        ({"step": 1.5}, "step is 1.5, not a whole number"),
        ({"step": "2"}, "step is '2', not a whole number"),
        ({"step": True}, "step is True, not a whole number"),
        # PostgreSQL's integer is 32 bits: refused on every store alike.
        ({"step": 2**31}, "step is 2,147,483,648, out of range: the store holds whole numbers"),
        ({"tokens_out": 10**12}, "tokens_out is 1,000,000,000,000, out of range"),
        # Each was held, and failed that write and every later one (or raised a TypeError).
        ({"db_id": {}}, "db_id is {}, not text; pass the database's name"),
        ({"gold_sql": 5}, "gold_sql is 5, not text; pass the gold SQL query"),
        ({"prompt": "hello"}, "prompt is 'hello': pass the messages before the first assistant"),
        ({"prompt": [1.5]}, "prompt is [1.5]: pass the messages before the first assistant"),
        ({"prompt": True}, "prompt is True: pass the messages before the first assistant"),
        ({"rewards": [1]}, "rewards is [1]: give the reward's parts by name"),
        ({"correct": "no"}, "correct is 'no': give True or False, or leave it out"),
        ({"truncated": "no"}, "truncated is 'no': give True where the model's last output was"),
        ({"reward": "1.0"}, "reward is '1.0', not a number"),
        ({"reward": True}, "reward is True, not a number"),
        ({"question": None}, "question is None, not text"),
        ({"group": [1, 2]}, "group is [1, 2]: give a hashable value"),
        ({"turns": ["SELECT 1"]}, "turns: a message is str, not an object with a role"),
        # A TypeError ('NoneType' object is not iterable), or a string read a letter a message.
        ({"turns": None}, "turns is None: pass the rollout's chat messages, a list of dicts"),
        ({"turns": 5}, "turns is 5: pass the rollout's chat messages"),
        ({"turns": "ANSWER 1"}, "turns is 'ANSWER 1': pass the rollout's chat messages"),
        ({"turns": {"role": "assistant"}}, "turns is {'role': 'assistant'}: pass the rollout's"),
        ({"turns": [{"role": "user", "content": "Q?"}]}, "turns holds no assistant message"),
        # Values JSON has no form for: held, each failed that write and every later one.
        (
            {"turns": [{"role": "user", "content": "Q?"}, {"role": "assistant", "content": b"5"}]},
            "turns[1]['content'] is b'5': messages are stored as JSON; give text, numbers",
        ),
        (
            {"turns": [{"role": "assistant", "content": "ANSWER 5"}, {"role": "tool", "x": {1}}]},
            "turns[1]['x'] is {1}: messages are stored as JSON",
        ),
        (
            {"prompt": [{"role": "system", "content": "x", "at": object()}]},
            "prompt[0]['at'] is <object object at",
        ),
        # int() past a float's range or Python's 4,300 digits: OverflowError and ValueError.
        ({"reward": 10**400}, f"reward is 1{'0' * 36}..., past what a float holds"),
        ({"step": -(10**5_000)}, "step is -a number of 16,610 bits, out of range: the store"),
        ({"question_id": 10**5_000}, "question_id is a number of 16,610 bits, not text"),
        # repr() of the value ran out of stack.
        ({"reward": _nested(5_000)}, "reward is [[[[[...]]]]], not a number"),
        ({"rewards": {"r": {"a": _nested(5_000)}}}, "rewards['r'] is {'a': [[[[...]]]]}, not a"),
        (  # held, it failed its write: Python's json ran out of stack
            {"turns": [*_ANSWER, {"role": "tool", "content": _nested(2_000)}]},
            "turns[2]['content'] nests lists or dicts more than 99 levels deep, past what the",
        ),
        # Names the store keys on: PostgreSQL refused the batch holding one.
        ({"question_id": "q" * 201}, "question_id is 201 characters long; the store keeps at"),
        ({"question_id": "q\x00"}, "question_id holds a NUL character"),
        ({"question_id": "q\ud800"}, "question_id holds a lone surrogate"),
        ({"db_id": "d" * 201}, "db_id is 201 characters long; the store keeps at most 200"),
        (
            {"rewards": {"r" * 201: 1.0}},
            "the reward named 'rrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrr' is 201 characters long",
        ),
    ],
)
def test_a_call_it_cannot_record_says_what_to_pass(
    tmp_path: Path, call: dict[str, Any], message: str
) -> None:
    with Recorder(_url(tmp_path), run="r") as rec:
        arguments: dict[str, Any] = {"question": "Q?", "turns": _answer(), "reward": 1.0}
        with pytest.raises(RecorderError, match="^" + re.escape(message)):
            rec.episode(**{**arguments, **call})
    assert rows(rec.store, "SELECT count(*) FROM episodes") == [(0,)]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        # A wait of NaN seconds returned at once (the flusher spun); one past time_t raised on
        # the flusher's thread, after the run was made.
        ({"flush_seconds": float("nan")}, "flush_seconds is nan, not a finite number"),
        ({"flush_seconds": 1e300}, "flush_seconds is 1e+300: give the seconds an episode"),
        ({"flush_seconds": 0}, "flush_seconds is 0.0: give the seconds an episode may wait"),
        ({"flush_every": 0}, "flush_every is 0: give the episodes held before a write, 1 or"),
        ({"flush_every": 2.5}, "flush_every is 2.5, not a whole number"),
        # No reward is at least NaN: every episode given no `correct` would read wrong.
        ({"correct_at": float("nan")}, "correct_at is nan, not a finite number"),
        # A name no command could name again; one too long was refused by the store it made.
        ({"run": " "}, "the run name is empty; give the run a name"),
        ({"run": None}, "run is None: give the run's name as text"),
        ({"run": "r" * 201}, "the run name is 201 characters long; the store keeps at most 200"),
    ],
)
def test_settings_it_cannot_keep_are_refused_before_the_run_is_made(
    tmp_path: Path, settings: dict[str, Any], message: str
) -> None:
    with pytest.raises(RecorderError, match="^" + re.escape(message)):
        Recorder(_url(tmp_path), **{"run": "r", **settings})
    assert not (tmp_path / "s.db").exists()


def test_the_run_name_is_kept_as_a_command_takes_it(tmp_path: Path) -> None:
    with Recorder(_url(tmp_path), run=" grpo-sql\t") as rec:
        rec.episode(question="q", turns=_answer(), reward=1.0)
    assert rows(rec.store, "SELECT name FROM runs") == [("grpo-sql",)]
    with pytest.raises(RecorderError, match=r"^a run named 'grpo-sql' already exists"):
        Recorder(_url(tmp_path), run="grpo-sql ")


def _answer() -> list[dict[str, str]]:
    return list(_ANSWER)


def _url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 's.db'}"


def test_a_second_process_on_a_run_being_recorded_is_told_to_record_on_one(
    tmp_path: Path,
) -> None:
    """As under a multi-GPU trainer: every process runs the loop's `Recorder(...)`; the one
    that comes second is told to gather onto the main process, not to pass resume=True (which
    a running run refuses too)."""
    import os
    import subprocess
    import sys

    second = (
        "import sys\n"
        "from app.recorder import Recorder, RecorderError\n"
        "try:\n"
        f"    Recorder({_url(tmp_path)!r}, run='grpo-sql', kind='training')\n"
        "except RecorderError as exc:\n"
        "    print(exc)\n"
        "    sys.exit(3)\n"
    )
    with Recorder(_url(tmp_path), run="grpo-sql", kind="training") as rec:
        rec.episode(question="q", turns=_answer(), reward=1.0)
        done = subprocess.run(
            [sys.executable, "-c", second], capture_output=True, text=True, timeout=120
        )
    assert done.returncode == 3, done.stderr
    assert done.stdout.startswith(
        f"run 'grpo-sql' is being recorded now by another process (pid {os.getpid()} on "
    )
    assert "record them on the main process" in done.stdout
    # Once the first has finished, the same call is told the name is taken.
    with pytest.raises(RecorderError, match=r"^a run named 'grpo-sql' already exists"):
        Recorder(_url(tmp_path), run="grpo-sql", kind="training")
