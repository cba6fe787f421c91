"""Loading question sets in the Spider and BIRD layouts, checked before any episode runs."""

from __future__ import annotations

import json
import sqlite3
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from rollout_core.clip import clip
from rollout_core.demo_benchmark import DEMO_DATASET_NAME, build_demo_benchmark
from rollout_core.errors import RollscopeError
from rollout_core.keys import key_problem
from rollout_core.records import Question
from rollout_core.sandbox import open_readonly
from rollout_core.utf8 import json_without_lone_surrogates

SQLITE_HEADER = b"SQLite format 3\x00"
QUESTIONS_FILENAMES = ("questions.json", "dev.json")
DB_DIR_NAMES = ("database", "dev_databases")
_DB_DIR_HINT = "pass --db-dir to the folder holding <db_id>/<db_id>.sqlite"
_QUESTIONS_HINT = "pass --questions PATH to a Spider/BIRD-style JSON list"

ExtraValue = str | int | float | bool


class DatasetError(RollscopeError, ValueError):
    """A questions file or database folder that cannot be used; the message names the fix."""


@dataclass(frozen=True)
class Dataset:
    """A loaded question set and the folder of its databases."""

    name: str
    """`demo`, `demo:test`, or the questions file path."""
    questions_path: Path
    db_dir: Path
    """Folder holding `<db_id>/<db_id>.sqlite`."""
    questions: tuple[Question, ...]
    split: str | None = None
    """The split these questions were filtered to, if any."""
    splits: tuple[str, ...] = ()
    """Values of the `split` field present in the file, sorted."""
    extra_fields: Mapping[str, Mapping[str, ExtraValue]] = field(
        default_factory=dict, compare=False, hash=False
    )
    """Scalar fields beyond the contract's (e.g. `split`, `kind`), by question id."""

    def __len__(self) -> int:
        return len(self.questions)

    def __contains__(self, question_id: object) -> bool:
        return question_id in self._index

    def db_path(self, db_id: str) -> Path:
        """Path of the SQLite file for `db_id`."""
        return self.db_dir / db_id / f"{db_id}.sqlite"

    def by_id(self, question_id: str) -> Question:
        """The question with this id; DatasetError when there is none."""
        try:
            return self._index[question_id]
        except KeyError:
            example = f" (ids look like '{self.questions[0].id}')" if self.questions else ""
            # As Python writes it, cut: a client's id may be long, or hold what no UTF-8 can.
            shown = clip(question_id, 80)
            raise DatasetError(
                f"unknown question id {shown!r} in dataset '{self.name}'{example}"
            ) from None

    @property
    def db_ids(self) -> tuple[str, ...]:
        """The databases these questions use, sorted."""
        return tuple(sorted({q.db_id for q in self.questions}))

    @cached_property
    def _index(self) -> dict[str, Question]:
        return {q.id: q for q in self.questions}


def load_dataset(
    questions_path: str | Path,
    db_dir: str | Path | None = None,
    *,
    name: str | None = None,
    check_databases: bool = True,
    split: str | None = None,
) -> Dataset:
    """Read a Spider/BIRD-style questions file and check that every database it names exists."""
    path = _questions_file(Path(questions_path).expanduser()).resolve()
    items = _read_json_list(path)
    questions, extras = _parse_items(items, path)
    splits = tuple(sorted({str(e["split"]) for e in extras.values() if "split" in e}))
    if split is not None:
        questions = _filter_split(questions, extras, split, splits, path)
    folder = _resolve_db_dir(path, db_dir, questions, required=check_databases)
    dataset = Dataset(
        name=name if name is not None else str(path),
        questions_path=path,
        db_dir=folder,
        questions=tuple(questions),
        split=split,
        splits=splits,
        extra_fields={q.id: extras[q.id] for q in questions},
    )
    if check_databases:
        _check_databases(dataset)
    return dataset


def load_named_dataset(
    name_or_path: str, *, db_dir: str | Path | None = None, split: str | None = None
) -> Dataset:
    """`demo` (or `demo:train` / `demo:test`), a questions file, or a folder holding one."""
    base, _, suffix = name_or_path.partition(":")
    if base == DEMO_DATASET_NAME:
        chosen = suffix or split
        demo = build_demo_benchmark()
        label = f"{DEMO_DATASET_NAME}:{chosen}" if chosen else DEMO_DATASET_NAME
        return load_dataset(demo.questions_path, demo.db_dir, name=label, split=chosen)
    path = Path(name_or_path).expanduser()
    if not path.exists():
        raise DatasetError(
            f"dataset not found: '{name_or_path}' (pass '{DEMO_DATASET_NAME}', a questions JSON"
            f" file, or a folder holding {' or '.join(QUESTIONS_FILENAMES)})"
        )
    return load_dataset(path, db_dir, name=name_or_path, split=split)


