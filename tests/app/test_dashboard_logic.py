"""The dashboard's non-UI parts: statistics, launch validation, settings, serve, jobs, escaping."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from app import jobs
from app.dashboard import analysis, launch
from app.dashboard.components.render import escape_markdown
from app.dashboard.serve import absolute_store_url, streamlit_command
from app.dashboard.settings import load_settings, to_env
from rollout_core.records import RunSpec
from rollout_core.settings import EnvironmentSettings, GenerationSettings
from storage.read_models import QuestionComparison, RunCell, StoredStep
from storage.store import Store

# -- analysis ------------------------------------------------------------------------------------


def _row(qid: str, a: tuple[int, int] | None, b: tuple[int, int] | None) -> QuestionComparison:
    cells = {}
    for run_id, res in ((1, a), (2, b)):
        if res is not None:
            cells[run_id] = RunCell(run_id, res[1], res[0], list(range(res[1])))
    return QuestionComparison(qid, "db", f"question {qid}", cells)


def test_bootstrap_is_seeded_and_brackets_the_mean_difference() -> None:
    rng = np.random.default_rng(1)
    a = (rng.random(200) < 0.4).astype(float)
    b = (rng.random(200) < 0.6).astype(float)
    ci = analysis.bootstrap_accuracy_diff(a, b)
    assert ci is not None and ci.n == 200
    assert ci.low < ci.diff < ci.high
    assert ci.diff == pytest.approx(b.mean() - a.mean())
    assert analysis.bootstrap_accuracy_diff(a, b) == ci


def test_bootstrap_of_identical_runs_is_a_zero_width_interval() -> None:
    a = np.array([1.0, 0.0, 1.0])
    ci = analysis.bootstrap_accuracy_diff(a, a.copy())
    assert ci is not None and (ci.low, ci.diff, ci.high) == (0.0, 0.0, 0.0)
    assert analysis.bootstrap_accuracy_diff(np.array([]), np.array([])) is None
    with pytest.raises(ValueError, match="differ in length"):
        analysis.bootstrap_accuracy_diff(a, a[:2])


def test_outcome_matrix_pairs_questions_and_uses_success_rates() -> None:
    rows = [
        _row("both", (1, 1), (1, 1)),
        _row("a", (1, 1), (0, 1)),
        _row("b", (2, 4), (4, 4)),  # 2/4 counts as solved
        _row("none", (0, 2), (1, 4)),
        _row("only-a-played", (1, 1), None),
    ]
    cells = analysis.outcome_matrix(rows, 1, 2)
    assert {k: [r.question_id for r in v] for k, v in cells.items()} == {
        "both right": ["both", "b"],
        "only A": ["a"],
        "only B": [],
        "both wrong": ["none"],
    }
    _, a, b = analysis.paired_questions(rows, 1, 2)
    assert a.tolist() == [1.0, 1.0, 0.5, 0.0] and b.tolist() == [1.0, 0.0, 1.0, 0.25]


def _steps(*actions: tuple[str, str]) -> list[StoredStep]:
    return [
        StoredStep(
            "q",
            0,
            step_no=i + 1,
            prompt=(),
            raw_output="",
            action=kind,
            argument=arg,  # type: ignore[arg-type]
            parsed=True,
            observation="",
            error=None,
            reward=0.0,
            done=False,
            id=i,
        )
        for i, (kind, arg) in enumerate(actions)
    ]


def test_first_divergence_ignores_whitespace_and_case_and_sees_length() -> None:
    a = _steps(("DESCRIBE", "singer"), ("QUERY", "SELECT 1"), ("ANSWER", "1"))
    b = _steps(("DESCRIBE", "Singer"), ("QUERY", "select  1"), ("ANSWER", "2"))
    assert analysis.first_divergence([a, b]) == 2
    assert analysis.first_divergence([a, a[:2]]) == 2
    assert analysis.first_divergence([a, a]) is None
    assert analysis.first_divergence([a]) is None


# -- launch validation ---------------------------------------------------------------------------


def _request(**kw: object) -> launch.LaunchRequest:
    values: dict[str, object] = {
        "policy": "oracle",
        "dataset": "demo",
        "run_name": "r1",
        "limit": 2,
    }
    values.update(kw)
    return launch.LaunchRequest(**values)  # type: ignore[arg-type]


def test_build_spec_for_the_demo_dataset() -> None:
    plan = launch.build_spec(_request(samples=3, step_budget=7, temperature=0.5), ())
    spec = plan.spec
    assert isinstance(spec, RunSpec)
    assert (spec.policy, spec.limit, spec.samples, plan.planned) == ("oracle", 2, 3, 6)
    assert spec.environment == EnvironmentSettings(step_budget=7)
    assert spec.generation == GenerationSettings(temperature=0.5)
    assert Path(spec.db_dir).is_dir() and Path(spec.questions_path).is_file()


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"run_name": "  "}, "run name is empty"),
        ({"samples": 0}, "samples must be between 1 and"),
        ({"step_budget": 99}, "step budget must be between"),
        ({"temperature": 3.0}, "temperature must be between 0 and 2"),
        ({"seed": -1}, "seed must be 0 or more"),
        ({"limit": 0}, "number of questions must be between"),
        ({"policy": "gpt"}, "unknown policy 'gpt'"),
        ({"policy": "hf:/somewhere"}, "no checkpoint roots configured"),
        ({"dataset": "/no/such/file.json"}, "no dataset roots configured"),
        ({"question_ids": "nope-1, nope-2"}, "unknown question ids"),
    ],
)
def test_build_spec_rejects_bad_values(changes: dict[str, object], message: str) -> None:
    with pytest.raises(launch.LaunchError, match=message):
        launch.build_spec(_request(**changes), ())


def test_checkpoints_must_live_under_a_root(tmp_path: Path) -> None:
    root = tmp_path / "models"
    ckpt = root / "run1" / "checkpoint-1000"
    ckpt.mkdir(parents=True)
    (ckpt / "config.json").write_text("{}")
    with pytest.raises(launch.LaunchError, match=r"no .*weights"):
        launch.resolve_policy(f"hf:{ckpt}", [root])
    (ckpt / "model.safetensors").write_bytes(b"\0" * 64)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "config.json").write_text("{}")
    assert launch.find_checkpoints([root]) == [ckpt.resolve()]
    assert launch.resolve_policy(f"hf:{ckpt}", [root]) == f"hf:{ckpt.resolve()}"
    with pytest.raises(launch.LaunchError, match="outside the checkpoint roots"):
        launch.resolve_policy(f"hf:{tmp_path / 'elsewhere'}", [root])
    with pytest.raises(launch.LaunchError, match="outside the checkpoint roots"):
        launch.resolve_policy(f"hf:{root}/../elsewhere", [root])
    with pytest.raises(launch.LaunchError, match=r"has no config\.json"):
        launch.resolve_policy(f"hf:{root / 'run1'}", [root])


def test_queue_run_creates_a_queued_run_and_refuses_a_taken_name(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "s.db"))
    run_id = launch.queue_run(store, _request(run_name="first"), ())
    run = store.get_run(run_id)
    assert run is not None and run.status == "queued" and run.episodes_planned == 2
    with pytest.raises(launch.LaunchError, match="a run named 'first' exists"):
        launch.queue_run(store, _request(run_name="first"), ())
    assert launch.parse_question_ids("a, b\nc  a") == ("a", "b", "c")


# -- settings, serve, render ---------------------------------------------------------------------


def test_settings_round_trip_through_env(tmp_path: Path) -> None:
    env = to_env("sqlite:///x.db", read_only=True, checkpoint_roots=[tmp_path, tmp_path / "b"])
    got = load_settings(env)
    assert got.store_url == "sqlite:///x.db" and got.read_only
    assert got.checkpoint_roots == (tmp_path.resolve(), (tmp_path / "b").resolve())
    assert load_settings({}).store_url == "rollscope.db" and not load_settings({}).read_only


def test_serve_command_and_store_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cmd = streamlit_command(port=8765, host="127.0.0.1", headless=True)
    assert cmd[:4] == [sys.executable, "-m", "streamlit", "run"]
    assert cmd[4].endswith("app/dashboard/main.py") and Path(cmd[4]).is_file()
    assert cmd[cmd.index("--server.port") + 1] == "8765"
    assert cmd[cmd.index("--browser.gatherUsageStats") + 1] == "false"
    monkeypatch.chdir(tmp_path)
    assert absolute_store_url("a.db") == str(tmp_path.resolve() / "a.db")
    assert absolute_store_url("postgresql+psycopg://h/db") == "postgresql+psycopg://h/db"


def test_markdown_escaping() -> None:
    assert escape_markdown("<b>x</b> **y**") == r"\<b\>x\</b\> \*\*y\*\*"


# -- jobs ----------------------------------------------------------------------------------------


def test_cancel_marks_a_queued_run_without_signalling_this_process(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "s.db"))
    run_id = launch.queue_run(store, _request(run_name="queued"), ())
    # The store recorded this (creating) process's pid: cancelling must not signal it.
    jobs.cancel_run(store, run_id)
    run = store.get_run(run_id)
    assert run is not None and run.status == "cancelled"
    jobs.cancel_run(store, run_id)  # already over: nothing to do
    with pytest.raises(ValueError, match="no run with id 999"):
        jobs.cancel_run(store, 999)


def test_cancel_sends_sigterm_to_the_worker_this_process_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(str(tmp_path / "s.db"))
    run_id = launch.queue_run(store, _request(run_name="live"), ())
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    monkeypatch.setattr(jobs, "worker_command", lambda url, rid: sleeper)
    pid = jobs.start_worker(store.url, run_id, log_dir=tmp_path)
    assert jobs.worker_running(run_id) and pid != os.getpid()
    jobs.cancel_run(store, run_id)
    proc = jobs._workers[run_id]
    assert proc.wait(timeout=10) == -15
    assert (tmp_path / f"run-{run_id}.log").is_file()
    # The worker is gone before it could mark the run: the next cancel does it.
    jobs.cancel_run(store, run_id)
    run = store.get_run(run_id)
    assert run is not None and run.status == "cancelled"


def test_worker_command_runs_the_cli() -> None:
    assert jobs.worker_command("x.db", 3) == [
        sys.executable,
        "-m",
        "app.cli",
        "run",
        "--run-id",
        "3",
        "--store",
        "x.db",
    ]


def test_dashboard_never_imports_torch(tmp_path: Path) -> None:
    code = f"""
