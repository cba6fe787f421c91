"""An import run: a format's files read one after another, each row an episode written through
the run's sink, nothing twice and nothing half.

- Each file is recorded with its path and SHA-256 before its rows are read; a file the run read
  whole is not read again, and the rows of one read in part (a stopped import) or grown since (an
  appending writer) that the run holds already, by digest, are passed over; a file rewritten
  since keeps in the run what it gave before; its new rows make GRPO groups of their own when
  rows its last reading held are gone from it (a step played again), else they join the step's
  groups. Each reading records how many rows of earlier versions it no longer holds; a row found
  again (a rewrite caught half-way, then whole) is un-marked, never imported twice, and a
  version the path held before another is read again, so that its marks are its own.
- A file with the very bytes of another the run read whole that is there no more (renamed,
  moved) is recorded and not read. A file that cannot be read is told and counted as one bad
  line.
- A JSONL file grown by appending (its first bytes are those the last whole reading found, up
  to a newline) is read on from there: a file followed while it grows for hours costs its new
  lines, not all of it again.
- Episodes are written whole (start, steps and finish in one transaction), a batch at a time:
  a crash loses the batch in hand, never half an episode, and importing again writes what is
  missing. A stop (`Importer.stop`, which Ctrl-C and SIGTERM set) is taken between two rows,
  never inside a write.
- Files go in groups of about a batch's rows (a large file alone, many small ones together),
  begun together, their episodes written a batch at a time, finished together: a file an
  episode (rLLM) costs a share of a few transactions, not three of its own.
- A batch is written on the reading thread, between two reads: a writer thread only took
  turns with the reader on the GIL, and a writer process spent on pickling the batches what
  it saved (docs/benchmarks.md, Import).
- A row that is no rollout is told in one line (file, line, problem) and counted on the run,
  or, with `strict`, stops the import there.
"""

from __future__ import annotations

import hashlib
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from app.importers.check import Checker
from app.importers.detect import other_formats_files
from app.importers.rollouts import (
    CORRECT_AT,
    REWRITTEN,
    Numbering,
    OwnQuestions,
    Rollout,
    episode_records,
    question_key,
    turn_actions,
)
from app.importers.source import FileDigest, Format, JsonLines, Part, Row, file_digest
from app.plural import counted
from rollout_core.errors import RollscopeError
from rollout_core.records import (
    EpisodeRecord,
    EpisodeStart,
    IterationBatch,
    RunSpec,
    RunStatus,
    SourceRow,
    StepRecord,
)
from storage.collector import collector_paused
from storage.imports import FileBytes, FileRead, FileStart, LastReading
from storage.sink import StoreSink
from storage.store import Store

BATCH_EPISODES = 2000
"""Episodes a write holds: a transaction per batch, a batch's records in memory at most."""
NOTES_PER_FILE = 5
"""Bad rows told one by one in a file; the rest are counted."""
_BACKWARD_CHUNK = 1 << 16
"""Bytes read at a time looking back from a file's end for its last newline."""
_NO_BYTES = FileDigest(hashlib.sha256(b"").digest(), 0, 0)
"""The digest of a file that could not be read: no bytes read."""


class ImportFailure(RollscopeError, ValueError):
    """The import cannot go on; the message says why and what to do."""


class ImportStopped(Exception):
    """The import was asked to stop (`Importer.stop`): raised between two rows, with the
    batches written before it whole in the store and the batch in hand left for the next
    import."""


@dataclass(frozen=True, slots=True)
class ImportOptions:
    """What `rollscope import` was asked."""

    path: Path
    name: str
    strict: bool = False
    questions: str | None = None
    db_dir: str | None = None
    correct_at: float = CORRECT_AT
    evaluation_of: str | None = None
    """The training run the files' rollouts evaluate (a trainer's validation files)."""


