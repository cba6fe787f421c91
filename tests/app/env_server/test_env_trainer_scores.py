"""A trainer's scores reach the server's run: `ServerTools.callback(trainer)` posts each
batch's advantages and reward functions' values (`POST /trainer-scores`), which the server
records on the episodes its sessions played, as TRL's own completions files hold them; the
route refuses a malformed body and anyone without the server's token."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from storage.store import Store
from tests.app.env_server.conftest import Bench, Served, env_spec, serving, wait_for
from tests.support.tool_scores import GROUP, STEPS, assert_scored_as_logged, played, tool_trainer


def test_a_grpo_trainers_scores_are_recorded_on_the_servers_episodes(
    tiny_checkpoint: Path, served: Served, bench: Bench, tmp_path: Path
) -> None:
    from app.training.server_tools import ServerTools
    from app.trl import training_dataset

    tools = ServerTools(served.url)
    rows = training_dataset(
        None, questions=str(bench.questions), db_dir=str(bench.db_dir), tools=True
    )
    trainer = tool_trainer(tiny_checkpoint, tmp_path / "out", rows, tools)
    trainer.add_callback(tools.callback(trainer))
    trainer.train()

    # The last sessions' episodes end once their clients have gone, a moment after training;
    # an unanswered one ends after its batch was scored, and keeps the scores.
    wait_for(lambda: _finished(served) == STEPS * GROUP * 2)
    assert_scored_as_logged(
        served.store, tmp_path / "store.db", served.run_id, tmp_path / "out",
        "ServerToolEnvironment",
    )  # fmt: skip


def _finished(served: Served) -> int:
    run = served.store.get_run(served.run_id)
    return 0 if run is None else run.episodes_finished


def _post(url: str, body: object, token: str | None = None) -> tuple[int, dict[str, Any]]:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(
        url + "/trainer-scores", data=json.dumps(body).encode(), headers=headers, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=20) as answer:
            return answer.status, json.load(answer)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)


def test_the_route_scores_known_episodes_and_refuses_bad_bodies(
    served: Served, bench: Bench, tmp_path: Path
) -> None:
    from app.env_client import SQLEnvClient

    with SQLEnvClient(served.url).sync() as env:
        reset = env.reset(question_id="q-count", train_step=0)
        index = reset.observation.metadata["sample_index"]
        score = {"question_id": "q-count", "sample_index": index, "advantage": 0.5}
        status, answer = _post(
            served.url,
            {"scores": [{**score, "rewards": {"correct": 1.0}}, {**score, "sample_index": 99}]},
        )
        assert (status, answer) == (200, {"scored": 1, "unknown": 1})
        for bad in (
            {"scores": [{**score, "advantage": "NaN"}]},  # not a finite number
            # Python's json writes these bare: FastAPI's own 422 echoed them and failed (500).
            {"scores": [{**score, "advantage": float("nan")}]},
            {"scores": [{**score, "rewards": {"correct": float("inf")}}]},
            # Names the store cannot key on (PostgreSQL refused them with a 500).
            {"scores": [{**score, "rewards": {"x" * 201: 1.0}}]},
            {"scores": [{**score, "rewards": {"a\x00b": 1.0}}]},
            {"scores": [{**score, "rewards": {" ": 1.0}}]},
            {"scores": [{**score, "question_id": "q" * 201}]},
            {"scores": [{**score, "sample_index": -1}]},
            {"scores": [{**score, "extra": 1}]},
            {"score": []},
            [score],
        ):
            status, answer = _post(served.url, bad)
            assert status == 422 and answer["detail"], bad
    (episode_id, _, _, advantage) = played(tmp_path / "store.db", served.run_id)[0]
    assert advantage == 0.5
    assert dict(served.store.episode_origins([episode_id])[episode_id].rewards) == {"correct": 1.0}


def test_the_route_wants_the_servers_token(bench: Bench, tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'token.db'}")
    try:
        with serving(store, env_spec(bench), token="s3cret") as running:
            body = {"scores": []}
            assert _post(running.url, body)[0] == 401
            assert _post(running.url, body, token="wrong")[0] == 401
            assert _post(running.url, body, token="s3cret") == (200, {"scored": 0, "unknown": 0})
    finally:
        store.close()


def test_any_loop_sends_its_trainers_scores_with_the_client(
    bench: Bench, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import app.env_client
    from app.env_client import ScoresNotRecorded, SQLEnvClient, send_trainer_scores

    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        with serving(store, env_spec(bench), token="s3cret") as running:
            with SQLEnvClient(running.url, token="s3cret").sync() as env:
                indexes = [
                    env.reset(question_id="q-count").observation.metadata["sample_index"]
                    for _ in range(3)
                ]
            scores = [
                {"question_id": "q-count", "sample_index": i, "advantage": 0.25 * n}
                for n, i in enumerate(indexes)
            ]
            scores[1]["rewards"] = {"correct": 1.0}
            with pytest.raises(ValueError, match="finite"):
                send_trainer_scores(
                    running.url, [{**scores[0], "advantage": float("nan")}], token="s3cret"
                )
            with pytest.raises(ScoresNotRecorded, match="HTTP 401"):
                send_trainer_scores(running.url, scores, token="wrong")
            # More scores than one request may carry go in several.
            monkeypatch.setattr(app.env_client, "MOST_SCORES", 2)
            unknown = {"question_id": "q-none", "sample_index": 0, "advantage": 1.0}
            answer = send_trainer_scores(running.url, [*scores, unknown], token="s3cret")
            assert answer == {"scored": 3, "unknown": 1}
            url = running.url
        with pytest.raises(ScoresNotRecorded, match="no answer from"):
            send_trainer_scores(url, scores, token="s3cret", timeout=5)
        advantages = sorted(a for *_, a in played(tmp_path / "store.db", running.run_id))
        assert advantages == [0.0, 0.25, 0.5]
    finally:
        store.close()
