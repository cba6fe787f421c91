"""What every format's reader shares: a file's rows with their line and digest, read one at a
time (memory stays flat whatever the file's size), and whether a file is whole yet. A JSONL file
grows by whole lines, so it can be read on from where an earlier reading ended.

A reader turns each row into a `Rollout`, or says in one line why it cannot (`BadRow`); the
importer decides what to do with a bad row (count it, or stop with `--strict`).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from app.importers.rollouts import Rollout
from rollout_core.clip import clip_repr
from rollout_core.utf8 import json_without_lone_surrogates
from storage.models import INTEGER_RANGE
from storage.prompts import MAX_NESTING, nested_deeper_than

_CHUNK = 1 << 20
UTF8_BOM = b"\xef\xbb\xbf"
"""What Windows tools (PowerShell, Notepad) write before a file's text: read as nothing."""
_ROWS_NAMING_A_MODEL = 100
"""Rows of the first file looked at for the run's model: a log whose first lines name none
(a system check, a warm-up) names it soon after, and a file of none is not read whole."""


class BadRow(ValueError):
    """A row that is not a rollout of the format; the message says what is wrong with it."""


@dataclass(frozen=True, slots=True)
class Row:
    """One row of a file: where it is, the digest of its bytes, and what it holds."""

    line: int
    """1-based line (JSONL), row (Parquet), or 1 (a file of one episode)."""
    sha256: bytes
    rollout: Rollout | None
    problem: str | None = None
    """Why the row is no rollout (then `rollout` is None)."""
    incomplete: bool = False
    """A last line with no newline that is no rollout yet: its writer may still be writing it,
    so it is left for a later import rather than counted as bad."""
    more: tuple[Rollout, ...] = ()
    """The row's further rollouts: a v1 episode's line holds one a trained agent."""
    earlier_sha256: Callable[[], bytes] | None = None
    """The digest an earlier rollscope took of the row, where it took another: asked for only
    when the run holds rows of the file that `sha256` does not find."""

    @property
    def rollouts(self) -> tuple[Rollout, ...]:
        """Every rollout of the row, in its order (none for a bad row)."""
        return () if self.rollout is None else (self.rollout, *self.more)


Rollouts = Rollout | tuple[Rollout, ...]
"""What a line gives: its rollout, or several (a v1 episode's, one a trained agent)."""


@dataclass(frozen=True, slots=True)
class Part:
    """The part of a JSONL file a reading takes: from byte `offset`, the first byte of line
    number `line`, up to byte `end` (None: the file's end). A file still growing is read up to
    where its digest ended, so that each of its lines is read by one reading only."""

    offset: int = 0
    line: int = 1
    end: int | None = None


WHOLE = Part()


class Format:
    """A rollout file format: which files of a folder it reads, in what order, and how."""

    name = ""
    label = ""
    """How people call it (`TRL completions`), for messages."""
    layout = ""
    """The files it reads, in words (`<step>.jsonl`), for messages."""
    file_an_episode = False
    """Its files hold an episode each (rLLM's): a step is a folder of thousands of them."""

    def files(self, root: Path) -> list[Path]:
        """The format's files under `root` (a folder, or one file), in the order to import
        them (training step order where the names say it)."""
        raise NotImplementedError

    def rows(self, path: Path) -> Iterator[Row]:
        """The file's rows, one at a time."""
        raise NotImplementedError

    def left_out(self, root: Path) -> str | None:
        """What of the folder looks like rollouts but `files` does not read, in words, so that
        an import does not pass it over silently (None: nothing)."""
        return None

    def row_count(self, path: Path, digest: FileDigest) -> int:
        """How many rows the file holds (an estimate for line-based files: blank lines count)."""
        return digest.lines

    def whole(self, path: Path) -> bool:
        """Whether the file's writer has finished it (a JSONL file ends with a newline)."""
        return ends_with(path, b"\n")

    def checkpoint(self, root: Path) -> str | None:
        """The model the files name, when they name one."""
        return None

    def first_model(self, root: Path) -> str | None:
        """The model the first file's first rows name, if one does (a run records one
        model)."""
        rows = (r for f in self.files(root)[:1] for r in self.rows(f))
        for row in itertools.islice(rows, _ROWS_NAMING_A_MODEL):
            if row.rollout is not None and row.rollout.model:
                return row.rollout.model
        return None


