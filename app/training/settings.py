"""The trainer's arguments a training run records (`RunSpec.training`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rollout_core.settings import TrainingSettings


def model_name(model: Any, fallback: str = "") -> str:
    """What a run records as the trained model: the path or hub id it was loaded from, a
    local path made absolute (as `rollscope run` records a checkpoint), so a fork or Launch
    from another directory finds it; `fallback` when the model says nothing."""
    name = str(getattr(model, "name_or_path", "") or "")
    if not name:
        return fallback
    local = Path(name).expanduser()
    return str(local.resolve()) if local.is_dir() else name


def training_settings(trainer: Any) -> TrainingSettings:
    """What a GRPOTrainer was asked to do: model, learning rate, group size, KL weight, ..."""
    args = trainer.args
    model = trainer.accelerator.unwrap_model(trainer.model)
    library = type(trainer).__module__.split(".")[0]
    version = _version(library)
    names = getattr(trainer, "reward_func_names", None) or [
        getattr(f, "__name__", type(f).__name__) for f in getattr(trainer, "reward_funcs", [])
    ]
    return TrainingSettings(
        trainer=f"{type(trainer).__name__} ({library} {version})"
        if version
        else type(trainer).__name__,
        model=model_name(model, type(model).__name__),
        learning_rate=float(args.learning_rate),
        num_generations=int(trainer.num_generations),
        beta=float(getattr(args, "beta", 0.0) or 0.0),
        max_steps=int(args.max_steps),
        num_train_epochs=float(args.num_train_epochs),
        per_device_train_batch_size=int(args.per_device_train_batch_size),
        gradient_accumulation_steps=int(args.gradient_accumulation_steps),
        steps_per_generation=_int_or_none(getattr(args, "steps_per_generation", None)),
        num_iterations=int(getattr(args, "num_iterations", 1) or 1),
        epsilon=float(getattr(args, "epsilon", 0.2)),
        loss_type=str(getattr(args, "loss_type", "") or ""),
        scale_rewards=str(getattr(args, "scale_rewards", "") or ""),
        temperature=float(args.temperature),
        top_p=float(args.top_p),
        seed=int(args.seed),
        reward_funcs=tuple(str(n) for n in names),
    )


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


def _version(library: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(library)
    except PackageNotFoundError:
        return None
