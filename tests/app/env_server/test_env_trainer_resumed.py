"""A trainer resumed from a checkpoint against the server: `ServerTools.callback` tells it the
step the trainer begins at (`POST /trainer-resumed`), and the run's episodes of that step and
later, which the trainer plays again, are marked replaced; the Training page reads each step
as its latest play."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from storage.training import played_again, training_steps
from tests.app.env_server.conftest import Bench, Served, wait_for
from tests.support.tool_scores import GROUP, failing_at_call, spread_reward, tool_trainer


def test_a_trainer_resumed_from_a_checkpoint_marks_the_steps_it_plays_again(
    tiny_checkpoint: Path, served: Served, bench: Bench, tmp_path: Path
) -> None:
    from app.training.server_tools import ServerTools
    from app.trl import training_dataset

    rows = training_dataset(
        None, questions=str(bench.questions), db_dir=str(bench.db_dir), tools=True
    )
    out = tmp_path / "out"

    def train(reward: Any, checkpoint: str | None) -> None:
        tools = ServerTools(served.url)
        trainer = tool_trainer(
            tiny_checkpoint, out, rows, tools, reward, max_steps=3, save_strategy="steps",
            save_steps=1,
        )  # fmt: skip
        trainer.add_callback(tools.callback(trainer))
        try:
            trainer.train(resume_from_checkpoint=checkpoint)
        finally:
            tools.close()  # the crashed trainer's sessions end as its process would end them

    with pytest.raises(RuntimeError, match="node lost"):
        train(failing_at_call(3), None)
    drawn = GROUP * 2
    wait_for(lambda: _finished(served) == 3 * drawn)
    train(spread_reward, str(out / "checkpoint-1"))
    wait_for(lambda: _finished(served) == 5 * drawn)
    steps = training_steps(served.store, served.run_id)
    assert [(s.train_step, s.episodes) for s in steps] == [(0, drawn), (1, drawn), (2, drawn)]
    assert played_again(served.store, served.run_id).by_step == {1: drawn, 2: drawn}


def _finished(served: Served) -> int:
    run = served.store.get_run(served.run_id)
    return 0 if run is None else run.episodes_finished


def test_the_route_refuses_a_step_that_is_not_one(served: Served) -> None:
    from app.env_client import NotRecorded, send_trainer_resumed

    assert send_trainer_resumed(served.url, 0) == 0  # nothing played yet
    for bad in ({"step": -1}, {"step": "one"}, {"step": 2**31}, {"step": 1, "x": 1}, {}, [1]):
        request = urllib.request.Request(
            served.url + "/trainer-resumed", data=json.dumps(bad).encode(),
            headers={"Content-Type": "application/json"}, method="POST",
        )  # fmt: skip
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=20)
        assert refused.value.code == 422, bad
    with pytest.raises(NotRecorded, match="refused the resumed step: HTTP 422"):
        send_trainer_resumed(served.url, -1)
    with pytest.raises(NotRecorded, match="no answer from"):
        send_trainer_resumed("http://127.0.0.1:9", 1, timeout=5)
