"""Launch form logic: validate what a person typed and turn it into a queued run.

Every field is checked at once and each problem is reported against its field
(`LaunchError.errors`), so the form can show it under that field. A policy kind is one entry of
`POLICY_KINDS` (prefix -> resolver); the form lists `SCRIPTED_POLICIES`, the checkpoints under
the roots, and `OTHER_CHECKPOINT` for a typed directory.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from app.fanout import target as fanout_target
from app.fanout.target import RayTarget, TargetError
from rollout_core.checkpoints import CheckpointError, check_checkpoint_dir
from rollout_core.datasets import DatasetError, select_questions
from rollout_core.errors import RollscopeError
from rollout_core.keys import run_name_problem
from rollout_core.settings import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_CONCURRENCY,
    DEFAULT_STEP_BUDGET,
    EndpointSettings,
    SettingsError,
)
from rollout_core.specs import PlannedRun, RunRequest, SettingsRequest, check_base_url
from rollout_core.specs import build_spec as build_run_spec
from rollout_core.specs import resolve_dataset as load_run_dataset
from storage.store import Store

SCRIPTED_POLICIES = ("oracle", "random")
OTHER_CHECKPOINT = "other checkpoint directory..."
"""The policy choice that runs the directory typed into the checkpoint field."""
SERVER = "OpenAI-compatible server..."
"""The policy choice that plays through the server named in the server fields."""
BUILTIN_DATASETS = ("demo", "demo:train", "demo:test")
"""Always allowed; any other dataset must lie under a dataset root."""
MAX_SAMPLES = 64
MAX_STEP_BUDGET = 50
MAX_QUESTIONS = 5000
MAX_RAY_WORKERS = 256
_CHECKPOINT_SEARCH_DEPTH = 3

FORM = "form"
"""`LaunchError.errors` key of a problem that belongs to no single field."""


class LaunchError(RollscopeError, ValueError):
    """Form values that cannot start a run: `errors` maps each field to its one-line problem
    (the message is the first of them)."""

    def __init__(self, message: str, field: str = FORM, errors: dict[str, str] | None = None):
        super().__init__(message)
        self.errors = errors if errors is not None else {field: message}


@dataclass(frozen=True, slots=True)
class LaunchRequest:
    """The Launch form's fields, as typed."""

    policy: str
    """`oracle`, `random`, `hf:<checkpoint dir>`, `openai:<server URL>`, or `OTHER_CHECKPOINT`
    (use `checkpoint`)."""
    dataset: str
    """`demo`, `demo:train`, `demo:test`, or a questions file under a dataset root."""
    run_name: str
    limit: int | None = 5
    question_ids: str = ""
    """Comma- or space-separated question ids; overrides `limit` when given."""
    samples: int = 1
    step_budget: int = DEFAULT_STEP_BUDGET
    temperature: float = 0.0
    seed: int = 0
    batch_size: int = DEFAULT_BATCH_SIZE
    checkpoint: str = ""
    """The checkpoint directory field (a pasted `hf:/path` works too)."""
    server_url: str = ""
    """For `SERVER`: the server's base URL."""
    model: str = ""
    """For `openai:`: the model name the server serves."""
    api_key_env: str = ""
    """For `openai:`: the variable holding the API key (a name ending in `_API_KEY`), if any."""
    concurrency: int = DEFAULT_CONCURRENCY
    """For `openai:`: requests in flight (also the batch size)."""


@dataclass(frozen=True, slots=True)
class Roots:
    """Where Launch may read checkpoints and datasets from (the dashboard's options)."""

    checkpoints: tuple[Path, ...] = ()
    datasets: tuple[Path, ...] = ()


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


def _inside(path: Path, roots: Sequence[Path]) -> bool:
    return any(path.is_relative_to(root.resolve()) for root in roots)


def _resolve_hf(raw: str, roots: Sequence[Path]) -> str:
    if not raw:
        raise LaunchError(
            "hf: needs a checkpoint directory, e.g. hf:/models/ckpt-1000", "checkpoint"
        )
    if not roots:
        raise LaunchError(
            "no checkpoint roots configured; start the dashboard with --checkpoint-root DIR",
            "checkpoint",
        )
    path = Path(raw).expanduser().resolve()
    if not _inside(path, roots):
        allowed = ", ".join(str(r) for r in roots)
        raise LaunchError(
            f"checkpoint {path} is outside the checkpoint roots ({allowed})", "checkpoint"
        )
    try:
        check_checkpoint_dir(path)
    except CheckpointError as exc:  # e.g. a config.json but no weights: a half-saved checkpoint
        raise LaunchError(str(exc), "checkpoint") from None
    return f"hf:{path}"


def _resolve_openai(raw: str, roots: Sequence[Path]) -> str:
    try:
        return f"openai:{check_base_url(raw)}"
    except RollscopeError as exc:
        raise LaunchError(str(exc), "server_url") from None


