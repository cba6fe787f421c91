"""Commands that only read a store: `runs`, `show` and `export`; none creates or changes it."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from app.cli.episode_ids import episode_id as parse_episode_id
from app.cli.output import err, fail, jsonable, out
from app.cli.stores import DEFAULT_STORE, StoreOpt, open_reader
from app.plural import counted
from rollout_core.clip import clip


def runs(
    store: StoreOpt = DEFAULT_STORE,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    limit: Annotated[int, typer.Option(min=1, help="The newest runs listed at most.")] = 50,
) -> None:
    """List the runs in a store with their metrics."""
    from app.render import runs_table

    limit = min(limit, sys.maxsize - 1)
    summaries = open_reader(store).list_runs(limit=limit + 1)  # one more: are there more?
    more = len(summaries) > limit
    summaries = summaries[:limit]
    if as_json:
        print(json.dumps([jsonable(dataclasses.asdict(s)) for s in summaries], indent=2))
    elif not summaries:
        out.print("no runs yet: start one with `rollscope run --policy oracle --dataset demo`")
    else:
        out.print(runs_table(summaries, out.width))
    if more:  # on stderr: --json's stdout stays the list
        err.print(f"the newest {counted(limit, 'run')} listed; the store holds more (--limit N)")


def show(
    episode_id: Annotated[
        int,
        typer.Argument(
            parser=parse_episode_id,
            metavar="EPISODE",
            help="Episode id (see the dashboard or export).",
        ),
    ],
    prompt: Annotated[
        bool, typer.Option("--prompt", help="Also print each step's prompt, as the model saw it.")
    ] = False,
    store: StoreOpt = DEFAULT_STORE,
) -> None:
    """Print one episode's transcript."""
    from app.render import episode_transcript

    detail = open_reader(store).get_episode(episode_id)
    if detail is None:
        fail(f"no episode {episode_id} in the store")
    out.print(episode_transcript(detail, prompts=prompt))


def export(
    run_refs: Annotated[
        list[str] | None, typer.Option("--run", help="Run name or id; repeat for several runs.")
    ] = None,
    all_runs: Annotated[bool, typer.Option("--all", help="Every run in the store.")] = False,
    store: StoreOpt = DEFAULT_STORE,
    fmt: Annotated[
        str | None,
        typer.Option(
            "--format", help="jsonl or parquet (default: the --output name's, else jsonl)."
        ),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(help="File to write (default: RUN.FORMAT, or rollscope-export.FORMAT)."),
    ] = None,
    training_steps: Annotated[
        str | None,
        typer.Option(
            metavar="FROM-TO",
            help="Only the episodes played at these training steps: 100-200, 150, 100- or -200.",
        ),
    ] = None,
) -> None:
    """Write runs' finished episodes with their steps to one JSONL or Parquet file.

    JSONL has one object per episode with a `steps` list; Parquet has the same columns, the
    steps a nested list of structs. Runs follow one another in the order given (--all: oldest
    first). The file appears only when complete.
    """
    from app.export import EXPORT_FORMATS, default_output, export_episodes
    from storage.read_models import EpisodeFilter, RunSummary

    named = output.suffix.removeprefix(".").lower() if output is not None else ""
    if fmt is None:
        fmt = named if named in EXPORT_FORMATS else "jsonl"
    if fmt not in EXPORT_FORMATS:
        fail(f"unknown format {fmt!r} (choose {' or '.join(EXPORT_FORMATS)})")
    if named in EXPORT_FORMATS and named != fmt:
        fail(f"--output {output} names a .{named} file, and --format is {fmt}; make them agree")
    low, high = _step_range(training_steps) if training_steps is not None else (None, None)
    flt = EpisodeFilter(min_train_step=low, max_train_step=high)
    if run_refs and all_runs:
        fail("--run and --all both given; name the runs, or give --all for every run")
    if not run_refs and not all_runs:
        fail("name the runs to export: --run NAME (repeatable), or --all for every run")
    if output is not None:
        _check_output(output)
    st = open_reader(store)
    if all_runs:
        chosen = sorted(st.list_runs(limit=sys.maxsize), key=lambda r: r.id)
        if not chosen:
            fail("the store has no runs to export (list them with `rollscope runs`)")
    else:
        by_id: dict[int, RunSummary] = {}
        for ref in run_refs or []:
            found = st.find_run(ref)
            if found is None:
                fail(f"no run {ref!r} in the store (list them with `rollscope runs`)")
            by_id.setdefault(found.id, found)  # a run named twice (or by name and id) once
        chosen = list(by_id.values())
    target = output or default_output([r.name for r in chosen], fmt)
    _check_output(target)
    if (store_file := st.sqlite_file) is not None and _is_store_file(target, store_file):
        fail(f"--output {target} is one of the store's own files; choose another file to write")
    try:
        count = export_episodes(st, [r.id for r in chosen], target, fmt, flt)
    except OSError as exc:
        fail(f"cannot write {target}: {exc.strerror or exc}")
    text = f"wrote {counted(count, 'episode')} of {counted(len(chosen), 'run')} to {target}"
    if training_steps is not None:
        text += f" (training steps {training_steps.strip()})"
        if not count:
            text += ": no finished episode of these runs was played at those steps"
    # One line, as given: a path may hold "[...]", which is not markup.
    out.print(text, soft_wrap=True)


def _step_range(text: str) -> tuple[int | None, int | None]:
    """`100-200`, `150`, `100-` or `-200` as (from, to); a bad range exits with its reason."""
    low, dash, high = text.strip().partition("-")
    try:
        bounds = [int(b) if b.strip() else None for b in (low, high if dash else low)]
    except ValueError:
        bounds = []
    if len(bounds) != 2 or bounds == [None, None] or any(b is not None and b < 0 for b in bounds):
        fail(
            f"--training-steps {text!r} is not a range of training steps; give FROM-TO in whole "
            "steps: 100-200, 150, 100- or -200"
        )
    first, last = bounds
    if first is not None and last is not None and first > last:
        fail(f"--training-steps {text!r} runs backwards; give the lower step first")
    return first, last


_JOURNALS = ("-wal", "-shm", "-journal")


def _is_store_file(path: Path, store_file: Path) -> bool:
    """Whether writing `path` would replace the SQLite store or one of its journal files."""
    names = [store_file] + [store_file.with_name(store_file.name + s) for s in _JOURNALS]
    return any(path.resolve() == name.resolve() or _same_inode(path, name) for name in names)


def _same_inode(a: Path, b: Path) -> bool:
    """Whether both exist and are one file (a hard link to the store has another name)."""
    try:
        return a.samefile(b)
    except OSError:
        return False


def _check_output(path: Path) -> None:
    """Refuse, before anything is written, an output that cannot become a file."""
    try:
        path.stat()
    except FileNotFoundError:
        pass
    except OSError as exc:  # a name past the file system's length, for one
        fail(f"--output {clip(str(path), 80)} cannot be used ({exc.strerror})")
    if path.is_dir():
        fail(f"--output {path} is a folder; give a file name")
    if not path.parent.is_dir():
        fail(f"the folder {path.parent} does not exist; create it or choose another --output")
