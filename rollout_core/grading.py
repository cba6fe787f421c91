"""Decide whether an ANSWER matches the gold query's result.

The answer is compared with the rows the gold SQL returns, not with the SQL itself.

- Numbers compare numerically: `6`, `6.0` and `"6.00"` all match a gold `6`.
- A decimal answer showing at least two decimals matches the gold rounded to that many:
  `58.33` matches `58.3333`; `58.3` does not (one decimal is too coarse).
- Strings compare trimmed and case-insensitively: `" paris "` matches `Paris`. A gold number
  stored as text (`"1990"`) matches the number `1990`.
- NULL is answered `null`, `none` or `[null]`; a blob as its UTF-8 text or its hex.
- Several values: a JSON list (`["a", "b"]`), a JSON list of rows (`[["a", 1], ["b", 2]]`),
  comma-separated (`a, b`) or one per line; within a line, cells are separated by commas, tabs
  or `|`. A value that itself holds a comma needs JSON (`["Smith, John"]`) or CSV quotes.
- Rows compare as a multiset, unless the gold SQL has an outer ORDER BY: then in order.
- A single-row gold may be answered with its values in column order (`Paris, 5`); a
  single-column gold as a flat list (`[1, 2, 3]`).
- An empty gold result is matched by `[]` or by `no rows`, `none`, `empty`, `no results`.
- `format_answer` writes the canonical form: JSON, a scalar for one value (`5`, `"Paris"`),
  a flat list for one column, a list of lists otherwise, `[]` for no rows.

Any answer text is judged right or wrong. A failure of the grader itself raises `GradingError`
and is never counted as a wrong answer: in RL a grader bug must not turn into reward 0 unseen.
"""

from __future__ import annotations

import ast
import csv
import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

Row = tuple[Any, ...]

_EMPTY_WORDS = frozenset(
    {"[]", "[[]]", "()", "no rows", "(no rows)", "none", "empty", "no results", "no result"}
)
_NULL_WORDS = frozenset({"null", "none", "nil", ""})
_MAX_ANSWER_CHARS = 2_000_000
_MATCHING_LIMIT = 100  # rows up to which an unordered fuzzy match tries every pairing
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")
_THOUSANDS = re.compile(r"[+-]?\d{1,3}(,\d{3})+(\.\d+)?")


@dataclass(frozen=True)
class GoldResult:
    """The gold query's result: column names, all rows, and whether their order matters."""

    columns: list[str]
    rows: list[tuple[Any, ...]]
    ordered: bool


GRADING_FAILED = "grading failed"
"""How the error of an answer the grader failed on begins: `grading failed: <Type>: <message>`."""


class GradingError(RuntimeError):
    """The grader failed on an answer, which is then neither right nor wrong.

    Its text is `<ExceptionType>: <message>` of the failure; `__cause__` holds the exception.
    """


def format_answer(rows: Sequence[Sequence[Any]], columns: int) -> str:
    """The canonical answer for `rows`: JSON scalar, flat list or list of lists."""
    if not rows:
        return "[]"
    cells = [[_json_cell(c) for c in row] for row in rows]
    if columns == 1 and len(cells) == 1:
        value: Any = cells[0][0]
    elif columns == 1:
        value = [row[0] for row in cells]
    else:
        value = cells
    return json.dumps(value, ensure_ascii=False)


def _json_cell(cell: Any) -> Any:
    """A cell JSON can hold; blobs become their UTF-8 text."""
    if isinstance(cell, bytes | bytearray | memoryview):
        return bytes(cell).decode("utf-8", errors="replace")
    if cell is None or isinstance(cell, int | float | str):
        return cell
    return str(cell)


def grade_answer(answer: str, gold: GoldResult) -> bool:
    """True when `answer` matches the gold result; raises GradingError when the grader fails."""
    try:
        return _grade(answer, gold)
    except Exception as exc:
        raise GradingError(f"{type(exc).__name__}: {exc}") from exc