PolicyResolver = Callable[[str, Sequence[Path]], str]
"""(what follows `kind:`, the checkpoint roots) -> the policy spec to run; LaunchError else."""
POLICY_KINDS: dict[str, PolicyResolver] = {"hf": _resolve_hf, "openai": _resolve_openai}


def resolve_policy(policy: str, roots: Sequence[Path]) -> str:
    """The policy spec to run; a checkpoint must lie under a configured root."""
    policy = policy.strip()
    if policy in SCRIPTED_POLICIES:
        return policy
    kind, sep, arg = policy.partition(":")
    if not sep or kind not in POLICY_KINDS:
        kinds = ", ".join(f"{k}:<...>" for k in POLICY_KINDS)
        raise LaunchError(
            f"unknown policy {policy!r}; choose {', '.join(SCRIPTED_POLICIES)} or {kinds}",
            "policy",
        )
    return POLICY_KINDS[kind](arg.strip(), roots)


def checkpoint_text(text: str) -> str:
    """The checkpoint field as a directory: blanks and quotes trimmed, an `hf:` prefix (as the
    Runs page shows policies) dropped."""
    raw = text.strip().strip("'\"").strip()
    return raw[3:].strip() if raw.startswith("hf:") else raw


def form_policy(choice: str, checkpoint: str, server_url: str = "") -> str:
    """The policy the form asks for: the choice, `hf:<checkpoint field>` for
    `OTHER_CHECKPOINT`, `openai:<server URL>` for `SERVER`; a checkpoint typed for a choice
    that takes none is refused."""
    typed = checkpoint_text(checkpoint)
    if choice == SERVER:
        return f"openai:{server_url.strip()}"
    if choice == OTHER_CHECKPOINT or choice.strip() == "hf:":
        return f"hf:{typed}"
    if typed:
        raise LaunchError(
            f"{choice} takes no checkpoint directory; clear this field, or choose "
            f"{OTHER_CHECKPOINT!r} to run the checkpoint typed here",
            "checkpoint",
        )
    return choice


def resolve_dataset(text: str, roots: Sequence[Path]) -> str:
    """`demo`, `demo:train`, `demo:test`, or a path under a dataset root (resolved)."""
    name = text.strip() or "demo"
    if name in BUILTIN_DATASETS:
        return name
    allowed = " or ".join(BUILTIN_DATASETS)
    if not roots:
        raise LaunchError(
            f"no dataset roots configured, so only {allowed} can run; start the dashboard with "
            "--dataset-root DIR to run files under DIR",
            "dataset",
        )
    path = Path(name).expanduser().resolve()
    if not _inside(path, roots):
        shown = ", ".join(str(r) for r in roots)
        raise LaunchError(
            f"dataset {path} is outside the dataset roots ({shown}); use {allowed} or a file "
            "under a root",
            "dataset",
        )
    return str(path)


def parse_question_ids(text: str) -> tuple[str, ...]:
    """Ids separated by commas, spaces or new lines, duplicates dropped, order kept."""
    return tuple(dict.fromkeys(p for p in re.split(r"[\s,]+", text) if p))


def _field_errors(req: LaunchRequest) -> dict[str, str]:
    """The form's own caps, one problem per field."""
    errors: dict[str, str] = {}
    name = req.run_name.strip()
    if not name:
        errors["run_name"] = "run name is empty; give the run a name such as ckpt-1000-demo"
    elif problem := run_name_problem(name):
        errors["run_name"] = f"the run name {problem}; choose another name"
    if not 1 <= req.samples <= MAX_SAMPLES:
        errors["samples"] = f"samples must be between 1 and {MAX_SAMPLES}, got {req.samples}"
    if not 1 <= req.step_budget <= MAX_STEP_BUDGET:
        errors["step_budget"] = (
            f"step budget must be between 1 and {MAX_STEP_BUDGET}, got {req.step_budget}"
        )
    if not 0.0 <= req.temperature <= 2.0:
        errors["temperature"] = f"temperature must be between 0 and 2, got {req.temperature}"
    if req.seed < 0:
        errors["seed"] = f"seed must be 0 or more, got {req.seed}"
    if not parse_question_ids(req.question_ids) and (
        req.limit is None or not 1 <= req.limit <= MAX_QUESTIONS
    ):
        errors["limit"] = f"number of questions must be between 1 and {MAX_QUESTIONS}"
    return errors


def _dataset_errors(dataset: str, question_ids: tuple[str, ...]) -> dict[str, str]:
    """A dataset (resolved) that does not read, or question ids it does not hold: checked
    with the other fields, not after them (the run's own checks stop at the first)."""
    try:
        found = load_run_dataset(dataset, None, None)
        if not found.questions:
            return {"dataset": f"dataset {found.name!r} has no questions to run"}
    except RollscopeError as exc:
        return {"dataset": _message(exc)}
    if question_ids:
        try:
            select_questions(found, question_ids=question_ids)
        except RollscopeError as exc:
            return {"question_ids": _message(exc)}
    return {}