def select_questions(
    dataset: Dataset, *, limit: int | None = None, question_ids: Sequence[str] | None = None
) -> list[Question]:
    """The questions a run uses: the given ids in order, else the first `limit`, else all."""
    if question_ids is not None:
        if isinstance(question_ids, str):
            question_ids = [question_ids]
        if not question_ids:
            raise DatasetError("no question ids given (pass at least one, or none to run all)")
        repeated = sorted(qid for qid, n in Counter(question_ids).items() if n > 1)
        if repeated:
            raise DatasetError(f"question id '{repeated[0]}' is listed more than once")
        unknown = [qid for qid in question_ids if qid not in dataset]
        if unknown:
            shown = ", ".join(f"'{qid}'" for qid in unknown[:5])
            more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
            example = f"; ids look like '{dataset.questions[0].id}'" if dataset.questions else ""
            raise DatasetError(
                f"unknown question ids in dataset '{dataset.name}': {shown}{more}"
                f" (check the ids{example})"
            )
        return [dataset.by_id(qid) for qid in question_ids]
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
            raise DatasetError(
                f"limit must be a positive number of questions, got {limit!r}"
                " (omit it to run all questions)"
            )
        return list(dataset.questions[:limit])
    return list(dataset.questions)


def _questions_file(path: Path) -> Path:
    """The questions file itself, or the first known file name inside a folder."""
    if path.is_dir():
        for filename in QUESTIONS_FILENAMES:
            if (path / filename).is_file():
                return path / filename
        raise DatasetError(f"no {' or '.join(QUESTIONS_FILENAMES)} in {path} ({_QUESTIONS_HINT})")
    if not path.is_file():
        raise DatasetError(f"questions file not found: {path} ({_QUESTIONS_HINT})")
    return path


def _read_json_list(path: Path) -> list[Any]:
    """The file's top-level JSON list, with errors that give the line and column."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DatasetError(f"questions file is not UTF-8 text: {path} ({exc.reason})") from None
    try:
        data = json.loads(text)
        # A lone surrogate's escape, maybe: read as the importers read it.
        if "\\ud" in text or "\\uD" in text:
            data = json_without_lone_surrogates(data)
    except json.JSONDecodeError as exc:
        raise DatasetError(
            f"questions file is not valid JSON (line {exc.lineno} column {exc.colno}): {path}:"
            f" {exc.msg}"
        ) from None
    except RecursionError:
        raise DatasetError(
            f"questions file nests lists or objects too deep for Python's json to read: {path}"
            f" ({_QUESTIONS_HINT})"
        ) from None
    except ValueError:  # a whole number past the digits Python converts
        raise DatasetError(
            f"questions file holds a whole number of more than {sys.get_int_max_str_digits():,}"
            f" digits, past what Python reads: {path} ({_QUESTIONS_HINT})"
        ) from None
    if not isinstance(data, list):
        raise DatasetError(
            f"questions file must hold a JSON list of question objects, not a"
            f" {type(data).__name__}: {path} ({_QUESTIONS_HINT})"
        )
    if not data:
        raise DatasetError(f"questions file holds no questions: {path} ({_QUESTIONS_HINT})")
    return data


def _parse_items(
    items: list[Any], path: Path
) -> tuple[list[Question], dict[str, dict[str, ExtraValue]]]:
    """Questions and their extra scalar fields; ids from `id`/`question_id`, else the position."""
    questions: list[Question] = []
    extras: dict[str, dict[str, ExtraValue]] = {}
    positions: dict[str, int] = {}
    for index, item in enumerate(items):
        where = f"question #{index} (0-based) in {path.name}"
        if not isinstance(item, dict):
            raise DatasetError(f"{where} is a {type(item).__name__}, not a JSON object")
        qid = _question_id(item, index, path, where)
        where = f"question '{qid}' (#{index}) in {path.name}"
        if qid in positions:
            raise DatasetError(
                f"duplicate question id '{qid}' at #{positions[qid]} and #{index} in {path.name}"
                " (ids must be unique; drop the id fields to number questions by position)"
            )
        positions[qid] = index
        gold_key = "query" if "query" in item else "SQL"
        question = Question(
            id=qid,
            db_id=_text_field(item, "db_id", where),
            question=_text_field(item, "question", where),
            gold_sql=_text_field(item, gold_key, where, label="'query' (or BIRD's 'SQL')"),
            evidence=_optional_text(item, "evidence", where),
            difficulty=_optional_text(item, "difficulty", where),
        )
        if not _is_folder_name(question.db_id):
            raise DatasetError(
                f"{where} has db_id '{question.db_id}', which is not a plain folder name"
            )
        if (problem := key_problem(question.db_id)) is not None:
            raise DatasetError(f"{where} has a db_id that {problem}")
        questions.append(question)
        extras[qid] = {
            key: value
            for key, value in item.items()
            if key not in _KNOWN_FIELDS and isinstance(value, str | int | float | bool)
        }
    return questions, extras


_KNOWN_FIELDS = frozenset(
    {"id", "question_id", "db_id", "question", "query", "SQL", "evidence", "difficulty"}
)


def _question_id(item: dict[str, Any], index: int, path: Path, where: str) -> str:
    for key in ("id", "question_id"):
        value = item.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, str | int):
            raise DatasetError(f"{where} has an '{key}' that is neither text nor a number")
        if str(value).strip():
            qid = str(value).strip()
            if (problem := key_problem(qid)) is not None:
                raise DatasetError(f"{where} has an '{key}' that {problem}")
            return qid
    return f"{path.stem}-{index:04d}"


def _text_field(item: dict[str, Any], key: str, where: str, label: str | None = None) -> str:
    value = item.get(key)
    if value is None:
        raise DatasetError(
            f"{where} has no {label or repr(key)} field"
            " (each item needs db_id, question, and query or SQL)"
        )
    if not isinstance(value, str) or not value.strip():
        raise DatasetError(f"{where} has an empty or non-text '{key}' field")
    return value


def _optional_text(item: dict[str, Any], key: str, where: str) -> str | None:
    value = item.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise DatasetError(f"{where} has a non-text '{key}' field")
    return value


def _is_folder_name(db_id: str) -> bool:
    """True for a single path component, so a db_id cannot point outside the db folder."""
    return db_id not in (".", "..") and "/" not in db_id and "\\" not in db_id and "\0" not in db_id


def _filter_split(
    questions: list[Question],
    extras: Mapping[str, Mapping[str, ExtraValue]],
    split: str,
    splits: tuple[str, ...],
    path: Path,
) -> list[Question]:
    if not splits:
        raise DatasetError(
            f"split '{split}' was asked for but {path} has no 'split' fields (drop the split)"
        )
    if split not in splits:
        raise DatasetError(
            f"unknown split '{split}' in {path} (splits present: {', '.join(splits)})"
        )
    return [q for q in questions if str(extras[q.id].get("split")) == split]


def _resolve_db_dir(
    path: Path, db_dir: str | Path | None, questions: Sequence[Question], *, required: bool
) -> Path:
    """The folder given, else `database/`, `dev_databases/` or the questions file's own folder."""
    if db_dir is not None:
        folder = Path(db_dir).expanduser().resolve()
        if required and not folder.is_dir():
            raise DatasetError(f"database folder not found: {folder} ({_DB_DIR_HINT})")
        return folder
    db_ids = {q.db_id for q in questions}
    candidates = [path.parent / name for name in DB_DIR_NAMES] + [path.parent]
    for folder in candidates:
        if any((folder / db_id / f"{db_id}.sqlite").is_file() for db_id in db_ids):
            return folder
    if required:
        raise DatasetError(
            f"no databases found beside {path}: looked in {', '.join(DB_DIR_NAMES)}/ and"
            f" {path.parent} for <db_id>/<db_id>.sqlite ({_DB_DIR_HINT})"
        )
    return path.parent / DB_DIR_NAMES[0]