@dataclass(slots=True)
class FileResult:
    """What importing one file did."""

    path: str
    episodes: int = 0
    """Episodes written from it this time."""
    skipped: int = 0
    known: int = 0
    """Rows read that the run held already (a file read on from where its last reading
    ended reads none of those)."""
    already: bool = False
    """The run had read the whole file before: nothing was read."""
    copy_of: str | None = None
    """The file holds the very bytes of this other file the run read whole, which is there no
    more (a step file renamed or moved): nothing was read (`already` too)."""
    pending: bool = False
    """Its last line is still being written (no newline yet): left for a later import."""
    unreadable: bool = False
    """The file as a whole could not be read (not Parquet, say): that bad row, line 0, is the
    file, counted as one skipped line."""
    problems: list[str] = field(default_factory=list)


def rollout_files(fmt: Format, root: Path) -> list[Path]:
    """The format's files under `root` (not a folder or a broken link named like one)."""
    return [p for p in fmt.files(root.resolve()) if p.is_file()]


class Importer:
    """Reads a format's files into one run of a store."""

    def __init__(
        self,
        store: Store,
        fmt: Format,
        options: ImportOptions,
        *,
        on_note: Callable[[str], None] = lambda _: None,
        on_written: Callable[[int, str, float], None] = lambda *_: None,
        problems_in_results: bool = False,
        checker: Checker | None = None,
    ) -> None:
        """`checker`: the questions of `options.questions`, when the caller read them already
        (the CLI reads them before it makes a store, so bad ones make none)."""
        self.store = store
        self.fmt = fmt
        self.options = options
        self.root = options.path.resolve()
        self.on_note = on_note
        self.on_written = on_written
        """Told the episodes of each batch once they are in the store, the file its last row
        is of, and the share of that file's rows read to it (a progress bar's): a large file's
        rows come in batches long before its result."""
        self.problems_in_results = problems_in_results
        """A file's bad rows are left in its result's `problems`, not told through `on_note` as
        they are read: a caller that tells a folder of files in one line, once the group's
        episodes are written, tells a bad file's problems beside that file's own line."""
        self.run_id = 0
        self.created = False
        """Whether `open` made the run (rather than reopening one to read on into)."""
        self.regraded = 0
        """Episodes re-graded against the questions file (`--questions`)."""
        self.in_hand: list[FileResult] = []
        """The files of the group being read, each with the episodes it has written so far:
        what a stop mid-group has written."""
        self.stop = threading.Event()
        """Set to stop the import before its next row (a follow: before its next look)."""
        self._sink: StoreSink | None = None
        self._numbering: Numbering | None = None
        if checker is None and options.questions is not None:
            checker = Checker(options.questions, options.db_dir)
        self._checker = checker
        self._own: OwnQuestions | None = None
        """The ids rollscope's own runs know questions by (read at `open`)."""
        self._model: str | None = None
        self._model_looked = False
        """Whether the files were looked at for a model the run did not name when opened."""
        """The model the run records (its first rollout's, where the files name one)."""
        self._other_model_told = False

    # -- the run ------------------------------------------------------------------------------

    def open(self) -> int:
        """Create the run, or reopen the import run of that name to read on into it."""
        found = self.store.run_named(self.options.name)
        if found is None:
            # The questions and databases are --questions' (the files name neither): Replay
            # and Compare run the gold SQL and the episodes' SQL again on those databases.
            dataset = self._checker.dataset if self._checker is not None else None
            spec = RunSpec(
                name=self.options.name,
                policy=self.fmt.name,
                dataset=dataset.name if dataset is not None else "",
                questions_path=str(dataset.questions_path) if dataset is not None else "",
                db_dir=str(dataset.db_dir) if dataset is not None else "",
                kind="import",
                checkpoint=self.fmt.checkpoint(self.root),
                evaluation_of=self.options.evaluation_of,
            )
            self.run_id = self.store.create_run(
                spec,
                episodes_planned=0,
                source_format=self.fmt.name,
                source_path=str(self.root),
            )
            self.created = True
            self._model = spec.checkpoint
        else:
            self._model = found.checkpoint
            self._check_same_source(found.kind, found.source_format, found.source_path)
            self._check_same_questions(found.spec)
            self.run_id = found.id
            self.store.set_run_status(self.run_id, "running")
        self._sink = self.store.sink(self.run_id)
        if self.root.is_dir():
            # What of the folder the format passes over: files named unlike its own (verl's),
            # else another format's files beside them.
            left_out = self.fmt.left_out(self.root) or other_formats_files(self.fmt, self.root)
            if left_out:
                self.on_note(left_out)
        if not_files := self._not_files():
            self.on_note(not_files)
        self._own = OwnQuestions(self.store)
        if not self.created:
            self._match_earlier_questions()
        self._numbering = Numbering.of_run(self.store, self.run_id)
        return self.run_id

    def match_new_questions(self) -> None:
        """Between two files of a follow: questions a rollscope run has played since are
        matched too (a checkpoint evaluated while the training goes on)."""
        assert self._own is not None
        if self._own.refresh() and self._match_earlier_questions():
            # The moved samples are numbered after those already under the new ids.
            self._numbering = Numbering.of_run(self.store, self.run_id)

    def _match_earlier_questions(self) -> int:
        """Questions imported before a rollscope run played them take its ids
        (`match_by_text`); the episodes moved."""
        assert self._own is not None
        questions, moved = self._own.match(self.run_id)
        if moved:
            self.on_note(
                f"{counted(questions, 'question')} of the run ({counted(moved, 'episode')}) "
                "now carry the ids rollscope's own runs know them by (matched by their text)"
            )
        return moved

    def _check_same_source(self, kind: str, fmt: str | None, path: str | None) -> None:
        name = self.options.name
        if kind != "import":
            raise ImportFailure(
                f"run {name!r} is a {kind} run, not an import; import under another --name"
            )
        if fmt != self.fmt.name or path != str(self.root):
            raise ImportFailure(
                f"run {name!r} imports {fmt} files from {path}, not {self.fmt.name} files from "
                f"{self.root}; import these under another --name"
            )

    def _check_same_questions(self, spec: Mapping[str, Any]) -> None:
        """A run is re-graded throughout or not at all: reading on, the run's --questions
        are taken again when none are given, and others are refused."""
        name = self.options.name
        questions, db_dir = spec.get("questions_path") or "", spec.get("db_dir") or ""
        if self._checker is None:
            if questions:
                if not Path(questions).is_file():
                    raise ImportFailure(
                        f"run {name!r} is re-graded against {questions}, which is gone; put it "
                        "back, or import all the files under another --name"
                    )
                self._checker = Checker(questions, db_dir)
                self.on_note(f"re-grading against {questions}, as the run's first import did")
            return
        given = self._checker.dataset
        if not questions:
            raise ImportFailure(
                f"run {name!r} was imported without --questions, so none of its episodes so far "
                "is re-graded; import again without --questions, or all the files under another "
                "--name"
            )
        if (str(given.questions_path), str(given.db_dir)) != (questions, db_dir):
            raise ImportFailure(
                f"run {name!r} is re-graded against {questions} (databases in {db_dir}), not "
                f"{given.questions_path} (databases in {given.db_dir}); import again without "
                "--questions (the run's are taken), or under another --name"
            )

    def finish(self, status: RunStatus, error: str | None = None) -> None:
        """Set the run's status (the batch in hand, if any, is not written)."""
        if self._checker is not None:
            self._checker.close()
        if self.run_id:
            self.store.set_run_status(self.run_id, status, error=error)

    def heartbeat(self) -> None:
        self.store.heartbeat(self.run_id)

    @property
    def unmatched(self) -> int:
        """Episodes whose question the questions file does not hold (not re-graded)."""
        return self._checker.unmatched if self._checker is not None else 0

    # -- files --------------------------------------------------------------------------------

    def files(self) -> list[Path]:
        """The format's files under the root (not a folder or a broken link named like one)."""
        return rollout_files(self.fmt, self.root)

    def _not_files(self) -> str | None:
        """The entries named like the format's files that are no file (a broken link, a folder,
        a pipe), in one line: left out, and said to be, as a step missing would not be."""
        if not self.root.is_dir():
            return None
        names = [self.relative(p) for p in self.fmt.files(self.root) if not p.is_file()]
        if not names:
            return None
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        which = "it is" if len(names) == 1 else "they are"
        return (
            f"left out {shown}: named like {self.fmt.label} files, {which} no file to read "
            "(a broken link, a folder or a pipe)"
        )

    def relative(self, path: Path) -> str:
        """The file's path under the root, as the run records it. Not resolved: a step file
        may be a link to elsewhere, and is recorded where the folder holds it."""
        if path == self.root:
            return path.name
        return path.relative_to(self.root).as_posix()

    def import_file(self, path: Path) -> FileResult:
        """Read one file into the run: what is new in it, each bad row told and counted."""
        [result] = self.import_files([path])
        return result

    def import_files(
        self, paths: Iterable[Path], *, whole_lines: bool = False
    ) -> Iterator[FileResult]:
        """Read files into the run, each file's result once its episodes are all in. Files go
        in groups of about a batch's rows, begun, written and finished together: a folder of
        one-episode files (rLLM's) costs a few transactions a group, not three a file.
        `whole_lines`: a JSONL file is read up to its last newline, its unfinished last line
        left to the next reading (a follow taking a file its writer is still writing)."""
        group: list[_Taken] = []
        rows = 0
        for path in paths:
            taken = self._take(path)
            group.append(self._whole_lines(taken) if whole_lines else taken)
            rows += group[-1].rows
            if rows >= BATCH_EPISODES or len(group) >= BATCH_EPISODES:
                yield from self._import_group(group)
                group, rows = [], 0
        if group:
            yield from self._import_group(group)

    def _take(self, path: Path) -> _Taken:
        """A file as its digest finds it, with the run's last whole reading of a JSONL file
        (to read on from its end if it only grew since)."""
        rel = self.relative(path)
        last = (
            self.store.last_file_reading(self.run_id, rel)
            if isinstance(self.fmt, JsonLines)
            else None
        )
        try:
            digest = file_digest(path, last.size if last is not None else None)
            return _Taken(path, rel, digest, self.fmt.row_count(path, digest), last)
        except FileNotFoundError:
            raise  # gone since it was listed (a follow looks again), not unreadable
        except OSError as exc:
            # Told and counted as its one bad line, recorded as a reading of no bytes: the
            # other files are read all the same.
            return _Taken(path, rel, _NO_BYTES, 0, last, unreadable=f"could not be read ({exc})")

    def _whole_lines(self, taken: _Taken) -> _Taken:
        """A JSONL file taken up to its last newline: its unfinished last line is the next
        reading's."""
        if not isinstance(self.fmt, JsonLines) or taken.unreadable:
            return taken
        digest = _whole_lines_digest(taken.path, taken.digest, taken.last)
        if digest is taken.digest:
            return taken
        return replace(taken, digest=digest, rows=self.fmt.row_count(taken.path, digest))

    def _name_the_model(self) -> None:
        """The run's model, once, where none was named when it was opened: `--follow` begun
        before the trainer's first file, or a run reopened that had none."""
        if self._model is not None or self._model_looked:
            return
        self._model_looked = True
        model = self.fmt.checkpoint(self.root)
        if model:
            self.store.set_run_checkpoint(self.run_id, model)
            self._model = model

    def _import_group(self, group: list[_Taken]) -> Iterator[FileResult]:
        starts = self.store.begin_import_files(
            self.run_id, [FileBytes(t.rel, t.digest.sha256, t.digest.size, t.rows) for t in group]
        )
        assert self._sink is not None, "open() the run first"
        batch = _Batch(self._sink, self.on_written)
        read: list[FileRead] = []
        self.in_hand = []
        # The collector's passes over the records in hand are pure cost: none is in a cycle.
        with collector_paused():
            for taken, start in zip(group, starts, strict=True):
                result = FileResult(taken.rel)
                self.in_hand.append(result)
                if taken.unreadable is not None:
                    self._bad(result, 0, taken.unreadable)
                    result.unreadable = True
                    if start.completed:  # counted by the reading that first found it so
                        result.skipped = 0
                    else:
                        read.append(self._unread(taken, start, 1))
                elif start.completed:
                    result.already = True
                elif start.copy_of is not None and self._moved(start.copy_of, taken.digest):
                    result.already, result.copy_of = True, start.copy_of
                    read.append(self._unread(taken, start, 0))
                else:
                    read.append(self._read(taken, start, result, batch))
            batch.write()
        self.store.finish_import_files(self.run_id, read)
        self._name_the_model()
        while self.in_hand:
            yield self.in_hand.pop(0)

    def _moved(self, original: str, digest: FileDigest) -> bool:
        """Whether the file read whole at `original` with these bytes is there no more (renamed,
        moved, or since rewritten): then this file is it. Two files of those bytes side by side
        can be two plays (a greedy evaluation of one checkpoint at two steps, SkyRL's step
        being its folder's), and both are read."""
        there = self.root / original
        try:
            if not there.is_file() or there.stat().st_size != digest.size:
                return True
            return file_digest(there).sha256 != digest.sha256
        except OSError:
            return True

    def _unread(self, taken: _Taken, start: FileStart, skipped: int) -> FileRead:
        """The reading of a file none of whose rows is read (a copy, or a file that cannot be
        read), with its bad lines: the path's rows are left marked as they are."""
        return FileRead(
            start.file_id, taken.rel, taken.rows, skipped, start.earlier, start.gone_before
        )

    def _read(self, taken: _Taken, start: FileStart, result: FileResult, batch: _Batch) -> FileRead:
        """Read a begun file's rows into the batch (written each time it is full): what is new
        in it, each bad row told and counted."""
        rel, last, digest = taken.rel, taken.last, taken.digest
        # The file as its digest found it: what an appending writer adds meanwhile is the
        # next reading's.
        part, carried, after = Part(end=digest.size), 0, None
        grown = False
        if last is not None and self._grown(taken.path, last, digest):
            grown = True
            # Only the new lines are read, and only rows a reading since may have written, or
            # a rewrite dropped, can be held; the bad lines the last reading counted still count.
            part = Part(last.size, last.rows + 1, digest.size)
            carried, after = last.skipped, last.file_id
        held = self.store.imported_digests(self.run_id, rel, after) if start.earlier else Counter()
        # A file rewritten without rows its last reading held (a trainer resumed from a
        # checkpoint plays its step again): its new rollouts are another generation of the
        # step, in groups of their own. One that still holds them all (a writer that rewrites
        # its log whole, a line repaired) only adds rows, to the groups the run holds. Rows
        # an earlier rewrite dropped are gone from both.
        rewritten = (
            start.replaces
            and not grown
            and bool(held)
            and _missing(self._rows(taken, part), held) > start.gone_before
        )
        for row in self._rows(taken, part):
            if self.stop.is_set():
                raise ImportStopped
            # A row is held when the run holds a row of this file with its bytes, wherever it
            # stands now (lines move when a bad line is deleted); each held row once, with the
            # episodes it gave (a v1 line gives one a trained agent).
            if held and _take_held(row, held):
                result.known += 1
                continue
            if row.incomplete:
                result.pending = True
                self.on_note(
                    f"{rel}:{row.line}: the last line has no newline and is no rollout "
                    f"yet, left for the next import: {row.problem}"
                )
                continue
            if row.rollout is None:
                if row.line == 0:
                    result.unreadable = True
                self._bad(result, row.line, row.problem or "not a rollout")
                continue
            for rollout in row.rollouts:
                self._add(batch, rollout, row, start.file_id, result, rewritten)
            batch.at = (rel, min(row.line / taken.rows, 1.0) if taken.rows else 1.0)
            # After the row's last episode: a row's episodes are written together, or none.
            if len(batch.finished) >= BATCH_EPISODES:
                batch.write()
        left = result.skipped - len(result.problems)
        if left > 0 and not self.problems_in_results:  # the file's line counts them all
            self.on_note(f"{rel}: {counted(left, 'more bad line')} skipped")
        # The held rows not found (a grown file was read from its last reading's end, and
        # holds what that reading held): those of earlier versions this one no longer holds.
        rows_gone = sum(held.values())
        if (gone := rows_gone - start.gone_before) > 0:
            self.on_note(
                f"{rel}: {counted(gone, 'row')} imported from it before "
                f"{'is' if gone == 1 else 'are'} no longer in it (it was rewritten); "
                "the run keeps them, and the new rollouts make groups of their own"
            )
        return FileRead(
            start.file_id,
            rel,
            taken.rows,
            carried + result.skipped,
            start.earlier,
            rows_gone,
            # Read over every row the run held of the path that this version may hold: what
            # is left of them is what it no longer holds, and the rest is held again.
            gone=held if start.earlier else None,
        )

    def _rows(self, taken: _Taken, part: Part) -> Iterator[Row]:
        """The file's rows as its digest found them (a JSONL file's `part`)."""
        if isinstance(self.fmt, JsonLines):
            return self.fmt.rows(taken.path, part)
        return self.fmt.rows(taken.path)

    def _grown(self, path: Path, last: LastReading, digest: FileDigest) -> bool:
        """Whether the file is the one its last whole reading found, with lines appended: it
        begins with the same bytes, and they end with a newline (a last line being written
        then was left for later, and is read with the new ones)."""
        if not isinstance(self.fmt, JsonLines) or digest.prefix_sha256 != last.sha256:
            return False
        if last.size == 0:  # nothing read then (a file empty, or that could not be read)
            return False
        with path.open("rb") as f:
            f.seek(last.size - 1)
            return f.read(1) == b"\n"

    def _bad(self, result: FileResult, line: int, problem: str) -> None:
        where = f"{result.path}:{line}" if line else result.path
        message = f"{where}: {problem}"
        if self.options.strict:
            raise ImportFailure(
                f"{message} (--strict stops at a bad line; fix the file and import again "
                "under the same --name to read on from what the run holds)"
            )
        result.skipped += 1
        if len(result.problems) < NOTES_PER_FILE:
            result.problems.append(message)
            if not self.problems_in_results:
                self.on_note(f"skipped {message}")

    def _add(
        self,
        batch: _Batch,
        rollout: Rollout,
        row: Row,
        file_id: int,
        result: FileResult,
        rewritten: bool = False,
    ) -> None:
        """Add a rollout's records to the batch; `rewritten`: its file rewrote one the run read
        before, and the rollouts such files give make groups of their own."""
        own, numbering = self._own, self._numbering
        assert own is not None and numbering is not None
        if self._model and rollout.model not in (None, self._model) and not self._other_model_told:
            # A run records one model: another's rollouts would pass for its own in Compare.
            self._other_model_told = True
            self.on_note(
                f"{result.path}:{row.line}: a rollout of model {rollout.model!r}, in a run of "
                f"{self._model!r}; a run is one model's: to compare them, import each model's "
                "rollouts under its own --name"
            )
        actions = turn_actions(rollout.turns)
        checked = regraded = None
        filled: tuple[int, ...] = ()
        if self._checker is not None:
            question = self._checker.question(rollout)
            if question is None:
                self._checker.unmatched += 1
            else:
                rollout.question_id, rollout.question = question.id, question.question
                rollout.db_id, rollout.gold_sql = question.db_id, question.gold_sql
                checked = self._checker.check(question, rollout, actions)
                regraded = checked.regraded
                self.regraded += regraded is not None
                filled = tuple(sorted(checked.observations))
        qid = rollout.question_id or question_key(rollout.question)
        if checked is None:
            # A question rollscope's own runs played under the same text (normalised): its
            # id, so that Compare and the Question map line the runs up.
            qid = own.id_of(qid)
        start, steps, finish = episode_records(
            rollout,
            qid,
            numbering.sample(qid),
            numbering.group(
                rollout.train_step,
                qid,
                # Not by file: rLLM rewrites a file an episode, and a group spans many.
                (REWRITTEN, rollout.group) if rewritten else rollout.group,
            ),
            source=SourceRow(file_id, row.line, row.sha256, regraded, filled, rollout.agent),
            checked=checked,
            correct_at=self.options.correct_at,
            actions=actions,
        )
        batch.add(start, steps, finish, result)


