"""RunSpec <-> the JSON kept in the store, with a tolerant reader for older layouts.

Older stores kept `batch_size` and `seed` beside the spec's fields, free-form `generation` and
`environment` dicts, and (before settings were typed) merged what the policy reported about
itself into `generation` (`policy`, `checkpoint`, `dtype: "float32"`). The reader maps those
onto today's typed settings and drops what is not a setting, so every stored run can be resumed.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, TypeVar, get_args, get_origin, get_type_hints

from rollout_core.errors import SpecError
from rollout_core.records import RunSpec
from rollout_core.settings import GenerationSettings, SettingsError

T = TypeVar("T")

# `describe()` once reported torch's dtype names; the settings take the short ones.
_DTYPE_NAMES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


PLAYED_ONLY = (
    "generation",
    "environment",
    "samples",
    "limit",
    "question_ids",
    "questions_sha256",
)
"""A spec's fields that say how rollscope plays a run. A run it did not play (an import, a
Recorder's) was generated with the trainer's settings, which its files do not give: its
stored spec leaves these out rather than hold rollscope's defaults as if they were used."""


GENERATED_HERE_ONLY = ("generation", "samples", "limit", "question_ids", "questions_sha256")
"""The fields of `PLAYED_ONLY` that say how rollscope generates: an environment server's run
plays the SQL by its `environment` settings, while its clients generate as they choose."""

NAMED_DATA = ("dataset", "questions_path", "db_dir")
"""A spec's names of its questions and databases: null in the store where it names none (an
import without `--questions`, a Recorder given none), as the run's `dataset` column is."""


def spec_to_dict(spec: RunSpec, *, played_here: bool = True) -> dict[str, Any]:
    """The JSON-able form of a spec (tuples become lists), without the settings nobody used:
    `PLAYED_ONLY` for a run rollscope did not play, `GENERATED_HERE_ONLY` for a server's."""
    plain: dict[str, Any] = _plain(dataclasses.asdict(spec))
    unused = PLAYED_ONLY if not played_here else GENERATED_HERE_ONLY if spec.kind == "env" else ()
    for key in unused:
        del plain[key]
    for key in NAMED_DATA:
        plain[key] = plain[key] or None
    return plain


def spec_from_dict(data: Any) -> RunSpec:
    """Read a stored spec; SpecError naming the field when it is malformed."""
    if not isinstance(data, Mapping):
        raise SpecError(f"stored run spec must be a JSON object, got {type(data).__name__}")
    return read_dataclass(RunSpec, _upgrade_legacy(dict(data)), "spec")


def read_dataclass(cls: type[T], data: Any, where: str) -> T:
    """An instance of dataclass `cls` from a mapping, each value checked against its hint.

    Unknown keys are ignored (a store written by another version may hold more); missing
    ones take the field's default.
    """
    if not isinstance(data, Mapping):
        raise SpecError(f"{where} must be a JSON object, got {type(data).__name__}")
    hints = get_type_hints(cls)
    values = {
        f.name: _value(hints[f.name], data[f.name], f"{where}.{f.name}")
        for f in dataclasses.fields(cls)  # type: ignore[arg-type]
        if f.name in data
    }
    try:
        return cls(**values)
    except SettingsError as exc:
        raise SpecError(f"{where}: {exc}") from None
    except TypeError as exc:  # a required field missing
        raise SpecError(f"{where} is incomplete: {exc}") from None


def _value(hint: Any, value: Any, where: str) -> Any:
    origin, args = get_origin(hint), get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1:
            return _value(inner[0], value, where)
        raise SpecError(f"{where}: unsupported type {hint}")  # pragma: no cover - no such field
    if origin is Literal:
        if value not in args:
            raise SpecError(f"{where} must be one of {', '.join(map(str, args))}, got {value!r}")
        return value
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise SpecError(f"{where} must be a list, got {type(value).__name__}")
        return tuple(_value(args[0], v, f"{where}[{i}]") for i, v in enumerate(value))
    if origin is dict or hint is dict:
        if not isinstance(value, Mapping):
            raise SpecError(f"{where} must be an object, got {type(value).__name__}")
        return dict(value)
    if dataclasses.is_dataclass(hint):
        return read_dataclass(hint, value, where)  # type: ignore[arg-type]
    if hint is bool:
        if not isinstance(value, bool):
            raise SpecError(f"{where} must be true or false, got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(f"{where} must be a whole number, got {value!r}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise SpecError(f"{where} must be a number, got {value!r}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise SpecError(f"{where} must be text, got {value!r}")
        return value
    if hint is Any:
        return value
    raise SpecError(f"{where}: unsupported type {hint}")  # pragma: no cover - no such field


def _upgrade_legacy(data: dict[str, Any]) -> dict[str, Any]:
    """Today's layout from an older one (idempotent on today's)."""
    generation = data.get("generation")
    generation = dict(generation) if isinstance(generation, Mapping) else {}
    for key in ("batch_size", "seed"):  # once beside the settings, now part of them
        if key in data and key not in generation:
            generation[key] = data[key]
    known = {f.name for f in dataclasses.fields(GenerationSettings)}
    # Keys that are not settings (`policy`, `checkpoint`) came from describe(): dropped.
    generation = {k: v for k, v in generation.items() if k in known and v is not None}
    if isinstance(generation.get("dtype"), str):
        generation["dtype"] = _DTYPE_NAMES.get(generation["dtype"], generation["dtype"])
    data["generation"] = generation
    environment = data.get("environment")
    data["environment"] = dict(environment) if isinstance(environment, Mapping) else {}
    for key in NAMED_DATA:  # null where the run names none
        if key in data and data[key] is None:
            data[key] = ""
    return data


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
