"""Sessions of the environment server, played by OpenEnv's own client over its WebSocket route:
every session's episodes are in the store, step by step, as they are played."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from openenv.core.generic_client import GenericEnvClient
from websockets.sync.client import connect

from app.env_client import SQLAction, SQLEnvClient
from rollout_core.datasets import DatasetError, load_dataset
from rollout_core.records import IterationBatch
from storage.read_models import EpisodeDetail, EpisodeFilter
from storage.store import Store
from storage.training import question_episodes
from tests.app.env_server.conftest import REPO, Bench, Served, env_spec, serving, wait_for
from tests.support.records import start

# Each fixture question played as an oracle would: look, query the gold, answer right.
ORACLE: dict[str, list[dict[str, str]]] = {
    "q-count": [
        {"action_type": "DESCRIBE", "argument": "singer"},
        {"action_type": "QUERY", "argument": "SELECT COUNT(*) FROM singer"},
        {"action_type": "ANSWER", "argument": "5"},
    ],
    "q-france": [
        {"action_type": "QUERY", "argument": "SELECT name FROM singer WHERE country = 'France'"},
        {"action_type": "ANSWER", "argument": '["Ada", "Cy"]'},
    ],
}


def client(served: Served) -> Any:
    return GenericEnvClient(base_url=served.url).sync()


def play(env: Any, question_id: str, **reset: Any) -> Any:
    result = env.reset(question_id=question_id, **reset)
    for action in ORACLE[question_id]:
        result = env.step(action)
    return result


def episodes(store: Store, run_id: int) -> list[EpisodeDetail]:
    flt = EpisodeFilter(run_ids=(run_id,), finished_only=False)
    ids = [e.id for e in store.list_episodes(flt, limit=500).items]
    return store.get_episodes(ids)


def test_generic_client_plays_episodes_one_after_another(served: Served) -> None:
    with client(served) as env:
        last = play(env, "q-count")
        assert last.done and last.reward == 1.0
        assert last.observation["metadata"]["outcome"] == "correct"
        play(env, "q-count", seed=7)
        env.reset(question_id="q-france")
        wrong = env.step({"action_type": "answer", "argument": "Bo"})
        assert wrong.done and wrong.observation["result"] == "Answer submitted: incorrect."

    run = served.store.get_run(served.run_id)
    assert run is not None and run.kind == "env" and run.status == "running"
    assert run.episodes_planned is None  # clients play as long as they like: no plan
    found = {(e.summary.question_id, e.summary.sample_index): e for e in episodes(served.store, 1)}
    assert sorted(found) == [("q-count", 0), ("q-count", 1), ("q-france", 0)]
    assert [found[k].summary.outcome for k in sorted(found)] == ["correct", "correct", "wrong"]
    assert found["q-france", 0].summary.failure_class == "wrong_answer"
    first = found["q-count", 0]
    # The seed a client reset with; none where it gave none (the server samples nothing).
    assert (first.seed, found["q-count", 1].seed) == (None, 7)
    assert [(s.step_no, s.action, s.argument, s.error) for s in first.steps] == [
        (1, "DESCRIBE", "singer", None),
        (2, "QUERY", "SELECT COUNT(*) FROM singer", None),
        (3, "ANSWER", "5", None),
    ]
    assert first.steps[0].observation.startswith("table singer (5 rows)")
    # The client sent the action, not the model's text: the step's raw output is the action.
    assert json.loads(first.steps[2].raw_output) == {"action_type": "ANSWER", "argument": "5"}
    # Nor how its model's output ended: whether it was cut is not known.
    assert [s.truncated for s in first.steps] == [None, None, None]
    assert first.summary.reward == pytest.approx(sum(s.reward for s in first.steps))


def test_each_step_is_in_the_store_when_the_client_reads_its_answer(served: Served) -> None:
    with client(served) as env:
        env.reset(question_id="q-count")
        started = episodes(served.store, served.run_id)
        assert [(e.summary.outcome, len(e.steps)) for e in started] == [(None, 0)]
        for n, action in enumerate(ORACLE["q-count"][:2], start=1):
            env.step(action)
            (live,) = episodes(served.store, served.run_id)
            assert len(live.steps) == n and live.summary.outcome is None
    # The server timed the environment's part of each step; the client's generation it cannot.
    assert [(s.policy_seconds, s.env_seconds is not None) for s in live.steps] == [(None, True)] * 2


def test_eight_clients_at_once_each_play_their_own_episodes(served: Served) -> None:
    failures: list[BaseException] = []

    def player(question_id: str) -> None:
        try:
            with client(served) as env:
                for _ in range(2):
                    assert play(env, question_id).reward == 1.0
        except BaseException as exc:  # reported by the test thread
            failures.append(exc)

    threads = [threading.Thread(target=player, args=(q,)) for q in ["q-count", "q-france"] * 4]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not failures, failures
    found = episodes(served.store, served.run_id)
    keys = sorted((e.summary.question_id, e.summary.sample_index) for e in found)
    assert keys == [("q-count", i) for i in range(8)] + [("q-france", i) for i in range(8)]
    assert all(e.summary.outcome == "correct" for e in found)
    assert all(len(e.steps) == len(ORACLE[e.summary.question_id]) for e in found)
    run = served.store.get_run(served.run_id)
    assert run is not None and run.episodes_finished == 16 and run.accuracy == 1.0


def test_a_client_that_leaves_mid_episode_leaves_it_abandoned_with_its_steps(
    served: Served,
) -> None:
    env = client(served)
    env.reset(question_id="q-count")
    env.step(ORACLE["q-count"][0])
    env.close()
    with client(served) as other:
        other.reset(question_id="q-france")
        other.step(ORACLE["q-france"][0])
        other.reset(question_id="q-count")  # a new episode: the one in play is left

    def abandoned() -> list[EpisodeDetail]:
        found = episodes(served.store, served.run_id)
        return [e for e in found if e.summary.outcome == "abandoned"]

    wait_for(lambda: len(abandoned()) == 3)
    by_question = sorted((e.summary.question_id, len(e.steps)) for e in abandoned())
    assert by_question == [("q-count", 0), ("q-count", 1), ("q-france", 1)]
    assert {e.summary.failure_class for e in abandoned()} == {"abandoned"}


def test_a_malformed_action_gets_an_error_observation_and_the_session_goes_on(
    served: Served,
) -> None:
    with client(served) as env:
        early = env.step({"action_type": "QUERY", "argument": "SELECT 1"})
        assert early.done and "call reset()" in early.observation["error"]
        env.reset(question_id="q-count")
        for bad in (
            {"action_type": "DROP", "argument": "singer"},
            {"action_type": "QUERY", "argument": 3},
            {"action_type": "QUERY", "argument": "SELECT 1", "sql": "x"},
            {},
        ):
            answer = env.step(bad)
            assert not answer.done and answer.reward == 0.0, bad
            assert "action_type and argument, or raw_output" in answer.observation["error"], bad
            assert answer.observation["step"] == 0
        unparsed = env.step({"raw_output": "I think the answer is five"})
        assert unparsed.observation["step"] == 1 and unparsed.observation["error"]
        assert play(env, "q-count").reward == 1.0
    (first, second) = sorted(episodes(served.store, served.run_id), key=lambda e: e.summary.id)
    assert [(s.action, s.parsed, s.raw_output) for s in first.steps] == [
        ("QUERY", False, "I think the answer is five")
    ]
    assert second.summary.outcome == "correct"


def test_a_message_that_is_no_json_object_in_a_text_frame_gets_an_error_and_the_session_goes_on(
    served: Served,
) -> None:
    """OpenEnv's handler closed the session (and lost its episode) on `null`, a list or a
    binary frame."""
    url = served.url.replace("http://", "ws://", 1) + "/ws"
    with connect(url) as ws:

        def ask(message: object) -> dict[str, Any]:
            ws.send(message if isinstance(message, str) else json.dumps(message))
            answer: dict[str, Any] = json.loads(ws.recv(timeout=30))
            return answer

        assert ask({"type": "reset", "data": {"question_id": "q-count"}})["type"] == "observation"
        for bad, kind in (("null", "null"), ("[1, 2]", "an array"), ("3", "a number"),
                          ('"step"', "a string"), ("true", "true")):  # fmt: skip
            answer = ask(bad)
            assert answer["type"] == "error", bad
            assert answer["data"]["message"].endswith(f"not {kind}"), answer
        ws.send(b'{"type": "state"}')  # a binary frame
        assert json.loads(ws.recv(timeout=30))["data"]["message"].endswith("not a binary frame")
        for action in ORACLE["q-count"]:
            last = ask({"type": "step", "data": action})
        assert last["data"]["reward"] == 1.0 and last["data"]["done"], last
    [episode] = episodes(served.store, served.run_id)
    assert (episode.summary.outcome, len(episode.steps)) == ("correct", 3)


def test_a_question_id_never_names_a_file(served: Served, bench: Bench, tmp_path: Path) -> None:
    with client(served) as env:
        for qid in ("../database/concerts/concerts", "/etc/passwd", "q-count/../q-count"):
            with pytest.raises(RuntimeError, match="unknown question id"):
                env.reset(question_id=qid)
        # A db_id from the client is no reset argument: refused, and never opened.
        with pytest.raises(RuntimeError, match="not 'db_id'"):
            env.reset(question_id="q-count", db_id="../../etc")
        assert env.reset(question_id="q-count").observation["db_id"] == "concerts"
    items = json.loads(bench.questions.read_text())
    items[0]["db_id"] = "../concerts"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(items))
    with pytest.raises(DatasetError, match="not a plain folder name"):
        load_dataset(bad, bench.db_dir)


def test_text_no_utf8_holds_is_stored_and_answered_as_text(served: Served) -> None:
    # A client's JSON escape for a lone surrogate: the id's error failed to serialize (the
    # client read "Error serializing to JSON"), and the step's text failed its write.
    with client(served) as env:
        with pytest.raises(RuntimeError, match=r"unknown question id 'q\\ud800' in dataset"):
            env.reset(question_id="q\ud800")
        env.reset(question_id="q-count")
        assert env.step({"raw_output": "ANSWER \ud800"}).done
    (episode,) = episodes(served.store, served.run_id)
    assert [(s.raw_output, s.argument) for s in episode.steps] == [("ANSWER \ufffd", "\ufffd")]


def test_the_training_step_and_group_go_with_the_episode(served: Served) -> None:
    with client(served) as env:
        play(env, "q-count", train_step=3, group_index=1)
        with pytest.raises(RuntimeError, match="train_step must be a whole number"):
            env.reset(question_id="q-count", train_step="three")
        # Past what the store holds: told at reset, not as the store failing to write it.
        with pytest.raises(RuntimeError, match=r"train_step must be a whole number from "
                           r"-2,147,483,648 to 2,147,483,647 \(what the store holds\), not "
                           r"4,294,967,296"):  # fmt: skip
            env.reset(question_id="q-count", train_step=2**32)
        with pytest.raises(RuntimeError, match=r"seed must be a whole number from .* not "
                           r"18,446,744,073,709,551,616"):  # fmt: skip
            env.reset(question_id="q-count", seed=2**64)
        with pytest.raises(RuntimeError, match="group_index must be a whole number"):
            env.reset(question_id="q-count", group_index=1.5)
        # A misnamed argument is refused, not dropped: the episode would have no step.
        with pytest.raises(RuntimeError, match=r"reset takes question_id, seed, train_step, "
                           r"group_index, episode_id; not 'group', 'step'"):  # fmt: skip
            env.reset(question_id="q-count", step=4, group=2)
    (episode,) = question_episodes(served.store, served.run_id, "q-count")
    assert (episode.train_step, episode.group_index, episode.outcome) == (3, 1, "correct")


def test_health_schema_and_no_stateless_reset(served: Served) -> None:
    with urllib.request.urlopen(f"{served.url}/health") as response:
        assert json.load(response)["status"] == "healthy"
    with urllib.request.urlopen(f"{served.url}/schema") as response:
        schema = json.load(response)
    action = schema["action"]["properties"]
    assert action["action_type"]["anyOf"][0]["enum"] == ["DESCRIBE", "SAMPLE", "QUERY", "ANSWER"]
    assert {"argument", "raw_output"} <= action.keys() and "malformed" not in action
    assert {"question", "tables", "result", "error", "step"} <= schema["observation"][
        "properties"
    ].keys()
    request = urllib.request.Request(f"{served.url}/reset", data=b"{}", method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request)
    assert refused.value.code in (404, 405)
    assert episodes(served.store, served.run_id) == []


def test_the_typed_client(served: Served) -> None:
    with SQLEnvClient(served.url).sync() as env:
        opened = env.reset(question_id="q-count")
        assert opened.observation.tables == ["singer", "concert"]
        result = env.step(SQLAction(action_type="QUERY", argument="SELECT COUNT(*) FROM singer"))
        assert result.observation.result.splitlines()[-1].strip() == "5"
        assert env.state().step_count == 1
        result = env.step(SQLAction(action_type="ANSWER", argument="5", raw_output="ANSWER: 5"))
        assert result.done and result.reward == 1.0
    (episode,) = episodes(served.store, served.run_id)
    assert episode.steps[-1].raw_output == "ANSWER: 5"


def test_a_token_is_wanted_from_every_client_but_the_health_probe(
    tmp_path: Path, bench: Bench
) -> None:
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    with serving(store, env_spec(bench), token="s3cret") as served:
        with urllib.request.urlopen(f"{served.url}/health") as response:
            assert response.status == 200
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{served.url}/schema")
        assert refused.value.code == 401
        with pytest.raises(ConnectionError):
            GenericEnvClient(base_url=served.url).sync().reset(question_id="q-count")
        wrong = {"Authorization": "Bearer nope"}
        with pytest.raises(ConnectionError):
            GenericEnvClient(base_url=served.url, headers=wrong).sync().reset()
        with SQLEnvClient(served.url, token="s3cret").sync() as env:
            assert env.reset(question_id="q-count").observation.db_id == "concerts"
    store.close()


def test_stopping_the_server_abandons_the_episodes_in_play(tmp_path: Path, bench: Bench) -> None:
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    with serving(store, env_spec(bench)) as served:
        env = client(served)
        env.reset(question_id="q-count")
        env.step(ORACLE["q-count"][0])
    run = store.get_run(served.run_id)
    assert run is not None and run.status == "completed"
    (episode,) = episodes(store, served.run_id)
    assert (episode.summary.outcome, len(episode.steps)) == ("abandoned", 1)
    store.close()


def test_an_episode_the_store_failed_to_finish_ends_abandoned_with_the_server(
    tmp_path: Path, bench: Bench
) -> None:
    """A session whose step the store did not take ends its episode (the client is told);
    the episode's row, written when it began, must not stay unfinished in a completed run."""
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    with serving(store, env_spec(bench)) as served:
        # What such a session leaves: an episode begun, with no step and no outcome.
        store.sink(served.run_id).write(IterationBatch(started=[start("q-count", 7)]))
        env = client(served)
        env.reset(question_id="q-france")
        for action in ORACLE["q-france"]:
            env.step(action)
    run = store.get_run(served.run_id)
    assert run is not None and run.status == "completed"
    played = {(e.summary.sample_index, e.summary.outcome) for e in episodes(store, served.run_id)}
    assert played == {(7, "abandoned"), (0, "correct")}
    store.close()


