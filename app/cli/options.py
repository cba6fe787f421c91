"""A command whose options are one frozen dataclass: each field declares its flag once (type,
default and `typer.Option` help), and the command body receives one typed object."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable
from typing import Any, TypeVar

from typer.models import OptionInfo

T = TypeVar("T")


def command_from(options: type[T], body: Callable[[T], None]) -> Callable[..., None]:
    """A typer command with `options`' fields as its parameters, calling `body(options(...))`."""
    hints = typing.get_type_hints(options, include_extras=True)
    params = [
        inspect.Parameter(
            f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=hints[f.name]
        )
        for f in dataclasses.fields(options)  # type: ignore[arg-type]
    ]

    @functools.wraps(body)
    def command(**values: Any) -> None:
        body(options(**values))

    # typer reads the parameters from the signature and their types from the annotations.
    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params}
    return command


def flag(options: type[Any], name: str) -> str:
    """The flag a user types for field `name` of `options` (`--top-p`, or the name it was
    given, as `--ray` for `ray_address`); `--name` for a name that is no field."""
    hint = typing.get_type_hints(options, include_extras=True).get(name)
    for meta in getattr(hint, "__metadata__", ()):
        if isinstance(meta, OptionInfo):
            decls = [d for d in (meta.default, *(meta.param_decls or ())) if isinstance(d, str)]
            if decls and decls[0].startswith("--"):
                return decls[0]
    return "--" + name.replace("_", "-")
