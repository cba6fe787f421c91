"""Step prompts are stored once per shared part and rebuilt exactly, on SQLite and PostgreSQL."""

from __future__ import annotations

import dataclasses
import json
import threading
from pathlib import Path

import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from rollout_core.datasets import load_named_dataset
from rollout_core.policies.base import Policy
from rollout_core.policies.registry import make_policy
from rollout_core.prompts import get_system_prompt
from rollout_core.records import EpisodeStart, IterationBatch, StepRecord
from rollout_core.runner import plan_episodes, run_episodes
from rollout_core.settings import EnvironmentSettings
from storage.models import PromptText, Step
from storage.prompt_store import text_ids
from storage.read_models import EpisodeFilter
from storage.store import Store
from tests.storage.conftest import PgServer
from tests.storage.prompt_checks import TeeSink, as_stored, check_hashes, check_prompts
from tests.storage.store_builders import finish, spec, start, step


def _play(store: Store, name: str, policy: Policy, *, samples: int, limit: int | None = None,
          budget: int = 10) -> tuple[int, list[StepRecord]]:  # fmt: skip
    """A run of `policy` over the demo benchmark through the real runner into the store."""
    ds = load_named_dataset("demo")
    questions = ds.questions[:limit] if limit else ds.questions
    run_id = store.create_run(spec(name, policy=policy.name), episodes_planned=len(questions))
    sink = TeeSink(store.sink(run_id))
    tasks = plan_episodes(questions, samples=samples, run_seed=7)
    environment = EnvironmentSettings(step_budget=budget)
    run_episodes(ds, tasks, policy, sink, batch_size=16, environment=environment)
    return run_id, sink.copy.steps


def test_runner_prompts_come_back_exactly(store: Store) -> None:
    oracle, oracle_steps = _play(store, "oracle", make_policy("oracle"), samples=1)
    random_, random_steps = _play(store, "random", make_policy("random"), samples=2)
    records = oracle_steps + random_steps
    assert check_prompts(store, {oracle: oracle_steps, random_: random_steps}) == len(records) > 500
    assert check_hashes(store) == len(records)
    with Session(store._engine) as session:
        # The system prompt is stored once for both runs, whatever the number of episodes.
        system = json.dumps(get_system_prompt(10), ensure_ascii=False)[1:-1]
        texts = session.scalars(select(PromptText.text)).all()
        assert sum(system in t for t in texts) == 1
        # A later step stores references only: `p<k> t<a> R<n> t<b> O<n> t<c>`, or with the
        # shortest outputs (under 8 characters) inside a text.
        layouts = session.scalars(select(Step.prompt_layout).where(Step.step_no > 1)).all()
        assert max(len(layout) for layout in layouts) < 48


def test_hf_prompts_come_back_exactly(store: Store, tiny_checkpoint: Path) -> None:
    from rollout_core.policies.hf import HFPolicy
    from rollout_core.settings import GenerationSettings

    settings = GenerationSettings(max_new_tokens=24, temperature=1.0, seed=3)
    policy = HFPolicy(tiny_checkpoint, settings)
    run_id, records = _play(store, "hf", policy, samples=2, limit=8, budget=4)
    assert check_prompts(store, {run_id: records}) == len(records) >= 16
    assert check_hashes(store) == len(records)


_ODD = 'a\x00b 🎵 \u202eRTL\u202c \u2028 \\ " \n\t é\u0301 \x1b[2J'


def _steps(
    q: str, prompts: list[str], raws: list[str], observations: list[str]
) -> list[StepRecord]:
    return [
        dataclasses.replace(
            step(q, 0, n, done=n == len(prompts)), prompt=p, raw_output=r, observation=o
        )
        for n, (p, r, o) in enumerate(zip(prompts, raws, observations, strict=True), start=1)
    ]


