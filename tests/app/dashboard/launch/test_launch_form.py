"""Launch's form checks: every field at once, checkpoints and datasets under their roots."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.dashboard.launch import form as launch
from rollout_core.records import RunSpec
from rollout_core.settings import EnvironmentSettings, GenerationSettings
from storage.store import Store


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


def test_a_pasted_hf_policy_string_is_a_checkpoint_directory(tmp_path: Path) -> None:
    ckpt = tmp_path / "models" / "run1" / "checkpoint-1000"
    assert launch.form_policy(launch.OTHER_CHECKPOINT, f" 'hf:{ckpt}' ") == f"hf:{ckpt}"
    assert launch.form_policy(launch.OTHER_CHECKPOINT, str(ckpt)) == f"hf:{ckpt}"
    with pytest.raises(launch.LaunchError, match="oracle takes no checkpoint directory"):
        launch.form_policy("oracle", f"hf:{ckpt}")
    assert launch.form_policy("oracle", "  ") == "oracle"


def test_a_dataset_must_lie_under_a_dataset_root(tmp_path: Path) -> None:
    root = tmp_path / "datasets"
    root.mkdir()
    inside = root / "questions.json"
    assert launch.resolve_dataset(str(inside), [root]) == str(inside.resolve())
    assert launch.resolve_dataset("demo:test", []) == "demo:test"
    with pytest.raises(launch.LaunchError, match="outside the dataset roots"):
        launch.resolve_dataset("/etc/passwd", [root])
    with pytest.raises(launch.LaunchError, match="outside the dataset roots"):
        launch.resolve_dataset(str(root / ".." / "elsewhere.json"), [root])
    with pytest.raises(launch.LaunchError, match="no dataset roots configured"):
        launch.resolve_dataset("/etc/passwd", [])


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    # Before: the dataset alone; once it was fixed, the ids alone; then the name.
    long_name = "N" * 1500
    with pytest.raises(launch.LaunchError) as bad:
        launch.build_spec(
            _request(dataset="demo:test", question_ids="bogus1, bogus2", run_name=long_name), ()
        )
    assert set(bad.value.errors) == {"question_ids", "run_name"}
    assert "unknown question ids" in bad.value.errors["question_ids"]
    assert "1,500 characters long" in bad.value.errors["run_name"]
    root = tmp_path / "datasets"
    root.mkdir()
    missing = str(root / "nope.json")
    with pytest.raises(launch.LaunchError) as bad:
        launch.build_spec(_request(dataset=missing, run_name=long_name), (), [root])
    assert set(bad.value.errors) == {"dataset", "run_name"}
    assert "dataset not found" in bad.value.errors["dataset"]
    # A taken name comes with the other problems too.
    store = Store(str(tmp_path / "s.db"))
    launch.queue_run(store, _request(run_name="first"), ())
    with pytest.raises(launch.LaunchError) as bad:
        launch.queue_run(store, _request(run_name="first", question_ids="bogus"), ())
    assert set(bad.value.errors) == {"question_ids", "run_name"}
    assert "a run named 'first' exists" in bad.value.errors["run_name"]