class JsonLines(Format):
    """A format of JSONL files, a rollout a line. Its writers append whole lines, so a file
    grown since it was read can be read on from where that reading ended (`Part`)."""

    def reader(self, path: Path) -> Callable[[dict[str, Any]], Rollouts]:
        """What makes a line's JSON object of this file a rollout (raising BadRow, KeyError,
        TypeError or ValueError for one it cannot use); a new one for each reading."""
        raise NotImplementedError

    def rows(self, path: Path, part: Part = WHOLE) -> Iterator[Row]:
        return jsonl_rows(path, self.reader(path), part)


@dataclass(frozen=True, slots=True)
class FileDigest:
    """A file's SHA-256, size and lines (a last line without its newline counts), and the
    SHA-256 of its first `prefix` bytes when asked."""

    sha256: bytes
    size: int
    lines: int
    prefix_sha256: bytes | None = None


def file_digest(path: Path, prefix: int | None = None) -> FileDigest:
    """The file's digest as one read finds it; with `prefix`, also the SHA-256 of its first
    `prefix` bytes (None when the file is shorter)."""
    h = hashlib.sha256()
    size = lines = 0
    last = b"\n"
    head: bytes | None = None
    with path.open("rb") as f:
        if prefix is not None:
            while size < prefix and (chunk := f.read(min(_CHUNK, prefix - size))):
                h.update(chunk)
                size += len(chunk)
                lines += chunk.count(b"\n")
                last = chunk[-1:]
            head = h.digest() if size == prefix else None
        while chunk := f.read(_CHUNK):
            h.update(chunk)
            size += len(chunk)
            lines += chunk.count(b"\n")
            last = chunk[-1:]
    return FileDigest(h.digest(), size, lines + (last != b"\n"), head)


def ends_with(path: Path, tail: bytes) -> bool:
    try:
        with path.open("rb") as f:
            f.seek(0, 2)
            size = f.tell()
            if size < len(tail):
                return False
            f.seek(size - len(tail))
            return f.read(len(tail)) == tail
    except OSError:
        return False


def jsonl_rows(
    path: Path, rollout: Callable[[dict[str, Any]], Rollouts], part: Part = WHOLE
) -> Iterator[Row]:
    """The rows of a JSONL file's `part`: each line's JSON object made a rollout by `rollout`,
    which raises BadRow (or KeyError, TypeError, ValueError) for one it cannot use. Blank lines
    are no rows."""
    left = math.inf if part.end is None else part.end - part.offset
    with path.open("rb") as f:
        f.seek(part.offset)
        for n, line in enumerate(f, part.line):
            if left <= 0:
                break
            if len(line) > left:
                line = line[: int(left)]  # the part ends inside this line
            left -= len(line)
            raw = line.rstrip(b"\r\n")
            if n == 1:
                raw = raw.removeprefix(UTF8_BOM)
            if not raw.strip():
                continue
            digest = hashlib.sha256(raw).digest()
            try:
                made = rollout(json_object(raw))
                first, *more = made if isinstance(made, tuple) else (made,)
                yield Row(n, digest, first, more=tuple(more))
            except (BadRow, KeyError, TypeError, ValueError) as exc:
                unfinished = not line.endswith(b"\n")
                yield Row(n, digest, None, problem_text(exc), incomplete=unfinished)


def json_object(raw: bytes) -> dict[str, Any]:
    """A JSON object from a line's bytes; BadRow for anything else. Invalid UTF-8, and lone
    surrogates (escapes no UTF-8 text can hold), become U+FFFD; NaN and Infinity read as
    Python's json reads them. A whole number past 64 bits reads as a float."""
    try:
        # orjson reads a line several times faster than json (docs/benchmarks.md). What it
        # refuses (the cases above, or no JSON at all) goes to json, which says what is wrong.
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        data = _json_loads(raw.decode("utf-8", errors="replace"))
    if not isinstance(data, dict):
        raise BadRow(f"{json_kind(data)}, not a JSON object")
    # Counting brackets is cheap, and fewer cannot nest deeper.
    if raw.count(b"[") + raw.count(b"{") > MAX_NESTING and nested_deeper_than(data):
        raise BadRow(_TOO_DEEP)
    return data


def _whole_number(digits: str) -> int | float:
    """A whole number as orjson reads it: past 64 bits, a float (an infinity past a float's
    range, where int() would give a number no float() takes, or refuse its digits)."""
    return int(digits) if len(digits) <= 20 else float(digits)


_TOO_DEEP = (
    f"lists or objects nested more than {MAX_NESTING} levels deep, past what the store keeps"
)