def _conversation(
    system: str, question: str, raws: list[str], observations: list[str]
) -> list[str]:
    """The runner's JSON prompts of an episode with these outputs and observations."""
    messages = [{"role": "system", "content": system}, {"role": "user", "content": question}]
    prompts = []
    for raw, obs in zip(raws, observations, strict=True):
        prompts.append(json.dumps(messages, ensure_ascii=False))
        messages += [{"role": "assistant", "content": raw}, {"role": "user", "content": obs}]
    return prompts


def _odd_episodes() -> dict[str, tuple[str, list[StepRecord]]]:
    """question id -> (question, steps) of prompts the runner rarely or never writes."""
    raws = [f"QUERY SELECT '{_ODD}'", "", "x", f"ANSWER {_ODD}"]
    obs = [f"Error: {_ODD}", "", "Error: empty", "Answer submitted: incorrect."]
    q = f"How many {_ODD}?"
    json_prompts = _conversation(f"system {_ODD}", q, raws, obs)
    template = [
        f"<|im_start|>user\n{q}<|im_end|>\n"
        + "".join(f"<|im_start|>assistant\n{r}<|im_end|>\n<|im_start|>user\n{o}<|im_end|>\n"
                  for r, o in zip(raws[:n], obs[:n], strict=True))
        + "<|im_start|>assistant\n"
        for n in range(4)
    ]  # fmt: skip
    window = [p.replace(f"system {_ODD}", "window") for p in json_prompts[::-1]]
    return {
        "odd-json": (q, _steps("odd-json", json_prompts, raws, obs)),
        "odd-template": (q, _steps("odd-template", template, raws, obs)),
        "odd-window": (q, _steps("odd-window", window, raws, obs)),
        "odd-empty": ("", _steps("odd-empty", ["", "", "\x00", ""], raws, obs)),
    }


def test_odd_prompts_come_back_exactly(store: Store) -> None:
    run_id = store.create_run(spec(), episodes_planned=4)
    sink = store.sink(run_id)
    episodes = _odd_episodes()
    records = []
    for qid, (question, steps) in episodes.items():
        opened = dataclasses.replace(start(qid), question=question)
        # One step per batch, as the runner writes them.
        sink.write(IterationBatch(started=[opened], steps=steps[:1]))
        for s in steps[1:]:
            sink.write(IterationBatch(steps=[s]))
        sink.write(IterationBatch(finished=[finish(qid, 0, "wrong", 0.0, len(steps))]))
        records += steps
    assert check_prompts(store, {run_id: records}) == 16
    assert check_hashes(store) == 16
    got = {d.summary.question_id: d for d in store.iter_episode_details(run_id)}
    assert got["odd-json"].steps[0].prompt == as_stored(episodes["odd-json"][1][0].prompt)
    assert "\x00" not in got["odd-empty"].steps[2].prompt


def test_a_nul_in_what_a_prompt_adds_is_stored_cleaned(store: Store) -> None:
    """Prompts are matched against the shape as they come; one whose new turn holds a NUL
    does not match, and is cleaned (NUL to U+FFFD) like any text the store keeps."""
    raws, observations = (
        ["DESCRIBE a", "SAMPLE a", "QUERY x", "ANSWER 1"],
        ["ok", "a\x00b", "c", "d"],
    )
    # A chat template's text, where the observation's NUL stays a NUL (JSON would escape it).
    prompts = [
        "<user>Q?</user>"
        + "".join(
            f"<bot>{r}</bot><user>{o}</user>"
            for r, o in zip(raws[:n], observations[:n], strict=True)
        )
        + "<bot>"
        for n in range(len(raws))
    ]
    steps = _steps("q1", prompts, raws, observations)
    assert "\x00" in steps[2].prompt
    run_id = store.create_run(spec(), episodes_planned=1)
    sink = store.sink(run_id)
    sink.write(IterationBatch(started=[start("q1", text="Q?")], steps=steps[:1]))
    for s in steps[1:]:
        sink.write(IterationBatch(steps=[s]))
    assert check_prompts(store, {run_id: steps}) == 4
    assert check_hashes(store) == 4
    (episode,) = store.list_episodes(EpisodeFilter(run_ids=(run_id,), finished_only=False)).items
    detail = store.get_episode(episode.id)
    assert detail is not None
    assert "\x00" not in detail.steps[2].prompt and "a\ufffdb" in detail.steps[2].prompt


