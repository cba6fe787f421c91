"""Launch's OpenAI-compatible server target: the form's checks, and a run launched from the page
that a worker plays against a real `transformers serve`."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from app.dashboard.launch import form as launch
from app.dashboard.settings import ENV_CHECKPOINT_ROOTS, ENV_READ_ONLY, ENV_STORE
from rollout_core.settings import EndpointSettings
from storage.store import Store
from tests.app.dashboard.apptest import MAIN
from tests.support.serving import ServedModel

SERVER_OPTION = "OpenAI-compatible server..."


def request(**kw: object) -> launch.LaunchRequest:
    values: dict[str, object] = {
        "policy": "openai:http://127.0.0.1:8000/v1/",
        "dataset": "demo",
        "run_name": "served-1",
        "limit": 2,
        "model": "Qwen/Qwen2.5-0.5B-Instruct",
    }
    values.update(kw)
    return launch.LaunchRequest(**values)  # type: ignore[arg-type]


def test_the_server_target_builds_a_spec_with_its_endpoint() -> None:
    plan = launch.build_spec(request(api_key_env="VLLM_API_KEY", concurrency=8), ())
    spec = plan.spec
    assert spec.policy == "openai:http://127.0.0.1:8000/v1"
    assert spec.generation.endpoint == EndpointSettings(
        "Qwen/Qwen2.5-0.5B-Instruct", api_key_env="VLLM_API_KEY", concurrency=8
    )
    assert spec.generation.batch_size == 8  # one iteration's requests go out together


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"model": " "}, "server model is empty"),
        ({"api_key_env": "DATABASE_URL"}, "must be a name ending in _API_KEY"),
        ({"api_key_env": "MY KEY_API_KEY"}, "API key variable must be an environment variable"),
        ({"concurrency": 0}, "concurrency must be between 1 and 1024"),
        ({"policy": "openai:"}, "must look like http://HOST:PORT/v1"),
        ({"policy": "openai:http://user:pw@host/v1"}, "holds credentials"),
    ],
)
def test_the_server_target_refuses_bad_values(changes: dict[str, object], message: str) -> None:
    with pytest.raises(launch.LaunchError, match=message):
        launch.build_spec(request(**changes), ())


@pytest.fixture()
def own_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    db = tmp_path / "launch.db"
    Store(str(db)).close()
    monkeypatch.setenv(ENV_STORE, str(db))
    monkeypatch.delenv(ENV_READ_ONLY, raising=False)
    monkeypatch.delenv(ENV_CHECKPOINT_ROOTS, raising=False)
    return db


def fill(at: AppTest, url: str, model: str, key_env: str, name: str) -> None:
    at.selectbox[0].set_value(SERVER_OPTION).run()  # the server's fields show once it is chosen
    inputs = {t.label: t for t in at.text_input}
    inputs["Server URL"].set_value(url)
    inputs["Server model"].set_value(model)
    inputs["API key variable (optional)"].set_value(key_env)
    inputs["Run name"].set_value(name)
    at.number_input[0].set_value(2)  # questions
    at.number_input[2].set_value(2)  # step budget
    at.form_submit_button[0].click().run()


def test_launch_page_refuses_a_key_variable_that_is_not_an_api_key(own_store: Path) -> None:
    at = AppTest.from_file(str(MAIN), default_timeout=30).run()
    at.switch_page("launch/page.py").run()
    fill(at, "http://127.0.0.1:8000/v1", "m", "AWS_SECRET_ACCESS_KEY", "leak")
    assert "Not launched: 1 field to fix" in at.error[0].value
    problems = [c.value.replace("\\", "") for c in at.caption]
    assert any("must be a name ending in _API_KEY" in p for p in problems), problems
    assert Store(str(own_store), read_only=True).list_runs() == []


@pytest.mark.slow
def test_a_run_launched_on_the_page_is_played_against_the_server(
    own_store: Path, openai_server: ServedModel
) -> None:
    at = AppTest.from_file(str(MAIN), default_timeout=30).run()
    at.switch_page("launch/page.py").run()
    fill(at, openai_server.base_url, openai_server.model, "", "served-from-launch")
    assert not at.error, [e.value for e in at.error]
    deadline = time.monotonic() + 180
    while True:
        conn = sqlite3.connect(f"file:{own_store}?mode=ro", uri=True)
        row = conn.execute("SELECT status, spec, error FROM runs").fetchone()
        conn.close()
        if row[0] in ("completed", "failed"):
            break
        assert time.monotonic() < deadline, f"the worker did not finish: {row}"
        time.sleep(0.2)
    status, spec, error = row
    assert status == "completed", error
    endpoint = json.loads(spec)["generation"]["endpoint"]
    assert endpoint["model"] == openai_server.model and endpoint["api_key_env"] is None
    conn = sqlite3.connect(own_store)
    assert conn.execute("SELECT COUNT(*) FROM episodes WHERE outcome IS NOT NULL").fetchone() == (
        2,
    )
    conn.close()
