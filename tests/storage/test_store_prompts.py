"""Step prompts: each step keeps the messages it added, system messages are stored once, and
every prompt comes back exactly, from the Store and from the `step_prompts` SQL view."""

from __future__ import annotations

import dataclasses
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from rollout_core.datasets import load_named_dataset
from rollout_core.policies.base import Policy
from rollout_core.policies.registry import make_policy
from rollout_core.prompts import get_system_prompt
from rollout_core.records import IterationBatch, ListSink, StepRecord
from rollout_core.settings import EnvironmentSettings
from storage.models import PromptText, Step
from storage.prompts import text_ids
from storage.store import Store
from tests.storage.prompt_checks import check_prompts, check_view
from tests.support.postgres import PgServer
from tests.support.records import finish, spec, start, step
from tests.support.stores import play_run

Message = dict[str, Any]


def _play(store: Store, name: str, policy: Policy, *, samples: int, limit: int | None = None,
          budget: int = 10) -> tuple[int, list[StepRecord]]:  # fmt: skip
    """A run of `policy` over the demo benchmark through the real runner into the store."""
    ds = load_named_dataset("demo")
    kept = ListSink()
    run_id = play_run(
        store, spec(name, policy=policy.name), ds, policy,
        questions=ds.questions[:limit] if limit else None, samples=samples, seed=7,
        status=None, keep=kept, batch_size=16, environment=EnvironmentSettings(step_budget=budget),
    )  # fmt: skip
    return run_id, kept.steps


def test_runner_prompts_come_back_exactly(store: Store) -> None:
    oracle, oracle_steps = _play(store, "oracle", make_policy("oracle"), samples=1)
    random_, random_steps = _play(store, "random", make_policy("random"), samples=2)
    records = oracle_steps + random_steps
    assert check_prompts(store, {oracle: oracle_steps, random_: random_steps}) == len(records) > 500
    assert check_view(store) == len(records)
    with Session(store._engine) as session:
        # The system prompt is stored once for both runs, whatever the number of episodes.
        texts = session.scalars(select(PromptText.text)).all()
        assert [json.loads(t) for t in texts] == [
            [{"role": "system", "content": get_system_prompt(10)}]
        ]
        # A later step keeps what its turn added: the last output and observation.
        added = session.execute(
            select(Step.prompt_from_step, Step.prompt_added).where(Step.step_no > 1)
        ).all()
    assert {f for f, _ in added} == {1}
    assert all([m["role"] for m in json.loads(a)] == ["assistant", "user"] for _, a in added)


def test_a_steps_added_messages_are_the_last_steps_output_and_observation(store: Store) -> None:
    """Read with plain SQL, step n+1's `prompt_added` holds step n's output and observation."""
    _play(store, "oracle", make_policy("oracle"), samples=1, limit=5)
    with Session(store._engine) as session:
        rows = session.execute(
            text(
                "SELECT a.raw_output, a.observation, b.prompt_added FROM steps a "
                "JOIN steps b ON b.episode_id = a.episode_id AND b.step_no = a.step_no + 1"
            )
        ).all()
    assert len(rows) >= 5
    for raw, observation, added in rows:
        assert json.loads(added) == [
            {"role": "assistant", "content": raw},
            {"role": "user", "content": observation},
        ]


def test_hf_prompts_come_back_exactly(store: Store, tiny_checkpoint: Path) -> None:
    from rollout_core.policies.hf import HFPolicy
    from rollout_core.settings import GenerationSettings

    settings = GenerationSettings(max_new_tokens=24, temperature=1.0, seed=3)
    policy = HFPolicy(tiny_checkpoint, settings)
    run_id, records = _play(store, "hf", policy, samples=2, limit=8, budget=4)
    assert check_prompts(store, {run_id: records}) == len(records) >= 16
    assert check_view(store) == len(records)


_ODD = 'a\x00b 🎵 \u202eRTL\u202c \u2028 \\ " \n\t é\u0301 \x1b[2J <script>x</script>'


def _steps(q: str, prompts: list[list[Message]], raws: list[str], observations: list[str]
           ) -> list[StepRecord]:  # fmt: skip
    return [
        dataclasses.replace(
            step(q, 0, n, done=n == len(prompts)), prompt=p, raw_output=r, observation=o
        )
        for n, (p, r, o) in enumerate(zip(prompts, raws, observations, strict=True), start=1)
    ]