def whole_lines_end(path: Path, size: int) -> int:
    """Where the whole lines of the file's first `size` bytes end: past the last newline
    among them (0: none)."""
    end = size
    with path.open("rb") as f:
        while end > 0:
            start = max(0, end - _BACKWARD_CHUNK)
            f.seek(start)
            newline = f.read(end - start).rfind(b"\n")
            if newline >= 0:
                return start + newline + 1
            end = start
    return 0


def _whole_lines_digest(path: Path, digest: FileDigest, last: LastReading | None) -> FileDigest:
    """The digest of the file's bytes up to its last newline, as `digest` found them, with
    its prefix (the bytes the last reading ended at) where that falls within them."""
    end = whole_lines_end(path, digest.size)
    if end == digest.size:
        return digest
    head = file_digest(path, end)
    if head.prefix_sha256 is None:  # cut short since: read as the first digest found it
        return digest
    prefix = digest.prefix_sha256 if last is not None and last.size <= end else None
    # `digest` counted the unfinished last line as a line.
    return FileDigest(head.prefix_sha256, end, digest.lines - 1, prefix)


def _missing(rows: Iterable[Row], held: Counter[bytes]) -> int:
    """How many of the rows the run read from their path these rows no longer hold."""
    left = held.copy()
    for row in rows:
        _take_held(row, left)
    return sum(left.values())