def test_a_new_sink_continues_an_episode_another_one_began(store: Store) -> None:
    """A sink that did not write an episode's earlier steps reads them back to encode."""
    raws, obs = ["DESCRIBE singer", "QUERY SELECT name FROM singer"], ["table singer", "Ann"]
    raws, obs = [*raws, "ANSWER Ann"], [*obs, "Answer submitted: correct."]
    prompts = _conversation(get_system_prompt(), "Who sings?", raws, obs)
    steps = _steps("q1", prompts, raws, obs)
    run_id = store.create_run(spec(), episodes_planned=1)
    store.sink(run_id).write(
        IterationBatch(started=[start("q1", text="Who sings?")], steps=steps[:1])
    )
    store.sink(run_id).write(IterationBatch(steps=steps[1:2]))
    store.sink(run_id).write(
        IterationBatch(steps=steps[2:], finished=[finish("q1", 0, "correct", 1.0, 3)])
    )
    assert check_prompts(store, {run_id: steps}) == 3
    with Session(store._engine) as session:
        layouts = session.scalars(select(Step.prompt_layout).order_by(Step.step_no)).all()
    assert all(layout.startswith("p") for layout in layouts[1:])  # still based on the last one


def test_a_replayed_episode_is_encoded_from_its_new_steps(store: Store) -> None:
    """Resume replays an unfinished episode: the earlier attempt's steps are no base."""
    run_id = store.create_run(spec(), episodes_planned=1)
    sink = store.sink(run_id)
    first = _conversation("sys", "Q?", ["DESCRIBE a", "DESCRIBE b"], ["table a", "table b"])
    sink.write(
        IterationBatch(
            started=[start("q1")], steps=_steps("q1", first[:1], ["DESCRIBE a"], ["table a"])
        )
    )
    again = _conversation(
        "sys", "Q?", ["SAMPLE c", "ANSWER 1"], ["c rows", "Answer submitted: correct."]
    )
    steps = _steps("q1", again, ["SAMPLE c", "ANSWER 1"], ["c rows", "Answer submitted: correct."])
    store.sink(run_id).write(
        IterationBatch(
            started=[start("q1")], steps=steps, finished=[finish("q1", 0, "correct", 1.0, 2)]
        )
    )
    assert check_prompts(store, {run_id: steps}) == 2
    assert check_hashes(store) == 2


def test_a_failed_batch_teaches_the_sink_nothing(store: Store) -> None:
    run_id = store.create_run(spec(), episodes_planned=1)
    sink = store.sink(run_id)
    prompts = _conversation(
        "sys", "Q?", ["DESCRIBE a", "DESCRIBE b", "ANSWER 1"], ["ta", "tb", "ok"]
    )
    steps = _steps("q1", prompts, ["DESCRIBE a", "DESCRIBE b", "ANSWER 1"], ["ta", "tb", "ok"])
    sink.write(IterationBatch(started=[start("q1")], steps=steps[:1]))
    unknown = IterationBatch(steps=[steps[1], step("nope", 0, 1)])
    with pytest.raises(ValueError, match="no started episode"):
        sink.write(unknown)
    sink.write(IterationBatch(steps=steps[1:], finished=[finish("q1", 0, "correct", 1.0, 3)]))
    assert check_prompts(store, {run_id: steps}) == 3