def _conversation(
    system: str | None, question: str, raws: list[str], observations: list[str]
) -> list[list[Message]]:
    """The runner's prompts of an episode with these outputs and observations."""
    messages: list[Message] = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": question})
    prompts = []
    for raw, obs in zip(raws, observations, strict=True):
        prompts.append(list(messages))
        messages += [{"role": "assistant", "content": raw}, {"role": "user", "content": obs}]
    return prompts


def _odd_episodes() -> dict[str, list[StepRecord]]:
    """question id -> steps of prompts the runner rarely or never writes."""
    raws = [f"QUERY SELECT '{_ODD}'", "", "x", f"ANSWER {_ODD}"]
    obs = [f"Error: {_ODD}", "", "Error: empty", "Answer submitted: incorrect."]
    q = f"How many {_ODD}?"
    chat = _conversation(f"system {_ODD}", q, raws, obs)
    # A window that drops old turns: no prompt begins with the one before it.
    window = [[{"role": "system", "content": "window"}, *p[-2:]] for p in chat]
    extra = [[{**m, "name": "x", "tool_calls": [{"id": 1}]} for m in p] for p in chat]
    return {
        "odd-chat": _steps("odd-chat", chat, raws, obs),
        "odd-window": _steps("odd-window", window, raws, obs),
        "odd-extra-keys": _steps("odd-extra-keys", extra, raws, obs),
        "odd-no-system": _steps("odd-no-system", _conversation(None, q, raws, obs), raws, obs),
        "odd-empty": _steps("odd-empty", [[], [], [], []], raws, obs),
        "odd-only-system": _steps(
            "odd-only-system", [[{"role": "system", "content": "s"}]] * 4, raws, obs
        ),
    }


def test_odd_prompts_come_back_exactly(store: Store) -> None:
    episodes = _odd_episodes()
    run_id = store.create_run(spec(), episodes_planned=len(episodes))
    sink = store.sink(run_id)
    records = []
    for qid, steps in episodes.items():
        # One step per batch, as the runner writes them.
        sink.write(IterationBatch(started=[start(qid)], steps=steps[:1]))
        for s in steps[1:]:
            sink.write(IterationBatch(steps=[s]))
        sink.write(IterationBatch(finished=[finish(qid, 0, "wrong", 0.0, len(steps))]))
        records += steps
    assert check_prompts(store, {run_id: records}) == len(records) == 24
    assert check_view(store) == 24
    got = {d.summary.question_id: d for d in store.iter_episode_details(run_id)}
    assert "\x00" in got["odd-chat"].steps[0].prompt[0]["content"]  # kept, JSON-escaped
    with Session(store._engine) as session:
        froms = session.execute(
            select(Step.step_no, Step.prompt_from_step).order_by(Step.episode_id, Step.step_no)
        ).all()
    window = froms[4:8]
    assert [f for _, f in window] == [1, 2, 3, 4]  # each window prompt stored afresh


def test_a_stored_prompt_past_pythons_json_stack_reads_as_a_note(store: Store) -> None:
    # As an earlier rollscope could store (the Recorder's messages, json's fallback writer):
    # reading the episode raised a RecursionError, in the dashboard's Replay too.
    run_id = store.create_run(spec(), episodes_planned=1)
    store.sink(run_id).write(
        IterationBatch([start("q")], [step("q", 0, 1)], [finish("q", 0, "wrong", 0.0, 1)])
    )
    deep = "[" + "[" * 5_000 + "]" * 5_000 + "]"
    with Session(store._engine) as session, session.begin():
        session.execute(text("UPDATE steps SET prompt_added = :p"), {"p": deep})
    (detail,) = store.iter_episode_details(run_id)
    assert detail.steps[0].prompt[-1] == {
        "role": "rollscope",
        "content": "[prompt not rebuilt: valid JSON is missing]",
    }