_SETTINGS_FIELDS = frozenset({"samples", "step_budget", "temperature", "seed", "limit"})
"""Form fields whose names the shared settings checks use (`SettingsError.field`)."""


def _spec_field(exc: RollscopeError) -> str:
    if isinstance(exc, SettingsError) and exc.field in _SETTINGS_FIELDS:
        return exc.field
    text = str(exc)
    if "question id" in text:
        return "question_ids"
    if isinstance(exc, DatasetError):
        return "dataset"
    if "run name" in text:
        return "run_name"
    return FORM


def build_spec(
    req: LaunchRequest, roots: Sequence[Path] | Roots, dataset_roots: Sequence[Path] = ()
) -> PlannedRun:
    """A validated plan for the form's request: every field checked, all problems raised
    together in one LaunchError (`roots` alone: the checkpoint roots, no dataset roots)."""
    if not isinstance(roots, Roots):
        roots = Roots(tuple(roots), tuple(dataset_roots))
    errors = _field_errors(req)
    policy = dataset = ""
    try:
        policy = resolve_policy(
            form_policy(req.policy, req.checkpoint, req.server_url), roots.checkpoints
        )
    except LaunchError as exc:
        errors.update({k: v for k, v in exc.errors.items() if k not in errors})
    try:
        dataset = resolve_dataset(req.dataset, roots.datasets)
    except LaunchError as exc:
        errors.update(exc.errors)
    else:
        errors.update(_dataset_errors(dataset, parse_question_ids(req.question_ids)))
    endpoint = None
    if policy.startswith("openai:"):
        try:
            endpoint = server_endpoint(req)
        except LaunchError as exc:
            errors.update(exc.errors)
    if errors:
        raise LaunchError(next(iter(errors.values())), errors=errors)
    ids = parse_question_ids(req.question_ids)
    try:
        generation, environment = SettingsRequest(
            temperature=req.temperature, seed=req.seed, step_budget=req.step_budget,
            batch_size=None if endpoint else req.batch_size, endpoint=endpoint,
        ).build()  # fmt: skip
        return build_run_spec(
            RunRequest(
                policy=policy,
                dataset=dataset,
                name=req.run_name.strip(),
                limit=None if ids else req.limit,
                question_ids=ids,
                samples=req.samples,
                generation=generation,
                environment=environment,
            )
        )
    except RollscopeError as exc:
        raise LaunchError(_message(exc), _spec_field(exc)) from exc


def server_endpoint(req: LaunchRequest) -> EndpointSettings:
    """The server settings of an `openai:` request.

    The worker runs on the dashboard's host with its environment, so the key variable must
    be one meant for an API key (`*_API_KEY`): a form can never send, say, a database
    password to a URL of its choosing.
    """
    name = req.api_key_env.strip()
    if name and not name.endswith("_API_KEY"):
        raise LaunchError(
            f"API key variable {name!r} must be a name ending in _API_KEY", "api_key_env"
        )
    try:
        return EndpointSettings(
            model=req.model.strip(), api_key_env=name or None, concurrency=req.concurrency
        )
    except SettingsError as exc:
        label = {"model": "server model", "api_key_env": "API key variable"}
        field = {"model": "server_model"}.get(exc.field, exc.field)
        raise LaunchError(f"{label.get(exc.field, exc.field)} {exc.problem}", field) from None


def queue_run(
    store: Store,
    req: LaunchRequest,
    roots: Sequence[Path] | Roots,
    dataset_roots: Sequence[Path] = (),
) -> int:
    """Validate the request and create a queued run; returns its id."""
    errors: dict[str, str] = {}
    try:
        plan = build_spec(req, roots, dataset_roots)
    except LaunchError as exc:
        errors = exc.errors
    name = req.run_name.strip()
    # A taken name is said with the other problems, not after they are fixed.
    if "run_name" not in errors and name and store.run_named(name) is not None:
        errors["run_name"] = f"a run named {name!r} exists; choose another name"
    if errors:
        raise LaunchError(next(iter(errors.values())), errors=errors)
    try:
        return store.create_run(plan.spec, episodes_planned=plan.planned, status="queued")
    except RollscopeError as exc:
        raise LaunchError(_message(exc)) from exc


def _message(exc: BaseException) -> str:
    # KeyError wraps its message in quotes; show the text itself.
    return str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)


def ray_target(address: str | None, *, workers: int, gpus_per_worker: float) -> RayTarget | None:
    """The Ray target of a launch (None: a worker process on this host plays it)."""
    if address is None:
        return None
    if not 1 <= workers <= MAX_RAY_WORKERS:
        raise LaunchError(
            f"Ray workers must be between 1 and {MAX_RAY_WORKERS}, got {workers}", "ray_workers"
        )
    try:
        return fanout_target.ray_target(address, workers, gpus_per_worker)
    except TargetError as exc:
        raise LaunchError(str(exc), "ray") from None


def worker_flags(target: RayTarget | None) -> list[str]:
    """The extra `rollscope run` flags of the launched worker."""
    return [] if target is None else target.cli_flags()