def _json_loads(text: str) -> Any:
    try:
        data = json.loads(text, parse_int=_whole_number)
        if isinstance(data, dict) and ("\\ud" in text or "\\uD" in text):
            return dict(json_without_lone_surrogates(data))
    except RecursionError:  # orjson stops at 1,024 levels, json and the walk at the stack's end
        raise BadRow(_TOO_DEEP) from None
    except json.JSONDecodeError as exc:
        # Some of json's messages end in "at" ("Unterminated string starting at").
        what = exc.msg.removesuffix(" at")
        where = f"line {exc.lineno} column {exc.colno}" if exc.lineno > 1 else f"column {exc.colno}"
        raise BadRow(f"not JSON ({what} at {where})") from None
    return data


_KINDS: dict[type, str] = {
    bool: "true or false",
    int: "a number",
    float: "a number",
    str: "text",
    list: "a list",
    dict: "an object",
    type(None): "null",
}


def json_kind(value: Any) -> str:
    """What a value read from a file is, as its writer would say it: `a number`, `text`,
    `a list`, `an object`, `null` (for messages: Python's `int`, `NoneType` say less)."""
    return _KINDS.get(type(value)) or f"a value of type {type(value).__name__}"


def problem_text(exc: BaseException) -> str:
    """One line saying what is wrong with a row."""
    if isinstance(exc, KeyError):
        return f"no {exc.args[0]!r} field"
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text


def text_field(data: Mapping[str, Any], key: str) -> str:
    """A string field; BadRow when it is missing or not a string."""
    value = data[key]
    if not isinstance(value, str):
        raise BadRow(f"{key!r} is {json_kind(value)}, not text")
    return value


def number(value: Any, what: str) -> float:
    """A finite number (a list of token-level rewards is summed, as verl and SkyRL sum them);
    BadRow otherwise."""
    if isinstance(value, list | tuple) and all(_is_number(v) for v in value):
        value = exact_sum([float(v) for v in value])
        if not math.isfinite(value):
            raise BadRow(f"{what} sums to {value}, past what a float holds")
    if not _is_number(value):
        raise BadRow(f"{what} is {_shown(value)}, not a number")
    result = float(value)
    if not math.isfinite(result):
        raise BadRow(f"{what} is {result}, not a finite number")
    return result


def exact_sum(values: Sequence[float]) -> float:
    """The values' sum, rounded once; an infinity when it is past what a float holds (fsum
    raises there), for the caller's finiteness check to name."""
    try:
        return math.fsum(values)
    except OverflowError:
        return sum(values)


def finite(value: Any) -> float | None:
    """A number the file may give (an advantage): a finite one, of any sign; None for
    anything else, so that a rollout is whole without it."""
    if not _is_number(value) or not math.isfinite(value):
        return None
    return float(value)


def measured(value: Any) -> float | None:
    """A timing or a count the file gives (seconds, tokens): a finite number, 0 or more; None
    for anything else. A rollout is whole without them, so a bad one is left out, not the row."""
    found = finite(value)
    return found if found is not None and found >= 0 else None


def optional_int(value: Any, what: str) -> int | None:
    """A whole number the store can hold (a training step), or None; BadRow otherwise."""
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or (isinstance(value, float) and not value.is_integer())  # NaN and infinities too
    ):
        raise BadRow(f"{what} is {_shown(value)}, not a whole number")
    if int(value) not in INTEGER_RANGE:
        raise BadRow(
            f"{what} is {_shown(value)}, out of range: the store holds whole numbers from "
            f"{INTEGER_RANGE.start:,} to {INTEGER_RANGE.stop - 1:,}"
        )
    return int(value)


def stored_count(value: float | None) -> int | None:
    """A count the file gives (tokens), rounded, where the store can hold it; None for one it
    cannot (a rollout is whole without it, as without any malformed count)."""
    if value is None:
        return None
    count = round(value)
    return count if count in INTEGER_RANGE else None


def numeric_columns(data: Mapping[str, Any], skip: frozenset[str]) -> dict[str, float]:
    """The fields holding a finite number (not a flag), by name: a row's reward columns."""
    out = {}
    for key, value in data.items():
        if key in skip or isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if math.isfinite(value):
            out[str(key)] = float(value)
    return out


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _shown(value: Any) -> str:
    return clip_repr(value, 40)


_NUMBER_IN_NAME = re.compile(r"(\d+)")


def step_of(name: str) -> int:
    """The first number in a file or folder name (its training step), else -1."""
    found = _NUMBER_IN_NAME.search(name)
    return int(found.group(1)) if found else -1
