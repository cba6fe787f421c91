"""Replay of an episode a resumed trainer played again says so; the new play's does not."""

from __future__ import annotations

import pytest

from app.dashboard.replay.origin import REPLAYED
from rollout_core.records import IterationBatch
from storage.store import Store
from tests.app.dashboard.apptest import open_page
from tests.app.dashboard.conftest import serve_env
from tests.support.records import finish, spec, start


def test_replay_says_an_earlier_play_was_replaced(
    tmp_path: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(f"sqlite:///{tmp_path}/runs.db")
    run_id = store.create_run(spec("grpo", kind="training"), episodes_planned=None)
    sink = store.sink(run_id)
    for sample in (0, 1):
        if sample == 1:
            store.mark_replayed(run_id, 0)  # resumed at step 0: the first play is replaced
        sink.write(IterationBatch(started=[start("q1", sample, train_step=0)]))
        sink.write(IterationBatch(finished=[finish("q1", sample, "wrong", 0.0, 1)]))
    store.close()
    serve_env(monkeypatch, f"sqlite:///{tmp_path}/runs.db")
    for episode, said in (("1", True), ("2", False)):
        captions = [c.value for c in open_page("replay/page.py", episode=episode).caption]
        assert (REPLAYED in captions) is said, episode
