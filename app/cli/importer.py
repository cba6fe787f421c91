"""`rollscope import`: read the rollouts another framework wrote into a run of the store."""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from app.cli.output import USER_ERRORS, err, fail, one_line, out
from app.cli.stores import DEFAULT_STORE, StoreOpt, open_store
from app.pictured import picture_controls
from app.plural import counted
from rollout_core.errors import SpecError
from rollout_core.specs import checked_run_name

if TYPE_CHECKING:
    from app.importers.importer import FileResult, Importer
    from app.importers.source import Format

_Opt = typer.Option
_FORMATS = "auto, trl, verl, skyrl, rllm, verifiers, messages"
MAX_POLL_SECONDS = 3600.0
"""Past an hour a follow hardly follows; and a wait past time_t overflows."""
WAIT_SECONDS = 1.0
"""How often a follow started before the trainer's first file looks for it."""


def import_command(
    path: Annotated[
        Path,
        typer.Argument(
            help="A trainer's output folder (or one file): TRL output_dir, verl "
            "rollout_data_dir, SkyRL export_path, rLLM log dir, verifiers outputs, a chat log.",
            show_default=False,
        ),
    ],
    name: Annotated[
        str,
        _Opt("--name", help="Run name; importing again under it adds only what is new."),
    ],
    format_name: Annotated[str, _Opt("--format", help=f"One of {_FORMATS}.")] = "auto",
    store: StoreOpt = DEFAULT_STORE,
    questions: Annotated[
        str | None,
        _Opt(
            help="Questions file (Spider layout), or `demo`: match each rollout's question, run "
            "its SQL again to fill missing observations, and re-grade its final answer."
        ),
    ] = None,
    db_dir: Annotated[str | None, _Opt(help="Database folder of --questions.")] = None,
    follow: Annotated[
        bool, _Opt(help="Keep importing new files as the trainer writes them, until Ctrl-C.")
    ] = False,
    strict: Annotated[bool, _Opt(help="Stop at the first malformed line or file.")] = False,
    correct_at: Annotated[
        float,
        _Opt(
            help="A rollout whose file gives no verdict is correct when its reward is at "
            "least this."
        ),
    ] = 1.0,
    evaluation_of: Annotated[
        str | None,
        _Opt(
            help="The training run these rollouts evaluate (a trainer's validation files); "
            "the Training pages of the two open each other."
        ),
    ] = None,
    poll: Annotated[float, _Opt(help="Seconds between looks for new files (--follow).")] = 1.0,
    quiet: Annotated[bool, _Opt(help="Print only the summary.")] = False,
) -> None:
    """Import rollouts that TRL, verl, SkyRL, rLLM or verifiers wrote (or a chat log) as one run.

    Each rollout becomes an episode (its turns the steps, its score the reward, every reward
    column kept by name), with its training step and GRPO group. Importing the same files again
    adds nothing; --follow imports each new file of a training run as it appears.
    """
    from app.cli.import_progress import ImportProgress, file_sizes
    from app.importers.check import Checker
    from app.importers.importer import (
        Importer,
        ImportFailure,
        ImportOptions,
        ImportStopped,
        rollout_files,
    )
    from app.stopping import stop_on_signals

    try:
        name = checked_run_name(name)
    except SpecError as exc:
        fail(str(exc))
    if evaluation_of is not None:
        try:
            evaluation_of = checked_run_name(evaluation_of)
        except SpecError as exc:
            fail(f"--evaluation-of: {exc}")
    if questions is None and db_dir is not None:
        fail("--db-dir goes with --questions (the questions file whose databases it holds)")
    if not 0 < poll <= MAX_POLL_SECONDS:  # NaN too
        fail(f"--poll must be above 0 and at most {MAX_POLL_SECONDS:.0f} seconds, got {poll}")
    if not math.isfinite(correct_at):
        fail(f"--correct-at must be a finite number (a reward), got {correct_at}")
    fmt = _format(path, format_name, follow, quiet)
    options = ImportOptions(
        path=path, name=name, strict=strict, questions=questions, db_dir=db_dir,
        correct_at=correct_at, evaluation_of=evaluation_of,
    )  # fmt: skip
    try:
        # Listed before the store is opened: a path with nothing to import makes no store.
        files = [] if follow else rollout_files(fmt, path)
        if not follow and not files:
            fail(_no_files(fmt, path))
        checker = Checker(questions, db_dir) if questions is not None else None
        importer = Importer(
            open_store(store),
            fmt,
            options,
            on_note=lambda t: _note(t, quiet),
            # Files told a line a folder: a bad file's problems go with its own line.
            problems_in_results=fmt.file_an_episode,
            checker=checker,
        )
        importer.open()
    except USER_ERRORS as exc:
        fail(one_line(exc))
    progress = ImportProgress(
        name,
        file_sizes(files, importer.relative),
        shown=err.is_terminal and not quiet and not follow,
    )
    importer.on_written = progress.written
    started = time.monotonic()
    results: list[FileResult] = []
    # Files of an episode each are told a line a folder (a step), not thousands of lines.
    lines = _FileLines(fold=fmt.file_an_episode)

    def on_file(result: FileResult) -> None:
        results.append(result)
        progress.file_done(result.path)
        if not quiet:
            lines.add(result)

    with stop_on_signals(importer.stop) as signals:
        try:
            if follow:
                from app.importers.follow import follow as follow_files

                err.print(f"following {path} into run {name!r} (Ctrl-C stops)")
                follow_files(
                    importer,
                    on_file=on_file,
                    on_note=lambda t: _note(t, quiet),
                    on_look=lines.flush,  # what a look imported is told before the next
                    poll=poll,
                )
                raise ImportStopped  # a follow ends when it is asked to stop
            with progress:
                for result in importer.import_files(files):
                    on_file(result)
            lines.flush()
        except (KeyboardInterrupt, ImportStopped):
            lines.flush()
            # A follow ends with Ctrl-C: the run is complete as far as the files went.
            importer.finish(
                "completed" if follow else "cancelled",
                None if follow else f"stopped by {signals[-1] if signals else 'Ctrl-C'}",
            )
            # The files it stopped in: the episodes written from them are kept. What else
            # they held (the batch in hand, bad lines, counted on the run once a file is
            # finished) is read again by the next import, so it is not told here.
            results.extend(
                replace(r, skipped=0, unreadable=False) for r in importer.in_hand if r.episodes
            )
            _summary(importer, results, time.monotonic() - started, followed=follow)
            err.print(f"stopped: importing again under --name {name!r} reads on from here")
            raise typer.Exit(130) from None
        except ImportFailure as exc:
            lines.flush()
            importer.finish("failed", str(exc))
            fail(str(exc))
        except Exception as exc:
            lines.flush()
            # A store gone (a server shut down, a full disk) cannot take the status either:
            # the run then reads `interrupted` once this process is gone, and the error told
            # is the one that stopped the import.
            with contextlib.suppress(Exception):
                importer.finish("failed", f"{type(exc).__name__}: {exc}".splitlines()[0])
            if isinstance(exc, USER_ERRORS):
                fail(one_line(exc), code=1)
            raise
        # A stop asked for from here on waits for the run's status and the summary: the
        # files are all in.
        _finish(importer, results, path)
        _summary(importer, results, time.monotonic() - started)
        if signals:
            err.print(f"{signals[-1]} came after the last file was in: the import is complete")