def test_a_shape_whose_first_batch_failed_is_written_with_its_texts_new_ids(
    store: Store,
) -> None:
    """The first batch to use a shape writes its steps from the shape's template, with ids its
    own transaction gives the shape's texts. When that transaction fails those ids are gone
    (here another run's texts take them), and the next batch looks the texts up again."""
    raws, observations = ["DESCRIBE a", "SAMPLE a", "QUERY SELECT 1", "ANSWER 1"], list("wxyz")
    steps = _steps("q1", _conversation("sys", "Q?", raws, observations), raws, observations)
    run_id = store.create_run(spec(), episodes_planned=1)
    sink = store.sink(run_id)
    failing = IterationBatch(started=[start("q1")], steps=[*steps, steps[-1]])  # a duplicate
    with pytest.raises(IntegrityError):
        sink.write(failing)
    other = store.create_run(spec("other"), episodes_planned=1)
    other_raws = ["DESCRIBE b", "ANSWER 2"]
    other_prompts = [p.replace("}]", ', "x": 0}]') for p in
                     _conversation("other system", "Other?", other_raws, ["b", "ok"])]  # fmt: skip
    other_steps = _steps("q9", other_prompts, other_raws, ["b", "ok"])
    store.sink(other).write(IterationBatch(started=[start("q9")], steps=other_steps))
    sink.write(IterationBatch(started=[start("q1")], steps=steps))
    assert check_prompts(store, {run_id: steps, other: other_steps}) == 6
    assert check_hashes(store) == 6


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
    mine = text_ids(first, {"shared framing"})
    theirs: dict[str, int] = {}

    def other() -> None:
        with Session(store._engine) as s, s.begin():
            theirs.update(text_ids(s, {"shared framing"}))

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


def test_episode_start_needs_no_question_in_the_prompt(store: Store) -> None:
    """A question that is not in the prompt (a trainer's own rendering) costs nothing."""
    run_id = store.create_run(spec(), episodes_planned=1)
    s = dataclasses.replace(step("q1", 0, 1, done=True), prompt="free text")
    store.sink(run_id).write(
        IterationBatch(
            started=[EpisodeStart("q1", 0, 1, "db", "", "SELECT 1")],
            steps=[s],
            finished=[finish("q1", 0, "wrong", 0.0, 1)],
        )
    )
    assert check_prompts(store, {run_id: [s]}) == 1


def test_first_prompts_that_start_alike_come_back_exactly(store: Store) -> None:
    """A first prompt that starts as the last one did is encoded and hashed past that start:
    the rest may hold the question or not, be empty, or the start be another's."""
    system = "You answer questions about SQLite databases. " * 40
    head = f"{system}\nQuestion: "
    firsts = {
        "learns": ("How many singers are there?", f"{head}How many singers are there?\nDB: a"),
        "reuses": ("Which stadium is largest?", f"{head}Which stadium is largest?\nDB: b"),
        "in-head": ("about SQLite databases", f"{head}(see the system prompt)"),
        "is-head": ("How many pets are there?", head),
        "nul": ("What is \x00 here?", f"{head}What is \x00 here?"),
        "another": ("How many singers are there?", "Other system.\nHow many singers are there?"),
        "again": ("Name every concert.", f"{head}Name every concert.\nDB: c"),
        "after": ("Name every singer.", f"{head}Name every singer.\nDB: c"),
    }
    run_id = store.create_run(spec(), episodes_planned=len(firsts))
    sink = store.sink(run_id)
    records = []
    for qid, (question, prompt) in firsts.items():
        prompts = [prompt, f"{prompt}\nDESCRIBE t\ncolumns: a\n"]
        steps = _steps(qid, prompts, ["DESCRIBE t", "ANSWER 1"], ["columns: a", "done"])
        opened = dataclasses.replace(start(qid), question=question)
        sink.write(IterationBatch(started=[opened], steps=steps))
        sink.write(IterationBatch(finished=[finish(qid, 0, "wrong", 0.0, 2)]))
        records += steps
    assert check_prompts(store, {run_id: records}) == check_hashes(store) == 16
    with Session(store._engine) as session:
        texts = session.scalars(select(PromptText.text)).all()
        assert sum(system in t for t in texts) == 1  # the shared start, stored once
