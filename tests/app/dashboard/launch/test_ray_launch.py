"""Launch offers the Ray target when the dashboard is started with `--ray-address`."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from app import jobs
from app.dashboard.launch.form import LaunchError, ray_target, worker_flags
from app.dashboard.settings import (
    ENV_CHECKPOINT_ROOTS,
    ENV_RAY_ADDRESS,
    ENV_READ_ONLY,
    ENV_STORE,
    load_settings,
    to_env,
)
from app.fanout.cluster import RAY_TAG
from app.fanout.target import RayTarget
from storage.store import Store
from tests.app.dashboard.apptest import MAIN


def test_the_ray_address_travels_to_the_dashboard_process() -> None:
    assert load_settings(to_env("s.db", ray_address="head:6379")).ray_address == "head:6379"
    assert load_settings(to_env("s.db")).ray_address is None


def test_a_launch_target_is_checked_and_becomes_worker_flags() -> None:
    assert ray_target(None, workers=2, gpus_per_worker=0) is None
    assert worker_flags(None) == []
    target = ray_target("head:6379", workers=4, gpus_per_worker=0.5)
    assert target == RayTarget("head:6379", 4, 0.5)
    assert worker_flags(target) == ["--ray", "head:6379", "--workers", "4", "--gpus-per-worker",
                                    "0.5"]  # fmt: skip
    with pytest.raises(LaunchError, match="Ray workers must be between 1 and"):
        ray_target("head:6379", workers=0, gpus_per_worker=0)
    with pytest.raises(LaunchError, match="--gpus-per-worker must be 0 or more"):
        ray_target("head:6379", workers=1, gpus_per_worker=-1)


def _launch_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ray: str | None) -> AppTest:
    url = str(tmp_path / "store.db")
    Store(url).close()
    monkeypatch.setenv(ENV_STORE, url)
    monkeypatch.delenv(ENV_READ_ONLY, raising=False)
    monkeypatch.delenv(ENV_CHECKPOINT_ROOTS, raising=False)
    if ray is None:
        monkeypatch.delenv(ENV_RAY_ADDRESS, raising=False)
    else:
        monkeypatch.setenv(ENV_RAY_ADDRESS, ray)
    at = AppTest.from_file(str(MAIN), default_timeout=30).run()
    at.switch_page("launch/page.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_without_a_ray_address_launch_offers_no_ray(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    at = _launch_page(tmp_path, monkeypatch, None)
    assert [c.label for c in at.checkbox] == []


@pytest.mark.slow
def test_launch_fans_a_run_out_on_ray(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("ray", reason="Ray is not installed: pip install -e '.[dev]'")
    at = _launch_page(tmp_path, monkeypatch, "local")
    assert at.checkbox[0].label == "Fan out on the Ray cluster at local"
    at.checkbox[0].check()
    workers = next(n for n in at.number_input if n.label.startswith("Ray workers"))
    workers.set_value(1)
    at.text_input[-1].set_value("oracle-on-ray")
    at.form_submit_button[0].click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]

    store = Store(str(tmp_path / "store.db"), read_only=True)
    run = store.find_run("oracle-on-ray")
    assert run is not None
    deadline = time.monotonic() + 240
    while run.status in ("queued", "running") and time.monotonic() < deadline:
        assert jobs.worker_exit_code(run.id) in (None, 0), jobs.worker_log_path(run.id).read_text()
        time.sleep(0.5)
        run = store.get_run(run.id)
        assert run is not None
    assert (run.status, run.episodes_finished, run.accuracy) == ("completed", 5, 1.0)
    assert store.run_tags(run.id) == {RAY_TAG: "local, 1 worker"}
