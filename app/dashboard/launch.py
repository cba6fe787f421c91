"""Launch form logic: validate what a person typed and turn it into a queued run."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rollout_core.records import RunSpec
from storage.store import Store

SCRIPTED_POLICIES = ("oracle", "random")
MAX_SAMPLES = 64
MAX_STEP_BUDGET = 50
MAX_QUESTIONS = 5000
_CHECKPOINT_SEARCH_DEPTH = 3


class LaunchError(ValueError):
    """A form value that cannot start a run; the message names it and the fix."""


@dataclass(frozen=True, slots=True)
class LaunchRequest:
    """The Launch form's fields, as typed."""

    policy: str
    """`oracle`, `random` or `hf:<checkpoint dir>`."""
    dataset: str
    """`demo` or a questions file path."""
    run_name: str
    limit: int | None = 5
    question_ids: str = ""
    """Comma- or space-separated question ids; overrides `limit` when given."""
    samples: int = 1
    step_budget: int = 10
    temperature: float = 0.0
    seed: int = 0
    batch_size: int = 16


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


def resolve_policy(policy: str, roots: Sequence[Path]) -> tuple[str, str | None, str | None]:
    """(policy spec, checkpoint path, fingerprint); hf checkpoints must be under a root."""
    policy = policy.strip()
    if policy in SCRIPTED_POLICIES:
        return policy, None, None
    if not policy.startswith("hf:"):
        raise LaunchError(
            f"unknown policy {policy!r}; choose oracle, random or hf:<checkpoint dir>"
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
    if not (path / "config.json").is_file():
        raise LaunchError(f"checkpoint {path} has no config.json; pick a saved model directory")
    from rollout_core.checkpoints import fingerprint_checkpoint

    try:
        fingerprint = fingerprint_checkpoint(path)
    except FileNotFoundError as exc:  # a config.json but no weights: a half-saved checkpoint
        raise LaunchError(str(exc)) from None
    return f"hf:{path}", str(path), fingerprint


def parse_question_ids(text: str) -> tuple[str, ...]:
    """Ids separated by commas, spaces or new lines, duplicates dropped, order kept."""
    return tuple(dict.fromkeys(p for p in re.split(r"[\s,]+", text) if p))


def build_spec(req: LaunchRequest, roots: Sequence[Path]) -> tuple[RunSpec, int]:
    """A validated RunSpec and the number of episodes it plans."""
    from rollout_core.datasets import load_named_dataset, select_questions

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
    if req.seed < 0:
        raise LaunchError(f"seed must be 0 or more, got {req.seed}")
    ids = parse_question_ids(req.question_ids)
    if not ids and (req.limit is None or not 1 <= req.limit <= MAX_QUESTIONS):
        raise LaunchError(f"number of questions must be between 1 and {MAX_QUESTIONS}")
    policy, checkpoint, fingerprint = resolve_policy(req.policy, roots)
    try:
        dataset = load_named_dataset(req.dataset.strip() or "demo")
        questions = select_questions(
            dataset, limit=None if ids else req.limit, question_ids=ids or None
        )
    except (OSError, KeyError, ValueError) as exc:
        raise LaunchError(f"dataset {req.dataset!r}: {_message(exc)}") from exc
    if not questions:
        raise LaunchError(f"dataset {req.dataset!r} has no questions to run")
    spec = RunSpec(
        name=name,
        policy=policy,
        dataset=dataset.name,
        questions_path=str(dataset.questions_path),
        db_dir=str(dataset.db_dir),
        checkpoint=checkpoint,
        checkpoint_fingerprint=fingerprint,
        generation={"temperature": req.temperature},
        environment={"step_budget": req.step_budget},
        samples=req.samples,
        batch_size=req.batch_size,
        limit=None if ids else req.limit,
        seed=req.seed,
        question_ids=ids or None,
    )
    return spec, len(questions) * req.samples


def queue_run(store: Store, req: LaunchRequest, roots: Sequence[Path]) -> int:
    """Validate the request and create a queued run; returns its id."""
    spec, planned = build_spec(req, roots)
    if store.find_run(spec.name) is not None:
        raise LaunchError(f"a run named {spec.name!r} exists; choose another name")
    try:
        return store.create_run(spec, episodes_planned=planned, status="queued")
    except ValueError as exc:
        raise LaunchError(_message(exc)) from exc


def _message(exc: BaseException) -> str:
    # KeyError wraps its message in quotes; show the text itself.
    return str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
