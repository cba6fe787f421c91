"""The columns of an episode export and their Arrow types, derived from the read models' hints.

A field added to `EpisodeSummary`, `EpisodeDetail` or `StoredStep` becomes a column (a struct
field, for steps) without touching the exporter; a type with no Arrow counterpart fails loudly
here, by its field path, instead of deep inside a writer.
"""

from __future__ import annotations

import dataclasses
import json
import types
from collections.abc import Callable, Sequence
from datetime import datetime
from functools import cache
from typing import TYPE_CHECKING, Any, Literal, Union, get_args, get_origin, get_type_hints

from rollout_core.records import ChatMessage
from storage.imports import EpisodeOrigin
from storage.read_models import EpisodeDetail, EpisodeSummary, RunSummary

if TYPE_CHECKING:
    import pyarrow as pa

Kind = Literal["str", "int", "float", "bool", "datetime", "list", "struct"]
Convert = Callable[[Any], Any]

RUN_COLUMNS = ("policy", "checkpoint", "checkpoint_fingerprint", "dataset")
"""RunSummary fields exported as `run_<field>` beside the summary's run_id and run_name, so the
rows of a multi-run export say which checkpoint played them."""
_DETAIL_ONLY = frozenset({"summary", "run"})
"""EpisodeDetail fields that are not columns: the summary is flattened, the run is RUN_COLUMNS."""


Origin = EpisodeOrigin | None
"""Where an episode was imported from and its rewards by name (`Store.episode_origins`); None
for an episode with neither."""


@dataclasses.dataclass(frozen=True, slots=True)
class Beside:
    """What the store says of an episode beside its read model."""

    origin: Origin = None
    replaced: bool = False
    """A later play of its training step replaced it (`Store.replaced_among`)."""


Read = Callable[[EpisodeDetail, Beside], Any]


@dataclasses.dataclass(frozen=True, slots=True)
class NamedReward:
    """One of an episode's rewards by name: a reward function's or a reward column's."""

    name: str
    value: float


def _tags(d: EpisodeDetail, _: Beside) -> list[str]:
    return sorted({a.tag for a in d.annotations})


def _named(_: EpisodeDetail, b: Beside) -> list[dict[str, Any]]:
    o = b.origin
    return [] if o is None else [{"name": n, "value": v} for n, v in sorted(o.rewards.items())]


def _of_origin(read: Callable[[EpisodeOrigin], Any], none: Any = None) -> Read:
    """A column read from the episode's origin, `none` for an episode without one."""
    return lambda _, b: none if b.origin is None else read(b.origin)


_DERIVED: tuple[tuple[str, Any, Read], ...] = (
    ("tags", list[str], _tags),
    ("replaced", bool, lambda _, b: b.replaced),
    ("rewards_by_name", list[NamedReward], _named),
    ("source_file", str | None, _of_origin(lambda o: o.path)),
    ("source_line", int | None, _of_origin(lambda o: o.line)),
    ("source_agent", str | None, _of_origin(lambda o: o.agent)),
    ("source_gone", bool | None, _of_origin(lambda o: None if o.path is None else o.gone)),
    ("regraded", str | None, _of_origin(lambda o: o.regraded)),
    ("filled_steps", list[int], _of_origin(lambda o: list(o.filled_steps), [])),
)
"""Columns computed from the read models and what the store says beside them, after theirs:
(name, type hint, value). `tags`: the distinct tags on the episode and its steps, for filtering
without unnesting `annotations` (which holds each tag with its step, note, author and time).
`replaced`: a later play of its training step replaced it (a trainer resumed from a checkpoint
played the step again; the Training page leaves it out). The rest say where an imported
episode comes from (`source_file` relative to the run's source path, its line, the agent whose
trace it is, whether a rewrite of the file dropped it), its rewards by name (a recorded
episode's too), and what rollscope added: its grade against the gold SQL and the steps whose
observation it filled."""
_REPLACED = frozenset({"steps"})
"""Summary fields a detail field of the same name replaces: the step count by the step list
(its length). Any other clash of names is an error."""