def _finish(importer: Importer, results: list[FileResult], path: Path) -> None:
    """Mark the run completed; a run of bad lines only, or of no line, is refused (exit 2)."""
    if _all_bad(results):
        _refuse_all_bad(importer, results, path)
    if importer.created and not any(
        r.episodes or r.skipped or r.known or r.pending for r in results
    ):
        # Files with no line in them (empty, or blank lines only): no run for nothing.
        importer.finish("failed", "no rollout in the files")
        importer.store.delete_run(importer.run_id)
        fail(
            f"no rollout in {path}: its {counted(len(results), 'file')} "
            f"{'holds' if len(results) == 1 else 'hold'} no line; check the path"
        )
    importer.finish("completed")
    if not results:
        err.print(f"no {importer.fmt.label} files in {path}")


def _no_files(fmt: Format, path: Path) -> str:
    """Why no file of the format is there, with what is there instead."""
    others = sorted(p.name for p in path.iterdir() if p.is_file())[:3] if path.is_dir() else []
    found = f"; found {', '.join(others)}" if others else ""
    return (
        f"no {fmt.label} files in {path}: it reads {fmt.layout}{found}; check the path and "
        "--format, or import one file by its path"
    )


def _all_bad(results: list[FileResult]) -> bool:
    """Lines were read and not one of them was a rollout (nor one the run held already)."""
    return any(r.skipped for r in results) and not any(r.episodes or r.known for r in results)


