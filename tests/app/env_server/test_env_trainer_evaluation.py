"""A tool-calling trainer's evaluation against environment servers (`ServerTools`): given
`eval_url`, its evaluation rollouts are a second server's run, each at the step it evaluated
(a resumed trainer replacing the evaluations it plays again there); without one, they are
the training server's, with no training step, apart from the training curves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from storage.read_models import EpisodeFilter
from storage.store import Store
from storage.training import played_again, training_steps
from tests.app.env_server.conftest import Bench, Served, env_spec, serving, wait_for
from tests.support.benchmark import held_out
from tests.support.tool_scores import GROUP, failing_at_call, spread_reward, tool_trainer

pytestmark = pytest.mark.slow

TRAINED = ["q-count", "q-france"]
EVALUATED = ["q-avg", "q-join"]
DRAWN = GROUP * 2
"""Episodes of a training step, and of an evaluation: two questions, GROUP samples each."""


def _trainer(tiny_checkpoint: Path, bench: Bench, out: Path, tools: Any, reward: Any) -> Any:
    from app.trl import training_dataset

    def rows(ids: list[str]) -> Any:
        return training_dataset(
            questions=str(bench.questions), db_dir=str(bench.db_dir), question_ids=ids,
            tools=True,
        )  # fmt: skip

    trainer = tool_trainer(
        tiny_checkpoint, out, rows(TRAINED), tools, reward, eval_rows=rows(EVALUATED),
        max_steps=3, eval_strategy="steps", eval_steps=1, per_device_eval_batch_size=DRAWN,
        num_generations_eval=GROUP, save_strategy="steps", save_steps=1,
    )  # fmt: skip
    trainer.add_callback(tools.callback(trainer))
    return trainer


def _finished(served: Served) -> int:
    run = served.store.get_run(served.run_id)
    return 0 if run is None else run.episodes_finished


def _questions(served: Served) -> set[str]:
    found = served.store.list_episodes(EpisodeFilter(run_ids=(served.run_id,)), limit=500)
    return {e.question_id for e in found.items}


def test_evaluation_goes_to_its_own_server_at_the_step_evaluated(
    tiny_checkpoint: Path, bench: Bench, tmp_path: Path
) -> None:
    from app.training.server_tools import ServerTools

    eval_file = held_out(bench.questions, EVALUATED, tmp_path / "eval.json")
    eval_spec = env_spec(Bench(eval_file, bench.db_dir), name="env-eval")
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    out = tmp_path / "out"
    with serving(store, env_spec(bench)) as trained, serving(store, eval_spec) as evaluated:

        def train(reward: Any, checkpoint: str | None) -> None:
            tools = ServerTools(trained.url, eval_url=evaluated.url)
            try:
                _trainer(tiny_checkpoint, bench, out, tools, reward).train(
                    resume_from_checkpoint=checkpoint
                )
            finally:
                tools.close()  # the crashed trainer's sessions end as its process would

        # The reward's calls: step 0, evaluation at 1, step 1, evaluation at 2, step 2
        # (crashes); checkpoint 1 was saved after the evaluation at 1.
        with pytest.raises(RuntimeError, match="node lost"):
            train(failing_at_call(5), None)
        wait_for(lambda: _finished(evaluated) == 2 * DRAWN)
        train(spread_reward, str(out / "checkpoint-1"))
        wait_for(lambda: _finished(evaluated) == 4 * DRAWN)

        assert _questions(trained) == set(TRAINED)
        assert _questions(evaluated) == set(EVALUATED)
        steps = training_steps(store, evaluated.run_id)
        assert [(s.train_step, s.episodes) for s in steps] == [(1, DRAWN), (2, DRAWN), (3, DRAWN)]
        assert played_again(store, evaluated.run_id).by_step == {2: DRAWN}
        # The trainer's scores of its evaluation batches went to the evaluation's server.
        flt = EpisodeFilter(run_ids=(evaluated.run_id,))
        details = [store.get_episode(e.id) for e in store.list_episodes(flt, limit=500).items]
        assert all(d is not None and d.trainer_advantage is not None for d in details)
    store.close()


def test_without_an_evaluation_server_evaluation_has_no_training_step(
    tiny_checkpoint: Path, served: Served, bench: Bench, tmp_path: Path
) -> None:
    from app.training.server_tools import ServerTools

    tools = ServerTools(served.url)
    with pytest.warns(UserWarning, match="evaluation rollouts are recorded on .* without a"):
        _trainer(tiny_checkpoint, bench, tmp_path / "out", tools, spread_reward).train()
    wait_for(lambda: _finished(served) == 6 * DRAWN)
    steps = training_steps(served.store, served.run_id)
    assert [(s.train_step, s.episodes) for s in steps] == [(0, DRAWN), (1, DRAWN), (2, DRAWN)]
    flt = EpisodeFilter(run_ids=(served.run_id,))
    every = served.store.list_episodes(flt, limit=500).items
    assert {e.question_id for e in every if e.train_step is not None} == set(TRAINED)
    assert {e.question_id for e in every if e.train_step is None} == set(EVALUATED)
