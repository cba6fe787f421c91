"""`rollscope run`'s options as one object, and the checks it shares with the dashboard's Launch:
a bad value is refused by the same code, in the same words, whichever face it came from."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.cli import cli
from app.cli.options import flag
from app.cli.run_options import FlagError, RunOptions
from app.dashboard.launch import form as launch
from rollout_core.sandbox import SandboxLimits
from rollout_core.settings import EndpointSettings, EnvironmentSettings, GenerationSettings
from rollout_core.specs import RunRequest


def test_every_field_is_a_flag_of_run_and_named_as_typed() -> None:
    shown = CliRunner().invoke(cli, ["run", "--help"], env={"COLUMNS": "200"}).output
    flags = [flag(RunOptions, f.name) for f in dataclasses.fields(RunOptions)]
    assert [f for f in flags if f not in shown] == []
    assert flag(RunOptions, "top_p") == "--top-p"
    assert flag(RunOptions, "timeout_seconds") == "--request-timeout"
    assert flag(RunOptions, "retry_seconds") == "--retry-deadline"
    assert flag(RunOptions, "ray_address") == "--ray"


def test_no_options_ask_for_the_default_run() -> None:
    assert RunOptions().stored_run() is None
    assert RunOptions().request() == RunRequest(
        policy="oracle", generation=GenerationSettings(), environment=EnvironmentSettings()
    )


def test_options_become_the_request_they_name() -> None:
    req = RunOptions(
        policy="random", dataset="demo:test", question_id=["a", "b"], samples=2,
        temperature=0.7, step_budget=4, query_timeout=0.5, name="r",
    ).request()  # fmt: skip
    assert (req.policy, req.dataset, req.limit, req.question_ids, req.samples, req.name) == (
        "random", "demo:test", None, ("a", "b"), 2, "r"
    )  # fmt: skip
    assert RunOptions(limit=3).request().limit == 3
    assert req.generation == GenerationSettings(temperature=0.7)
    assert req.environment == EnvironmentSettings(
        step_budget=4, sandbox=SandboxLimits(deadline_seconds=0.5)
    )


def test_a_server_run_sends_one_iteration_at_once_unless_a_batch_is_given() -> None:
    served = RunOptions(policy="openai:http://h/v1", model="m", concurrency=8).request()
    assert served.generation.endpoint == EndpointSettings("m", concurrency=8)
    assert served.generation.batch_size == 8
    smaller = RunOptions(policy="openai:http://h/v1", model="m", concurrency=8, batch_size=4)
    assert smaller.request().generation.batch_size == 4


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (RunOptions(resume="r", temperature=0.5, limit=2),
         "--limit, --temperature cannot change a stored run"),
        (RunOptions(run_id=3, resume="r"), "give --run-id or --resume, not both"),
        (RunOptions(concurrency=8, timeout_seconds=5),
         "--concurrency, --request-timeout apply to the openai policy only"),
    ],
)  # fmt: skip
def test_flags_that_do_not_go_together(options: RunOptions, message: str) -> None:
    with pytest.raises(FlagError, match=message):
        options.stored_run()
        options.request()


def test_placement_goes_with_a_stored_run() -> None:
    opts = RunOptions(resume="r", ray_address="local", workers=2, quiet=True, store="s.db")
    assert opts.stored_run() == "r"
    assert RunOptions(run_id=7).stored_run() == "7"


def _launch(**kw: object) -> launch.LaunchRequest:
    values: dict[str, object] = {"policy": "oracle", "dataset": "demo", "run_name": "r1"}
    return launch.LaunchRequest(**(values | kw))  # type: ignore[arg-type]


# (CLI flags, the Launch form's fields, the problem both must name)
SHARED = [
    (["--batch-size", "0"], {"batch_size": 0}, "must be at least 1, got 0"),
    (["--question-id", "nope-1"], {"question_ids": "nope-1"},
     "unknown question ids in dataset 'demo': 'nope-1'"),
    (["--policy", "openai:http://u:pw@127.0.0.1:9/v1", "--model", "m"],
     {"policy": launch.SERVER, "server_url": "http://u:pw@127.0.0.1:9/v1", "model": "m"},
     "the server URL holds credentials"),
    (["--policy", "openai:http://127.0.0.1:9/v1", "--model", "m", "--concurrency", "0"],
     {"policy": launch.SERVER, "server_url": "http://127.0.0.1:9/v1", "model": "m",
      "concurrency": 0},
     "concurrency must be between 1 and 1024, got 0"),
]  # fmt: skip


@pytest.mark.parametrize(("flags", "fields", "problem"), SHARED)
def test_a_bad_value_is_refused_alike_by_the_cli_and_by_launch(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    flags: list[str],
    fields: dict[str, object],
    problem: str,
) -> None:
    from app import cli as cli_package

    monkeypatch.setattr(sys, "argv", ["rollscope", "run", *flags, "--store", str(tmp_path / "s")])
    with pytest.raises(SystemExit) as exited:
        cli_package.main()
    shown = capsys.readouterr().err
    assert exited.value.code == 2 and problem in shown and len(shown.strip().splitlines()) == 1
    with pytest.raises(launch.LaunchError) as refused:
        launch.build_spec(_launch(**fields), ())
    assert problem in str(refused.value)


def test_a_bad_ray_target_is_refused_alike_by_the_cli_and_by_launch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from app import cli as cli_package

    flags = ["--ray", "head:6379", "--workers", "2", "--gpus-per-worker", "-0.5"]
    monkeypatch.setattr(sys, "argv", ["rollscope", "run", *flags, "--store", str(tmp_path / "s")])
    with pytest.raises(SystemExit):
        cli_package.main()
    shown = capsys.readouterr().err
    with pytest.raises(launch.LaunchError) as refused:
        launch.ray_target("head:6379", workers=2, gpus_per_worker=-0.5)
    assert shown.strip() == f"error: {refused.value}"
    assert refused.value.errors == {"ray": "--gpus-per-worker must be 0 or more, got -0.5"}