def _refuse_all_bad(importer: Importer, results: list[FileResult], path: Path) -> None:
    """Exit 2 (bad input): a wrong --format or a file of another kind. A run this import made
    is removed (it holds nothing), so the same --name works once the files or the format are
    right; a run it read on into keeps what it held, with these lines counted as skipped."""
    skipped = sum(r.skipped for r in results)
    first = next((p for r in results for p in r.problems), "")
    what = (
        f"no file could be read ({counted(skipped, 'file')}"
        if all(r.unreadable and r.skipped == 1 for r in results if r.skipped)
        else f"every line read was bad ({counted(skipped, 'line')}"
    )
    hint = (
        f"check --format (read as {importer.fmt.name}) and the files"
        if importer.created
        else f"the run's earlier files read as {importer.fmt.name}: check these"
    )
    why = f"no rollout in {path}: {what}" + (f"; first: {first})" if first else ")") + f"; {hint}"
    if importer.created:
        importer.finish("failed", why)
        importer.store.delete_run(importer.run_id)
    else:
        importer.finish("completed")
    fail(why)


def _format(path: Path, name: str, follow: bool, quiet: bool) -> Format:
    """The format to read with. When following, a folder nothing is in yet is waited for, and
    so is one not made yet (verl makes its rollout folder with its first step's file)."""
    from app.importers.detect import FormatError, format_of

    try:
        return format_of(path, name)
    except FormatError as exc:
        if not follow or not _can_wait_for(path, name):
            fail(str(exc))
    return _wait_for_format(path, name, quiet)


def _can_wait_for(path: Path, name: str) -> bool:
    """Whether a follow can wait for files at `path`: a folder, or none yet, and a format
    rollscope reads."""
    from app.importers.detect import FORMATS

    return (not path.exists() or path.is_dir()) and name in (*FORMATS, "auto")


def _wait_for_format(path: Path, name: str, quiet: bool) -> Format:
    """The format of the first files a follow waited for. Ctrl-C or SIGTERM while it waits
    ends the command (exit 130) before any store is made, as a stop does once it follows."""
    import threading

    from app.importers.detect import FormatError, format_of
    from app.importers.follow import pause
    from app.stopping import stop_on_signals

    stop = threading.Event()
    with contextlib.suppress(KeyboardInterrupt), stop_on_signals(stop):
        if not quiet:  # told once a stop is taken as one
            what = "rollout files in" if path.exists() else "the trainer to make"
            err.print(f"waiting for {what} {path} ...")
        while not stop.is_set():
            pause(stop, WAIT_SECONDS)
            try:
                return format_of(path, name)
            except FormatError as exc:
                if not _can_wait_for(path, name):
                    fail(str(exc))
    err.print("stopped before any rollout file came; nothing imported")
    raise typer.Exit(130)


def _note(text: str, quiet: bool) -> None:
    if not quiet:  # a note names files: their names' control characters are pictured
        err.print(picture_controls(text), soft_wrap=True)