def _grade(answer: str, gold: GoldResult) -> bool:
    text = _strip_fences(str(answer)).strip()
    if len(text) > _MAX_ANSWER_CHARS:
        return False
    gold_rows = [tuple(row) for row in gold.rows]
    width = len(gold.columns) if gold.columns else (len(gold_rows[0]) if gold_rows else 0)
    if not gold_rows:
        return text.lower().rstrip(".") in _EMPTY_WORDS or _parses_to_empty(text)
    return any(
        _rows_match(candidate, gold_rows, width, gold.ordered) for candidate in _candidates(text)
    )


def _strip_fences(text: str) -> str:
    """Drop a markdown code fence around the answer."""
    stripped = text.strip()
    if stripped.startswith("```") and stripped.endswith("```") and len(stripped) >= 6:
        inner = stripped[3:-3]
        first, _, rest = inner.partition("\n")
        return rest if rest and re.fullmatch(r"[A-Za-z]*", first.strip()) else inner
    return stripped


def _parses_to_empty(text: str) -> bool:
    value = _load_json(text)
    return isinstance(value, list) and all(isinstance(v, list) and not v for v in value)


def _load_json(text: str) -> Any:
    """JSON with floats kept as Decimal (the digits shown matter); None when not JSON."""
    try:
        return json.loads(text, parse_float=Decimal)
    except (ValueError, RecursionError):
        return None


def _candidates(text: str) -> Iterable[list[Row]]:
    """Every reading of the answer as a list of rows, most literal first."""
    value = _load_json(text)
    if value is not None or text.strip().lower() == "null":
        yield from _from_structure(value)
    elif text[:1] in "([{" and len(text) < 100_000:
        literal = _load_literal(text)
        if literal is not None:
            yield from _from_structure(literal)
    yield [(_clean_atom(text),)]
    lines = [_strip_bullet(line) for line in text.split("\n") if line.strip()]
    if len(lines) > 1:
        yield [(_clean_atom(line),) for line in lines]
        split_lines = [_split_cells(line) for line in lines]
        yield [tuple(cells) for cells in split_lines]
        flat = [cell for cells in split_lines for cell in cells]
        yield [tuple(flat)]
        yield [(cell,) for cell in flat]
    elif lines:
        cells = _split_cells(lines[0])
        yield [tuple(cells)]
        yield [(cell,) for cell in cells]


def _load_literal(text: str) -> Any:
    """A Python literal such as `[('a', 1)]`, as small models often write; None otherwise."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None


def _from_structure(value: Any) -> Iterable[list[Row]]:
    """Readings of a parsed JSON/Python value: scalar, flat list, list of rows, dicts."""
    if isinstance(value, dict):
        value = list(value.values())
    if not isinstance(value, list | tuple):
        yield [(value,)]
        return
    items = [list(v.values()) if isinstance(v, dict) else v for v in value]
    if items and all(isinstance(v, list | tuple) for v in items):
        rows = [tuple(v) for v in items]
        yield rows
        if len(rows) == 1 or all(len(r) == 1 for r in rows):
            flat = [cell for row in rows for cell in row]
            yield [tuple(flat)]
            yield [(cell,) for cell in flat]
        return
    yield [tuple(items)]
    yield [(v if not isinstance(v, list | tuple) else tuple(v),) for v in items]


def _strip_bullet(line: str) -> str:
    stripped = line.strip()
    return stripped[2:] if stripped[:2] in ("- ", "* ", "• ") else stripped


def _split_cells(line: str) -> list[str]:
    """Split one line into cells on tabs, `|` or commas (CSV quotes respected)."""
    line = line.strip().strip("|").strip()
    if "\t" in line:
        parts = line.split("\t")
    elif "|" in line:
        parts = line.split("|")
    else:
        try:
            parts = next(csv.reader([line], skipinitialspace=True), [])
        except csv.Error:
            parts = line.split(",")
    return [_clean_atom(part) for part in parts]


def _clean_atom(text: str) -> str:
    """Trim whitespace and one pair of matching quotes around a text value."""
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'`":
        text = text[1:-1].strip()
    return text


def _rows_match(candidate: list[Row], gold: list[Row], width: int, ordered: bool) -> bool:
    """Same number of rows, each of the gold's width, cells equal (in order or as a multiset)."""
    if len(candidate) != len(gold) or any(len(row) != width for row in candidate):
        return False
    if ordered:
        return all(_row_equal(a, g) for a, g in zip(candidate, gold, strict=True))
    by_key = sorted(candidate, key=_sort_key)
    gold_sorted = sorted(gold, key=_sort_key)
    if all(_row_equal(a, g) for a, g in zip(by_key, gold_sorted, strict=True)):
        return True
    return len(gold) <= _MATCHING_LIMIT and _perfect_matching(candidate, gold)