def test_a_new_sink_continues_an_episode_another_one_began(store: Store) -> None:
    """A sink that did not write an episode's earlier steps reads them back to encode."""
    raws, obs = ["DESCRIBE singer", "QUERY SELECT name FROM singer"], ["table singer", "Ann"]
    raws, obs = [*raws, "ANSWER Ann"], [*obs, "Answer submitted: correct."]
    steps = _steps("q1", _conversation(get_system_prompt(), "Who sings?", raws, obs), raws, obs)
    run_id = store.create_run(spec(), episodes_planned=1)
    store.sink(run_id).write(IterationBatch(started=[start("q1")], steps=steps[:1]))
    store.sink(run_id).write(IterationBatch(steps=steps[1:2]))
    store.sink(run_id).write(
        IterationBatch(steps=steps[2:], finished=[finish("q1", 0, "correct", 1.0, 3)])
    )
    assert check_prompts(store, {run_id: steps}) == 3
    with Session(store._engine) as session:
        froms = session.scalars(select(Step.prompt_from_step).order_by(Step.step_no)).all()
    assert froms == [1, 1, 1]  # still built on the first step's


def test_a_replayed_episode_is_encoded_from_its_new_steps(store: Store) -> None:
    """Resume replays an unfinished episode: the earlier attempt's steps are no base."""
    run_id = store.create_run(spec(), episodes_planned=1)
    first = _conversation("sys", "Q?", ["DESCRIBE a"], ["table a"])
    store.sink(run_id).write(
        IterationBatch(started=[start("q1")], steps=_steps("q1", first, ["DESCRIBE a"], ["ta"]))
    )
    raws, obs = ["SAMPLE c", "ANSWER 1"], ["c rows", "Answer submitted: correct."]
    steps = _steps("q1", _conversation("sys", "Q?", raws, obs), raws, obs)
    store.sink(run_id).write(
        IterationBatch(
            started=[start("q1")], steps=steps, finished=[finish("q1", 0, "correct", 1.0, 2)]
        )
    )
    assert check_prompts(store, {run_id: steps}) == 2
    assert check_view(store) == 2


def test_a_failed_batch_teaches_the_sink_nothing(store: Store) -> None:
    run_id = store.create_run(spec(), episodes_planned=1)
    sink = store.sink(run_id)
    raws, obs = ["DESCRIBE a", "DESCRIBE b", "ANSWER 1"], ["ta", "tb", "ok"]
    steps = _steps("q1", _conversation("sys", "Q?", raws, obs), raws, obs)
    sink.write(IterationBatch(started=[start("q1")], steps=steps[:1]))
    with pytest.raises(ValueError, match="no started episode"):
        sink.write(IterationBatch(steps=[steps[1], step("nope", 0, 1)]))
    sink.write(IterationBatch(steps=steps[1:], finished=[finish("q1", 0, "correct", 1.0, 3)]))
    assert check_prompts(store, {run_id: steps}) == 3


def test_a_failed_batch_leaves_no_shared_text_behind(store: Store) -> None:
    """The shared text a failed transaction inserted is gone; the next batch stores it again."""
    raws, obs = ["DESCRIBE a", "ANSWER 1"], ["ta", "ok"]
    steps = _steps("q1", _conversation("a new system prompt", "Q?", raws, obs), raws, obs)
    run_id = store.create_run(spec(), episodes_planned=1)
    sink = store.sink(run_id)
    with pytest.raises(ValueError, match="no started episode"):
        sink.write(IterationBatch(started=[start("q1")], steps=[*steps, step("nope", 0, 1)]))
    sink.write(
        IterationBatch(
            started=[start("q1")], steps=steps, finished=[finish("q1", 0, "correct", 1.0, 2)]
        )
    )
    assert check_prompts(store, {run_id: steps}) == 2
    assert check_view(store) == 2


@pytest.mark.postgres
def test_two_writers_adding_the_same_text_share_one_row(postgres_server: PgServer) -> None:
    """PostgreSQL: a second transaction adding a text the first has not committed waits for
    it and reuses its row (no unique violation). SQLite writers never overlap."""
    with postgres_server.database("rollscope_test") as url:
        store = Store(url)
        try:
            _same_text_twice(store)
        finally:
            store.close()


def _same_text_twice(store: Store) -> None:
    first = Session(store._engine)
    first.begin()
    mine = text_ids(first, {"[shared]"})
    theirs: dict[str, int] = {}

    def other() -> None:
        with Session(store._engine) as s, s.begin():
            theirs.update(text_ids(s, {"[shared]"}))

    thread = threading.Thread(target=other)
    thread.start()
    thread.join(timeout=1.0)
    assert thread.is_alive()  # waiting on the first transaction's row
    first.commit()
    first.close()
    thread.join(timeout=30)
    assert theirs == mine
    with Session(store._engine) as s:
        assert s.scalar(select(func.count()).select_from(PromptText)) == 1