class ExportSchemaError(TypeError):
    """The read models cannot be laid out as export columns (a type with no column type, a
    name used twice)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Shape:
    """What a type hint becomes in a column: its kind, nullability and parts."""

    kind: Kind
    nullable: bool = False
    item: Shape | None = None
    """The element of a list."""
    fields: tuple[tuple[str, Shape], ...] = ()
    """The named fields of a struct (a dataclass), in declaration order."""
    row: bool = False
    """A struct read from a fixed-length tuple (fields `f0`, `f1`, ...), not a dataclass."""
    message: bool = False
    """A chat message: its role, its content (null where it has none), and its other keys as
    JSON text (or null)."""


_SCALARS: dict[object, Kind] = {
    str: "str",
    int: "int",
    float: "float",
    bool: "bool",
    datetime: "datetime",
}


def shape_of(hint: Any, where: str = "value") -> Shape:
    """The Shape of a type hint; ExportSchemaError (naming `where`) for one with no column type."""
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        rest = [a for a in get_args(hint) if a is not type(None)]
        if len(rest) == 1 and len(get_args(hint)) == 2:
            return dataclasses.replace(shape_of(rest[0], where), nullable=True)
    elif origin is Literal:
        kinds = {type(a) for a in get_args(hint)}
        if kinds in ({str}, {int}):
            return Shape(_SCALARS[kinds.pop()])
    elif origin in (list, Sequence) or (origin is tuple and get_args(hint)[-1:] == (...,)):
        return Shape("list", item=shape_of(get_args(hint)[0], f"{where}[]"))
    elif origin is tuple and get_args(hint):  # fixed length: a record of positional fields
        parts = [shape_of(a, f"{where}[{i}]") for i, a in enumerate(get_args(hint))]
        return Shape("struct", fields=tuple((f"f{i}", p) for i, p in enumerate(parts)), row=True)
    elif hint == ChatMessage:
        content = Shape("str", nullable=True)
        fields = (("role", Shape("str")), ("content", content), ("other", Shape("str", True)))
        return Shape("struct", fields=fields, message=True)
    elif hint in _SCALARS:
        return Shape(_SCALARS[hint])
    elif dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return Shape("struct", fields=tuple(_field_shapes(hint, where)))
    raise ExportSchemaError(
        f"cannot export {where}: {hint!r} has no column type (use str, int, float, bool, "
        "datetime, a Literal, a dataclass, list[X], tuple[X, ...], tuple[X, Y] or X | None)"
    )


def _field_shapes(
    cls: type, where: str, skip: frozenset[str] = frozenset()
) -> list[tuple[str, Shape]]:
    hints = get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls) if f.name not in skip]
    return [(n, shape_of(hints[n], f"{where}.{n}")) for n in names]


def arrow_type(shape: Shape) -> pa.DataType:
    """The Arrow type of a Shape (strings as `string`, times as UTC microseconds)."""
    import pyarrow as pa

    match shape.kind:
        case "list":
            assert shape.item is not None
            return pa.list_(pa.field("item", arrow_type(shape.item), shape.item.nullable))
        case "struct":
            return pa.struct([pa.field(n, arrow_type(s), s.nullable) for n, s in shape.fields])
        case "datetime":
            return pa.timestamp("us", tz="UTC")
    scalars = {"str": pa.string(), "int": pa.int64(), "float": pa.float64(), "bool": pa.bool_()}
    return scalars[shape.kind]


def converter(shape: Shape) -> Convert | None:
    """A function turning a value of this Shape into JSON/Arrow-ready plain data (dataclasses
    into dicts, tuples into lists); None when the value is plain already."""
    if shape.kind == "list":
        assert shape.item is not None
        item = converter(shape.item)
        convert: Convert = list if item is None else (lambda v: [item(x) for x in v])
    elif shape.kind == "struct" and shape.message:
        convert = _message
    elif shape.kind == "struct" and shape.row:
        items = [converter(s) for _, s in shape.fields]
        if not any(items):
            return None  # Arrow reads a tuple as a struct's fields in order; JSON as a list

        def convert(v: Any) -> Any:
            return tuple(x if c is None else c(x) for x, c in zip(v, items, strict=True))
    elif shape.kind == "struct":
        parts = [(name, converter(s)) for name, s in shape.fields]

        def convert(v: Any) -> Any:
            return {n: getattr(v, n) if c is None else c(getattr(v, n)) for n, c in parts}
    else:
        return None
    if not shape.nullable:
        return convert
    inner = convert
    return lambda v: None if v is None else inner(v)


def _message(m: Any) -> dict[str, Any]:
    """A message's text as it is, content parts as JSON text, and no content (a tool call's
    turn) as null: the text "null" is what a model may write."""
    content = m.get("content")
    other = {k: v for k, v in m.items() if k not in ("role", "content")}
    return {
        "role": str(m.get("role", "")),
        "content": content
        if content is None or isinstance(content, str)
        else json.dumps(content, ensure_ascii=False),
        "other": json.dumps(other, ensure_ascii=False) if other else None,
    }


@dataclasses.dataclass(frozen=True, slots=True)
class Column:
    """One column of an episode export."""

    name: str
    shape: Shape
    read: Read
    """The column's plain value for one episode."""


def _reader(part: str | None, attr: str, convert: Convert | None) -> Read:
    def read(d: EpisodeDetail, _: Beside) -> Any:
        value = getattr(getattr(d, part) if part else d, attr)
        return value if convert is None else convert(value)

    return read


@cache
def episode_columns() -> tuple[Column, ...]:
    """Summary fields, then `run_*` fields, then the detail's own fields (`steps` and
    `annotations` nested), then the derived ones (`tags`, the origin's)."""
    sources: list[tuple[str | None, str, str, Shape]] = []  # (part, attr, column, shape)
    detail = _field_shapes(EpisodeDetail, "EpisodeDetail", _DETAIL_ONLY)
    detail_names = {n for n, _ in detail}
    for name, s in _field_shapes(EpisodeSummary, "EpisodeSummary"):
        if name not in _REPLACED or name not in detail_names:
            sources.append(("summary", name, name, s))
    run = get_type_hints(RunSummary)
    sources += [("run", n, f"run_{n}", shape_of(run[n], f"RunSummary.{n}")) for n in RUN_COLUMNS]
    sources += [(None, n, n, s) for n, s in detail]
    derived = [Column(n, shape_of(hint, n), read) for n, hint, read in _DERIVED]
    names = [column for _, _, column, _ in sources] + [c.name for c in derived]
    if clash := sorted({n for n in names if names.count(n) > 1}):
        raise ExportSchemaError(f"export columns named twice: {', '.join(clash)}")
    return (
        *(
            Column(column, s, _reader(part, attr, converter(s)))
            for part, attr, column, s in sources
        ),
        *derived,
    )


def episode_row(detail: EpisodeDetail, beside: Beside | None = None) -> dict[str, Any]:
    """One episode as plain data: one key per export column."""
    found = beside or Beside()
    return {c.name: c.read(detail, found) for c in episode_columns()}


@cache
def episode_schema() -> pa.Schema:
    """The Arrow schema of an episode export (fixed, whatever the rows hold)."""
    import pyarrow as pa

    cols = episode_columns()
    return pa.schema([pa.field(c.name, arrow_type(c.shape), c.shape.nullable) for c in cols])
