"""Forks of episodes an openai server played, as the dashboard's form and `--at first-error`
plan them: another policy drops the server's settings; the same server keeps them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app import batch
from app.forks import ForkRequest, plan_episode_fork, plan_failure_forks
from rollout_core.records import RunSpec
from rollout_core.settings import EndpointSettings, GenerationSettings, SettingsError
from rollout_core.specs import RunRequest
from storage.store import Store
from tests.support.benchmark import make_benchmark
from tests.support.fake_chat_server import FakeChatServer


@pytest.fixture()
def served(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Store, int, FakeChatServer]]:
    """A store holding `srv`, every fixture question played by a (scripted) openai server."""
    monkeypatch.setenv("SRV_KEY", "sk-test")
    server = FakeChatServer().start()
    questions, db_dir = make_benchmark(tmp_path / "bench")
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    endpoint = EndpointSettings(model=server.model, concurrency=4, api_key_env="SRV_KEY")
    request = RunRequest(
        policy=f"openai:{server.base_url}",
        questions=str(questions),
        db_dir=str(db_dir),
        name="srv",
        generation=GenerationSettings(batch_size=4, endpoint=endpoint),
    )
    run_id, prepared = batch.start_run(store, request)
    batch.play_run(store, run_id, prepared)
    yield store, run_id, server
    store.close()
    server.close()


def _stored(store: Store, run_id: int) -> RunSpec:
    run = store.get_run(run_id)
    assert run is not None
    return RunSpec.from_stored(run.spec)


def test_the_dashboard_forks_a_served_episode_with_the_oracle(
    served: tuple[Store, int, FakeChatServer],
) -> None:
    from app.dashboard.fork.form import ForkForm, queue_fork

    store, run_id, _ = served
    source = next(d for d in store.iter_episode_details(run_id) if len(d.steps) >= 2)
    fork_id = queue_fork(store, source.summary.id, 2, ForkForm("oracle", 0.0), [])
    spec = _stored(store, fork_id)
    assert (spec.policy, spec.checkpoint, spec.generation.endpoint) == ("oracle", None, None)
    assert spec.generation.batch_size == 4  # the source's settings but its server's


def test_every_failed_served_episode_forks_with_another_policy(
    served: tuple[Store, int, FakeChatServer],
) -> None:
    store, _, _ = served
    found = plan_failure_forks(store, "srv", ForkRequest(policy="random"))
    assert found.plan.spec.policy == "random" and found.plan.spec.generation.endpoint is None
    assert found.failed > 0


def test_a_fork_on_the_same_server_keeps_its_settings_under_the_ones_given(
    served: tuple[Store, int, FakeChatServer],
) -> None:
    store, run_id, server = served
    source = next(iter(store.iter_episode_details(run_id)))
    request = ForkRequest(policy=f"openai:{server.base_url}/", endpoint={"concurrency": 2})
    spec = plan_episode_fork(store, source.summary.id, 1, request).spec
    assert spec.generation.endpoint == EndpointSettings(
        model=server.model, concurrency=2, api_key_env="SRV_KEY"
    )
    assert spec.generation.batch_size == 2 and spec.checkpoint == server.model
    assert spec.name.startswith(f"srv-ep{source.summary.id}-step1-{server.model}-")


def test_a_server_setting_for_a_policy_that_is_no_server_is_refused(
    served: tuple[Store, int, FakeChatServer],
) -> None:
    store, run_id, _ = served
    source = next(iter(store.iter_episode_details(run_id)))
    with pytest.raises(SettingsError) as refused:
        plan_episode_fork(
            store, source.summary.id, 1, ForkRequest(policy="oracle", endpoint={"model": "m"})
        )
    assert refused.value.field == "model" and "openai policy only" in refused.value.problem
