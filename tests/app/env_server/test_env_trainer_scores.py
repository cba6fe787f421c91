"""A trainer's scores reach the server's run: `ServerTools.callback(trainer)` posts each
batch's advantages and reward functions' values (`POST /trainer-scores`), which the server
records on the episodes its sessions played, as TRL's own completions files hold them; the
route refuses a malformed body and anyone without the server's token."""

from __future__ import annotations

import json
import os
import sqlite3
import urllib.error
import urllib.request
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from storage.store import Store
from tests.app.env_server.conftest import Bench, Served, env_spec, serving, wait_for

GROUP = 2
STEPS = 2


def _spread_reward(*, completion_ids: list[list[int]], **_: Any) -> list[float]:
    """A reward that differs between samples, so that groups have advantages to record."""
    return [sum(ids) % 10 / 10.0 for ids in completion_ids]


def _episodes(path: Path, run_id: int) -> list[tuple[int, int, str, float | None]]:
    with closing(sqlite3.connect(path)) as db:
        return db.execute(
            "SELECT id, train_step, question, trainer_advantage FROM episodes "
            "WHERE run_id = ? ORDER BY id",
            (run_id,),
        ).fetchall()


def test_a_grpo_trainers_scores_are_recorded_on_the_servers_episodes(
    tiny_checkpoint: Path, served: Served, bench: Bench, tmp_path: Path
) -> None:
    import pyarrow.parquet as pq
    import trl
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from app.training.server_tools import ServerTools
    from app.trl import checkpointing_off, training_dataset

    os.environ["TRL_EXPERIMENTAL_SILENCE"] = "1"
    tok = AutoTokenizer.from_pretrained(tiny_checkpoint)
    tok.chat_template = (Path(trl.__file__).parent / "chat_templates/qwen2_5.jinja").read_text()
    tools = ServerTools(served.url)
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(tiny_checkpoint),
        processing_class=tok,
        reward_funcs=[_spread_reward],
        args=GRPOConfig(
            output_dir=str(tmp_path / "out"),
            per_device_train_batch_size=GROUP * 2,
            num_generations=GROUP,
            max_steps=STEPS,
            max_completion_length=8,
            use_cpu=True,
            bf16=False,
            **checkpointing_off(GRPOConfig),
            report_to=[],
            logging_steps=1,
            log_completions=True,
            save_strategy="no",
            disable_tqdm=True,
        ),
        train_dataset=training_dataset(
            None, questions=str(bench.questions), db_dir=str(bench.db_dir), tools=True
        ),
        environment_factory=tools,
    )
    trainer.add_callback(tools.callback(trainer))
    trainer.train()

    store_file = tmp_path / "store.db"
    # The last sessions' episodes end once their clients have gone, a moment after training.
    wait_for(lambda: len(_episodes(store_file, served.run_id)) == STEPS * GROUP * 2)
    wait_for(lambda: _finished(served) == STEPS * GROUP * 2)
    rows = _episodes(store_file, served.run_id)
    advantages = []
    for step in range(STEPS):
        path = tmp_path / "out" / "completions" / f"completions_{step + 1:05d}.parquet"
        logged = pq.read_table(path).to_pylist()
        # The sessions reset in the batch's order, so the step's episodes, by id, are the rows.
        played = [(i, q, a) for i, s, q, a in rows if s == step]
        assert len(played) == len(logged)
        origins = served.store.episode_origins([i for i, _, _ in played])
        for (episode_id, question, advantage), row in zip(played, logged, strict=True):
            assert question in row["prompt"][-1]["content"]
            # Kept through the episode's finish, which for an unanswered one came later.
            assert advantage == pytest.approx(row["advantage"], abs=1e-6)
            advantages.append(advantage)
            assert dict(origins[episode_id].rewards) == {
                "_spread_reward": pytest.approx(row["_spread_reward"], abs=1e-6),
                "ServerToolEnvironment": pytest.approx(row["ServerToolEnvironment"], abs=1e-6),
            }
    assert any(abs(a) > 1e-3 for a in advantages)


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
            {"scores": [{**score, "sample_index": -1}]},
            {"scores": [{**score, "extra": 1}]},
            {"score": []},
            [score],
        ):
            status, answer = _post(served.url, bad)
            assert status == 422, bad
    (episode_id, _, _, advantage) = _episodes(tmp_path / "store.db", served.run_id)[0]
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