def test_the_manifest_is_openenv_s_and_names_the_served_environment(served: Served) -> None:
    from openenv.validation.parsers.openenv_yaml import OpenEnvYamlParser

    manifest = OpenEnvYamlParser().parse(REPO)
    with urllib.request.urlopen(f"{served.url}/metadata") as response:
        metadata = json.load(response)
    assert manifest.name == metadata["name"] == "rollscope_sql"
    assert manifest.reward is not None and manifest.reward.range == (-0.01, 1.0)


def test_a_session_past_max_sessions_is_refused_and_its_place_freed_on_close(
    tmp_path: Path, bench: Bench
) -> None:
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    with serving(store, env_spec(bench), max_sessions=1) as served:
        first = client(served)
        first.reset(question_id="q-count")
        with pytest.raises(RuntimeError, match="CAPACITY_REACHED"):
            client(served).reset(question_id="q-france")
        first.close()
        again: list[Any] = []

        def admitted() -> bool:  # the server frees the place once it has seen the close
            env = client(served)
            try:
                env.reset(question_id="q-france")
            except RuntimeError:
                env.close()
                return False
            again.append(env)
            return True

        wait_for(admitted)
        with again[0] as env:
            for action in ORACLE["q-france"]:
                env.step(action)
    outcomes = sorted(
        (e.summary.question_id, e.summary.outcome) for e in episodes(store, served.run_id)
    )
    assert outcomes == [("q-count", "abandoned"), ("q-france", "correct")]
    store.close()