def _check_databases(dataset: Dataset) -> None:
    """Each db_id's file exists and starts with the SQLite header; errors name the question."""
    first_user: dict[str, str] = {}
    for question in dataset.questions:
        first_user.setdefault(question.db_id, question.id)
    for db_id, qid in first_user.items():
        db_path = dataset.db_path(db_id)
        if not db_path.is_file():
            raise DatasetError(
                f"question '{qid}' uses db_id '{db_id}' but {db_path} does not exist"
                f" ({_DB_DIR_HINT})"
            )
        try:
            with db_path.open("rb") as handle:
                header = handle.read(len(SQLITE_HEADER))
        except OSError as exc:
            raise DatasetError(
                f"cannot read {db_path}: {exc.strerror} (check its permissions)"
            ) from None
        if header != SQLITE_HEADER:
            raise DatasetError(
                f"{db_path} is not a SQLite database (it does not start with 'SQLite format 3');"
                " replace it with the real database file"
            )
        try:
            conn = open_readonly(db_path)
            try:
                conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            finally:
                conn.close()
        except sqlite3.DatabaseError as exc:
            raise DatasetError(_unreadable(db_path, exc)) from None


def _unreadable(db_path: Path, exc: sqlite3.DatabaseError) -> str:
    """Why a database file SQLite will not open reads so: a write-ahead log or a rollback
    journal beside it (a write never finished) needs a folder SQLite may write in; any other
    file is not the database."""
    pending = [
        beside
        for suffix in ("-wal", "-journal")
        if (beside := db_path.with_name(db_path.name + suffix)).is_file()
        and beside.stat().st_size > 0
    ]
    # A file SQLite opened and found broken is broken, whatever lies beside it.
    if pending and "malformed" not in str(exc):
        return (
            f"{db_path} cannot be opened ({exc}): {pending[0].name} beside it holds writes "
            "never finished, and SQLite reads them only where it may write in the folder; "
            "open the database once where it can (sqlite3 FILE 'PRAGMA wal_checkpoint(TRUNCATE)' "
            "finishes them), or copy the folder somewhere writable"
        )
    return (
        f"{db_path} is not a readable SQLite database ({exc}); replace it with the real "
        "database file"
    )