import sys
from pathlib import Path
sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
import os
from tests.app.dashboard_store import build_fixture_store
fx = build_fixture_store(Path({str(tmp_path)!r}))
os.environ["ROLLSCOPE_STORE"] = fx.url
from streamlit.testing.v1 import AppTest
main = str(Path({str(Path(__file__).resolve().parents[2])!r}) / "app/dashboard/main.py")
for page, query in [(None, {{}}), ("views/episodes.py", {{}}),
                    ("views/replay.py", {{"episode": str(fx.query_episode)}}),
                    ("views/compare.py", {{"run": [str(fx.run_a), str(fx.run_b)]}}),
                    ("views/launch.py", {{}})]:
    at = AppTest.from_file(main, default_timeout=60).run()
    if page:
        at.switch_page(page)
    at.query_params.update(query)
    at.run()
    assert not at.exception, (page, [e.value for e in at.exception])
import app.jobs, app.dashboard.serve, app.dashboard.launch, app.dashboard.requery
heavy = sorted(m for m in ("torch", "transformers") if m in sys.modules)
print("HEAVY", heavy)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "HEAVY []" in out.stdout


def test_a_query_run_again_uses_the_sandbox_limits_its_run_played_under() -> None:
    from app.dashboard import requery
    from rollout_core.datasets import load_named_dataset
    from rollout_core.sandbox import SandboxLimits
    from rollout_core.settings import EnvironmentSettings
    from tests.storage.store_builders import spec

    ds = load_named_dataset("demo")
    question = ds.questions[0]
    path = ds.db_path(question.db_id)
    sql = "SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3"
    capped = dataclasses.replace(
        spec(), environment=EnvironmentSettings(sandbox=SandboxLimits(max_rows=1))
    )
    limits = requery.limits_of(capped.to_stored())
    assert limits.max_rows == 1
    again = requery.run_query(path, sql, limits=limits)
    # the observation text the model saw: one row shown, the rest counted
    assert again.text.splitlines()[1:] == ["1", "... 2 more rows"]
    assert requery.run_query(path, sql).text.splitlines()[1:] == ["1", "2", "3"]
    # a spec that cannot be read falls back to the defaults rather than failing the page
    assert requery.limits_of({"name": 3}) == SandboxLimits()