def _file_line(r: FileResult) -> None:
    # A file's name is the folder's writer's: its control characters are pictured, as a
    # file's values are, so that no name can drive the terminal.
    path = picture_controls(r.path)
    if r.copy_of is not None:
        copied = picture_controls(r.copy_of)
        text = f"{path}: the very bytes of {copied}, imported before; left as it is"
    elif r.already:
        text = f"{path}: imported before, left as it is"
    elif r.unreadable and not r.episodes and not r.known:
        text = f"{path}: could not be read, skipped (counted as 1 bad line on the run)"
    else:
        known = f", {r.known:,} held already" if r.known else ""
        skipped = f", {counted(r.skipped, 'bad line')} skipped" if r.skipped else ""
        text = f"{path}: {counted(r.episodes, 'episode')}{known}{skipped}"
    err.print(text, soft_wrap=True)


class _FileLines:
    """Each file's line; with `fold`, the files of one folder that read cleanly (no bad line,
    nothing left for later) as one line, told when the next folder begins or at `flush`."""

    def __init__(self, *, fold: bool) -> None:
        self.fold = fold
        self.folder: str | None = None
        self.files = self.before = self.episodes = self.known = 0

    def add(self, r: FileResult) -> None:
        if not self.fold or r.skipped or r.pending or r.unreadable:
            self.flush()
            if self.fold:  # read with the folder's other files, told now, before its line
                for problem in r.problems:
                    _note(f"skipped {problem}", quiet=False)
            _file_line(r)
            return
        folder = r.path.rpartition("/")[0] or "."
        if folder != self.folder:
            self.flush()
            self.folder = folder
        self.files += 1
        self.before += r.already
        self.episodes += r.episodes
        self.known += r.known

    def flush(self) -> None:
        if self.folder is None:
            return
        parts = []
        if read := self.files - self.before:
            known = f", {self.known:,} held already" if self.known else ""
            parts.append(f"{counted(read, 'file')}, {counted(self.episodes, 'episode')}{known}")
        if self.before:
            left = "it is" if self.before == 1 else "they are"
            parts.append(f"{counted(self.before, 'file')} imported before, left as {left}")
        err.print(f"{picture_controls(self.folder)}/: {'; '.join(parts)}")
        self.folder = None
        self.files = self.before = self.episodes = self.known = 0


def _summary(
    importer: Importer, results: list[FileResult], seconds: float, *, followed: bool = False
) -> None:
    episodes = sum(r.episodes for r in results)
    skipped = sum(r.skipped for r in results)
    read = len({r.path for r in results if not r.already})  # a growing file is read again
    if followed:
        rate = " of following"  # mostly waiting for the trainer: a rate would say nothing
    elif seconds > 0 and episodes:
        rate = f" ({episodes / seconds:,.0f} episodes/s)"
    else:
        rate = ""
    before = len({r.path for r in results if r.already})
    if not episodes and not read and before:
        line = (
            f"run {importer.run_id} {importer.options.name!r}: nothing new "
            f"({counted(before, 'file')} imported before)"
        )
    else:
        line = (
            f"run {importer.run_id} {importer.options.name!r}: {counted(episodes, 'episode')} "
            f"from {counted(read, importer.fmt.label + ' file')} in {seconds:.1f} s{rate}"
        )
    if importer.regraded:
        line += f"; {counted(importer.regraded, 'episode')} re-graded against --questions"
    if skipped:
        unreadable = sum(1 for r in results if r.unreadable)
        lines = skipped - unreadable
        parts = [counted(lines, "bad line")] if lines else []
        if unreadable:
            parts.append(counted(unreadable, "file") + " that could not be read")
        line += f"; {' and '.join(parts)} skipped (counted on the run)"
    if unmatched := importer.unmatched:
        line += (
            f"; {counted(unmatched, 'episode')} matched no question of --questions (not re-graded)"
        )
    out.print(line, soft_wrap=True)
