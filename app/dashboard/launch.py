"""Launch form logic: validate what a person typed and turn it into a queued run."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from app.fanout.target import RayTarget, TargetError
from rollout_core.checkpoints import CheckpointError, check_checkpoint_dir
from rollout_core.errors import RollscopeError
from rollout_core.settings import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_CONCURRENCY,
    DEFAULT_STEP_BUDGET,
    EndpointSettings,
    EnvironmentSettings,
    GenerationSettings,
    SettingsError,
)
from rollout_core.specs import PlannedRun, RunRequest, check_base_url
from rollout_core.specs import build_spec as build_run_spec
from storage.store import Store

SCRIPTED_POLICIES = ("oracle", "random")
MAX_SAMPLES = 64
MAX_STEP_BUDGET = 50
MAX_QUESTIONS = 5000
MAX_RAY_WORKERS = 256
_CHECKPOINT_SEARCH_DEPTH = 3


class LaunchError(RollscopeError, ValueError):
    """A form value that cannot start a run; the message names it and the fix."""


@dataclass(frozen=True, slots=True)
class LaunchRequest:
    """The Launch form's fields, as typed."""

    policy: str
    """`oracle`, `random`, `hf:<checkpoint dir>` or `openai:<server URL>`."""
    dataset: str
    """`demo` or a questions file path."""
    run_name: str
    limit: int | None = 5
    question_ids: str = ""
    """Comma- or space-separated question ids; overrides `limit` when given."""
    samples: int = 1
    step_budget: int = DEFAULT_STEP_BUDGET
    temperature: float = 0.0
    seed: int = 0
    batch_size: int = DEFAULT_BATCH_SIZE
    model: str = ""
    """For `openai:`: the model name the server serves."""
    api_key_env: str = ""
    """For `openai:`: the variable holding the API key (a name ending in `_API_KEY`), if any."""
    concurrency: int = DEFAULT_CONCURRENCY
    """For `openai:`: requests in flight (also the batch size)."""


def find_checkpoints(roots: Sequence[Path]) -> list[Path]:
    """Checkpoint directories (holding config.json) under the roots, a few levels deep."""
    found: set[Path] = set()
    for root in roots:
        if not root.is_dir():
            continue
        for depth in range(_CHECKPOINT_SEARCH_DEPTH + 1):
            pattern = "/".join(["*"] * depth + ["config.json"])
            found.update(p.parent.resolve() for p in root.glob(pattern))
    return sorted(found)


def resolve_policy(policy: str, roots: Sequence[Path]) -> str:
    """The policy spec to run; hf checkpoints must lie under a configured root."""
    policy = policy.strip()
    if policy in SCRIPTED_POLICIES:
        return policy
    if policy.startswith("openai:"):
        try:
            return f"openai:{check_base_url(policy[7:])}"
        except RollscopeError as exc:
            raise LaunchError(str(exc)) from None
    if not policy.startswith("hf:"):
        raise LaunchError(
            f"unknown policy {policy!r}; choose oracle, random, hf:<checkpoint dir> "
            "or openai:<server URL>"
        )
    raw = policy[3:].strip()
    if not raw:
        raise LaunchError("hf: needs a checkpoint directory, e.g. hf:/models/ckpt-1000")
    if not roots:
        raise LaunchError(
            "no checkpoint roots configured; start the dashboard with --checkpoint-root DIR"
        )
    path = Path(raw).expanduser().resolve()
    if not any(path.is_relative_to(root.resolve()) for root in roots):
        allowed = ", ".join(str(r) for r in roots)
        raise LaunchError(f"checkpoint {path} is outside the checkpoint roots ({allowed})")
    try:
        check_checkpoint_dir(path)
    except CheckpointError as exc:  # e.g. a config.json but no weights: a half-saved checkpoint
        raise LaunchError(str(exc)) from None
    return f"hf:{path}"


def parse_question_ids(text: str) -> tuple[str, ...]:
    """Ids separated by commas, spaces or new lines, duplicates dropped, order kept."""
    return tuple(dict.fromkeys(p for p in re.split(r"[\s,]+", text) if p))