def _perfect_matching(candidate: list[Row], gold: list[Row]) -> bool:
    """Pair every answer row with a distinct equal gold row (Kuhn's augmenting paths)."""
    options = [[j for j, g in enumerate(gold) if _row_equal(a, g)] for a in candidate]
    owner: dict[int, int] = {}

    def assign(i: int, seen: set[int]) -> bool:
        for j in options[i]:
            if j in seen:
                continue
            seen.add(j)
            if j not in owner or assign(owner[j], seen):
                owner[j] = i
                return True
        return False

    return all(assign(i, set()) for i in range(len(candidate)))


def _sort_key(row: Row) -> tuple[tuple[int, float, str], ...]:
    """Order rows the same way for answer and gold: numbers by value, then text."""
    key = []
    for cell in row:
        number = _as_number(cell)
        if number is not None:
            key.append((1, float(number[0]), ""))
        elif _is_null(cell):
            key.append((0, 0.0, ""))
        else:
            key.append((2, 0.0, _as_text(cell)))
    return tuple(key)


def _row_equal(answer: Row, gold: Row) -> bool:
    return all(_cell_equal(a, g) for a, g in zip(answer, gold, strict=True))


def _cell_equal(answer: Any, gold: Any) -> bool:
    """One answer value against one gold cell."""
    if gold is None:
        return _is_null(answer)
    if isinstance(gold, bytes | bytearray | memoryview):
        raw = bytes(gold)
        text = _as_text(answer)
        return text in (_as_text(raw), raw.hex(), f"x'{raw.hex()}'")
    gold_number = _as_number(gold)
    answer_number = _as_number(answer)
    if gold_number is not None and answer_number is not None:
        return _numbers_equal(answer_number, gold_number[0])
    if answer is None:
        return False
    return _as_text(answer) == _as_text(gold)


def _is_null(value: Any) -> bool:
    return value is None or (isinstance(value, str) and value.strip().lower() in _NULL_WORDS)


def _as_text(value: Any) -> str:
    if isinstance(value, bytes | bytearray | memoryview):
        value = bytes(value).decode("utf-8", errors="replace")
    return " ".join(str(value).split()).casefold()


def _as_number(value: Any) -> tuple[Decimal, int] | None:
    """(exact value, decimals shown) for a finite number or numeric text; None otherwise."""
    if isinstance(value, bool | int):
        return (Decimal(value), 0) if abs(value) < 2**63 else None
    if isinstance(value, float):
        # repr is the shortest text of the float: 58.33 shows two decimals.
        return _decimal_number(Decimal(repr(value))) if math.isfinite(value) else None
    if isinstance(value, Decimal):
        return _decimal_number(value)
    if isinstance(value, str):
        text = value.strip()
        if _THOUSANDS.fullmatch(text):
            text = text.replace(",", "")
        if _NUMBER.fullmatch(text) is None:
            return None
        try:
            return _decimal_number(Decimal(text))
        except InvalidOperation:
            return None
    return None


def _decimal_number(value: Decimal) -> tuple[Decimal, int] | None:
    if not value.is_finite():
        return None
    exponent = value.as_tuple().exponent
    decimals = -exponent if isinstance(exponent, int) and exponent < 0 else 0
    return (value, decimals)


def _numbers_equal(answer: tuple[Decimal, int], gold: Decimal) -> bool:
    """Whole numbers exactly; others equal as floats, or equal to the gold rounded to the
    answer's shown decimals (>= 2)."""
    value, decimals = answer
    if value == value.to_integral_value() and gold == gold.to_integral_value():
        # A float's relative tolerance would take 1000000001 for a gold 1000000000.
        return value == gold
    if math.isclose(float(value), float(gold), rel_tol=1e-9, abs_tol=1e-12):
        return True
    if decimals >= 2:
        return abs(float(value) - float(gold)) <= 0.5 * 10.0**-decimals * (1 + 1e-9) + 1e-12
    return False