def _take_held(row: Row, held: Counter[bytes]) -> bool:
    """Whether the run holds this row already; if so, it is counted off `held` (with the
    episodes it gave: a v1 line gives one a trained agent)."""
    key = _held_key(row, held)
    if key is None:
        return False
    held[key] = max(0, held[key] - max(1, len(row.rollouts)))
    return True


def _held_key(row: Row, held: Counter[bytes]) -> bytes | None:
    """The digest by which the run holds this row already, if it does: its own, or the one
    an earlier rollscope took of it (a file read in part before an upgrade)."""
    if held.get(row.sha256):
        return row.sha256
    if row.earlier_sha256 is not None and held.get(earlier := row.earlier_sha256()):
        return earlier
    return None


@dataclass(frozen=True, slots=True)
class _Taken:
    """A file of a group: where it is, its bytes as its digest found them, and the run's last
    whole reading of it (a JSONL file's)."""

    path: Path
    rel: str
    digest: FileDigest
    rows: int
    last: LastReading | None
    unreadable: str | None = None
    """Why the file could not be read (an error reading it), if it could not."""


class _Batch:
    """The episodes in hand, written whole through the run's sink; each counted to its file's
    result once written."""

    def __init__(self, sink: StoreSink, on_written: Callable[[int, str, float], None]) -> None:
        self.sink = sink
        self.on_written = on_written
        self.at = ("", 0.0)
        """The file of the last row added, and the share of its rows read to that row."""
        self.started: list[EpisodeStart] = []
        self.steps: list[StepRecord] = []
        self.finished: list[EpisodeRecord] = []
        self.results: list[FileResult] = []

    def add(
        self, start: EpisodeStart, steps: list[StepRecord], finish: EpisodeRecord, of: FileResult
    ) -> None:
        self.started.append(start)
        self.steps.extend(steps)
        self.finished.append(finish)
        self.results.append(of)

    def write(self) -> None:
        """Write what is held as one transaction, and count it to its files."""
        if not self.finished:
            return
        try:
            self.sink.write(IterationBatch(self.started, self.steps, self.finished))
        except KeyboardInterrupt:
            # A stop (Ctrl-C, SIGTERM) can land after the commit, before the count: the store
            # says whether the batch is in, so that the summary tells what the run holds.
            sink = self.sink
            if sink.store.episode_ids(sink.run_id, [self.finished[-1].key]):
                self._written()
            raise
        self._written()

    def _written(self) -> None:
        for result in self.results:
            result.episodes += 1
        written = len(self.finished)
        self.started, self.steps, self.finished, self.results = [], [], [], []
        self.on_written(written, *self.at)