def build_spec(req: LaunchRequest, roots: Sequence[Path]) -> PlannedRun:
    """A validated plan for the form's request (the form's own caps, then the shared checks)."""
    name = req.run_name.strip()
    if not name:
        raise LaunchError("run name is empty; give the run a name such as ckpt-1000-demo")
    if not 1 <= req.samples <= MAX_SAMPLES:
        raise LaunchError(f"samples must be between 1 and {MAX_SAMPLES}, got {req.samples}")
    if not 1 <= req.step_budget <= MAX_STEP_BUDGET:
        raise LaunchError(
            f"step budget must be between 1 and {MAX_STEP_BUDGET}, got {req.step_budget}"
        )
    if not 0.0 <= req.temperature <= 2.0:
        raise LaunchError(f"temperature must be between 0 and 2, got {req.temperature}")
    ids = parse_question_ids(req.question_ids)
    if not ids and (req.limit is None or not 1 <= req.limit <= MAX_QUESTIONS):
        raise LaunchError(f"number of questions must be between 1 and {MAX_QUESTIONS}")
    policy = resolve_policy(req.policy, roots)
    endpoint = server_endpoint(req) if policy.startswith("openai:") else None
    try:
        generation = dataclasses.replace(
            GenerationSettings(), temperature=req.temperature, seed=req.seed,
            batch_size=endpoint.concurrency if endpoint else req.batch_size, endpoint=endpoint,
        )  # fmt: skip
        environment = dataclasses.replace(EnvironmentSettings(), step_budget=req.step_budget)
        return build_run_spec(
            RunRequest(
                policy=policy,
                dataset=req.dataset.strip() or "demo",
                name=name,
                limit=None if ids else req.limit,
                question_ids=ids,
                samples=req.samples,
                generation=generation,
                environment=environment,
            )
        )
    except RollscopeError as exc:
        raise LaunchError(f"{_message(exc)}") from exc


def server_endpoint(req: LaunchRequest) -> EndpointSettings:
    """The server settings of an `openai:` request.

    The worker runs on the dashboard's host with its environment, so the key variable must
    be one meant for an API key (`*_API_KEY`): a form can never send, say, a database
    password to a URL of its choosing.
    """
    name = req.api_key_env.strip()
    if name and not name.endswith("_API_KEY"):
        raise LaunchError(f"API key variable {name!r} must be a name ending in _API_KEY")
    try:
        return EndpointSettings(
            model=req.model.strip(), api_key_env=name or None, concurrency=req.concurrency
        )
    except SettingsError as exc:
        label = {"model": "server model", "api_key_env": "API key variable"}
        raise LaunchError(f"{label.get(exc.field, exc.field)} {exc.problem}") from None


def queue_run(store: Store, req: LaunchRequest, roots: Sequence[Path]) -> int:
    """Validate the request and create a queued run; returns its id."""
    plan = build_spec(req, roots)
    if store.find_run(plan.spec.name) is not None:
        raise LaunchError(f"a run named {plan.spec.name!r} exists; choose another name")
    try:
        return store.create_run(plan.spec, episodes_planned=plan.planned, status="queued")
    except RollscopeError as exc:
        raise LaunchError(_message(exc)) from exc


def ray_target(address: str | None, *, workers: int, gpus_per_worker: float) -> RayTarget | None:
    """The Ray target of a launch (None: a worker process on this host plays it)."""
    if address is None:
        return None
    if not 1 <= workers <= MAX_RAY_WORKERS:
        raise LaunchError(f"Ray workers must be between 1 and {MAX_RAY_WORKERS}, got {workers}")
    try:
        return RayTarget(address, workers, gpus_per_worker)
    except TargetError as exc:
        raise LaunchError(str(exc)) from None


def worker_flags(target: RayTarget | None) -> list[str]:
    """The extra `rollscope run` flags of the launched worker."""
    return [] if target is None else target.cli_flags()


def _message(exc: BaseException) -> str:
    # KeyError wraps its message in quotes; show the text itself.
    return str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
