"""`rollscope run`'s options as one typed object, and the request they ask for.

Each field is one flag: its type, default and help are declared here once. What a value may be
is checked where every face builds its runs (`rollout_core.specs`, `app.fanout.target`); here
only which flags go together.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Annotated

import typer

from app.cli.options import flag
from app.cli.stores import DEFAULT_STORE
from rollout_core.errors import RollscopeError
from rollout_core.policies.registry import split_spec
from rollout_core.policies.registry import usage as policy_usage
from rollout_core.settings import (
    DEFAULT_CONCURRENCY,
    DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_RETRY_SECONDS,
    EndpointSettings,
    EnvironmentSettings,
    GenerationSettings,
)
from rollout_core.specs import RunRequest, SettingsRequest

_GEN = GenerationSettings()
_ENV = EnvironmentSettings()
_Opt = typer.Option


class FlagError(RollscopeError, ValueError):
    """Flags that do not go together; the message names them and what to give instead."""


@dataclass(frozen=True, slots=True)
class RunOptions:
    """Every option of `rollscope run`, None where not given."""

    policy: Annotated[str | None, _Opt(help=f"{policy_usage()}; default: oracle.")] = None
    dataset: Annotated[
        str | None, _Opt(help="demo, demo:train, demo:test or a questions file.")
    ] = None
    questions: Annotated[str | None, _Opt(help="Spider/BIRD questions JSON.")] = None
    db_dir: Annotated[str | None, _Opt(help="Folder of <db_id>/<db_id>.sqlite.")] = None
    store: Annotated[
        str,
        _Opt("--store", envvar="ROLLSCOPE_STORE", help="SQLAlchemy URL or SQLite path."),
    ] = DEFAULT_STORE
    limit: Annotated[int | None, _Opt(help="First N questions only.")] = None
    question_id: Annotated[list[str] | None, _Opt(help="Only these ids (repeatable).")] = None
    samples: Annotated[int | None, _Opt(help="Episodes per question (GRPO group); default 1.")] = (
        None
    )
    batch_size: Annotated[
        int | None, _Opt(help=f"Episodes per policy call; default {_GEN.batch_size}.")
    ] = None
    step_budget: Annotated[
        int | None, _Opt(help=f"Actions per episode; default {_ENV.step_budget}.")
    ] = None
    temperature: Annotated[
        float | None, _Opt(help=f"0 for greedy; default {_GEN.temperature}.")
    ] = None
    top_p: Annotated[float | None, _Opt(help=f"Nucleus sampling; default {_GEN.top_p}.")] = None
    max_new_tokens: Annotated[
        int | None, _Opt(help=f"Tokens per action; default {_GEN.max_new_tokens}.")
    ] = None
    device: Annotated[str | None, _Opt(help="auto, cpu, cuda, cuda:1 ...; default auto.")] = None
    dtype: Annotated[str | None, _Opt(help="auto, bf16, fp16, fp32; default auto.")] = None
    threads: Annotated[int | None, _Opt(help="CPU threads for torch while generating.")] = None
    seed: Annotated[int | None, _Opt(help=f"Run seed; default {_GEN.seed}.")] = None
    sample_rows: Annotated[
        int | None, _Opt(help=f"Rows SAMPLE shows; default {_ENV.sample_rows}.")
    ] = None
    max_observation_tokens: Annotated[
        int | None,
        _Opt(help=f"Longest observation in model tokens; default {_ENV.max_observation_tokens}."),
    ] = None
    query_timeout: Annotated[
        float | None,
        _Opt(help=f"Seconds one query may run; default {_ENV.sandbox.deadline_seconds}."),
    ] = None
    name: Annotated[str | None, _Opt(help="Run name (unique in the store).")] = None
    model: Annotated[str | None, _Opt(help="openai: the model name the server serves.")] = None
    api_key_env: Annotated[
        str | None, _Opt(help="openai: name of the environment variable holding the API key.")
    ] = None
    concurrency: Annotated[
        int | None,
        _Opt(help=f"openai: requests in flight; default {DEFAULT_CONCURRENCY} (sets the batch)."),
    ] = None
    timeout_seconds: Annotated[
        float | None,
        _Opt(
            "--request-timeout",
            help=f"openai: seconds a reply may take; default {DEFAULT_REQUEST_TIMEOUT:g}.",
        ),
    ] = None
    retry_seconds: Annotated[
        float | None,
        _Opt(
            "--retry-deadline",
            help=f"openai: seconds to retry a request; default {DEFAULT_RETRY_SECONDS:g}.",
        ),
    ] = None
    run_id: Annotated[int | None, _Opt(help="Play a queued run (the dashboard's worker).")] = None
    resume: Annotated[
        str | None, _Opt(help="Finish an unfinished run (name or id) with its own settings.")
    ] = None
    quiet: Annotated[bool, _Opt(help="No progress bar.")] = False
    ray_address: Annotated[
        str | None,
        _Opt("--ray", help="Fan out over Ray: local (a cluster on this machine) or an address."),
    ] = None
    workers: Annotated[int | None, _Opt(help="Ray workers, each with its own policy.")] = None
    gpus_per_worker: Annotated[
        float | None, _Opt(help="GPUs each Ray worker holds (0.5 shares one); default 0.")
    ] = None

    def stored_run(self) -> str | None:
        """The run `--run-id` or `--resume` names (None: a new run); FlagError when both are
        given, or with a setting, which a stored run keeps as recorded."""
        if self.run_id is not None and self.resume is not None:
            raise FlagError("give --run-id or --resume, not both")
        if self.run_id is None and self.resume is None:
            return None
        given = [flag(RunOptions, name) for name in _SETTINGS if getattr(self, name) is not None]
        if given:
            raise FlagError(
                f"{', '.join(given)} cannot change a stored run: --run-id and --resume play "
                "it with its own settings"
            )
        return str(self.run_id) if self.run_id is not None else str(self.resume)

    def request(self) -> RunRequest:
        """The new run these options ask for; SettingsError names a bad value's field,
        FlagError two flags that choose the questions each their own way."""
        if self.limit is not None and self.question_id:
            raise FlagError("give --limit or --question-id, not both: each chooses the questions")
        values = {name: getattr(self, name) for name in _SETTINGS_REQUEST}
        generation, environment = SettingsRequest(**values, endpoint=self.endpoint()).build()
        return RunRequest(
            policy=self.policy or "oracle",
            dataset=self.dataset,
            questions=self.questions,
            db_dir=self.db_dir,
            name=self.name,
            limit=self.limit,
            question_ids=tuple(self.question_id or ()),
            samples=1 if self.samples is None else self.samples,
            generation=generation,
            environment=environment,
        )

    def endpoint(self) -> EndpointSettings | None:
        """The openai policy's server settings (None without --model: `build_spec` asks the
        openai policy for it); FlagError for server flags given to another policy."""
        given = {k: v for k in ("model", *_ENDPOINT) if (v := getattr(self, k)) is not None}
        if given and split_spec(self.policy or "oracle")[0] != "openai":
            flags = ", ".join(flag(RunOptions, k) for k in given)
            raise FlagError(
                f"{flags} {'applies' if len(given) == 1 else 'apply'} to the openai policy only"
            )
        if self.model is None:
            return None
        del given["model"]
        return EndpointSettings(model=self.model, **given)


_SETTINGS_REQUEST = tuple(
    f.name for f in dataclasses.fields(SettingsRequest) if f.name != "endpoint"
)
"""The flags `SettingsRequest` takes by the same names."""
_ENDPOINT = ("api_key_env", "concurrency", "timeout_seconds", "retry_seconds")
"""The server flags besides --model, named as `EndpointSettings` names them."""
_PLACEMENT = frozenset(
    {"store", "run_id", "resume", "quiet", "ray_address", "workers", "gpus_per_worker"}
)
"""Where and how a run plays, not what it plays: these go with --run-id and --resume too."""
_SETTINGS = tuple(f.name for f in dataclasses.fields(RunOptions) if f.name not in _PLACEMENT)
