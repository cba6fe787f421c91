"""The `rollscope` command line: parse, build a spec, call one function, print, exit.

Exit codes: 0 done, 1 the run failed, 2 bad input, 130 stopped (Ctrl-C, SIGTERM, cancel).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import traceback
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from app import batch
from app.demo.grpo import GrpoSettings
from app.render import episode_transcript, runs_table
from rollout_core.errors import RollscopeError
from rollout_core.policies.registry import usage as policy_usage
from rollout_core.records import EpisodeKey, EpisodeRecord
from rollout_core.runner import RunStats
from rollout_core.settings import EnvironmentSettings, GenerationSettings, SettingsError
from rollout_core.specs import RunRequest
from storage.engine import StoreMissing
from storage.store import Store, StoreError

DEFAULT_STORE = "sqlite:///rollscope.db"
StoreOpt = Annotated[
    str, typer.Option("--store", envvar="ROLLSCOPE_STORE", help="SQLAlchemy URL or SQLite path.")
]

cli = typer.Typer(
    name="rollscope",
    help="Run, record, replay and compare text-to-SQL agent rollouts.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
# Piped output (CI logs, `| less`) gets a wide table rather than rich's 80-column default.
out = Console(width=None if sys.stdout.isatty() else 150)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 150)
# The project's own errors (bad input, an unusable file or store) and file errors are one line
# and exit 2; anything else is a bug and keeps its traceback.
USER_ERRORS = (RollscopeError, OSError)


def fail(message: str, code: int = 2) -> NoReturn:
    """One line on stderr, a non-zero exit, no traceback."""
    err.print(f"[bold red]error:[/] {message}", highlight=False, markup=True, soft_wrap=True)
    raise typer.Exit(code)


def open_store(url: str) -> Store:
    """A store opened to write (created or upgraded to the newest schema as needed)."""
    try:
        return Store(url)
    except StoreError as exc:
        fail(str(exc))


def open_reader(url: str) -> Store:
    """A store opened to read: never created, migrated or written; refused in one line."""
    try:
        return Store(url, read_only=True)
    except StoreError as exc:
        fail(str(exc))


_GEN = GenerationSettings()
_ENV = EnvironmentSettings()
_Opt = typer.Option


@cli.command()
def run(
    policy: Annotated[str | None, _Opt(help=f"{policy_usage()}; default: oracle.")] = None,
    dataset: Annotated[
        str | None, _Opt(help="demo, demo:train, demo:test or a questions file.")
    ] = None,
    questions: Annotated[str | None, _Opt(help="Spider/BIRD questions JSON.")] = None,
    db_dir: Annotated[str | None, _Opt(help="Folder of <db_id>/<db_id>.sqlite.")] = None,
    store: StoreOpt = DEFAULT_STORE,
    limit: Annotated[int | None, _Opt(help="First N questions only.")] = None,
    question_id: Annotated[list[str] | None, _Opt(help="Only these ids (repeatable).")] = None,
    samples: Annotated[
        int | None, _Opt(help="Episodes per question (GRPO group); default 1.")
    ] = None,
    batch_size: Annotated[
        int | None, _Opt(help=f"Episodes per policy call; default {_GEN.batch_size}.")
    ] = None,
    step_budget: Annotated[
        int | None, _Opt(help=f"Actions per episode; default {_ENV.step_budget}.")
    ] = None,
    temperature: Annotated[
        float | None, _Opt(help=f"0 for greedy; default {_GEN.temperature}.")
    ] = None,
    top_p: Annotated[float | None, _Opt(help=f"Nucleus sampling; default {_GEN.top_p}.")] = None,
    max_new_tokens: Annotated[
        int | None, _Opt(help=f"Tokens per action; default {_GEN.max_new_tokens}.")
    ] = None,
    device: Annotated[str | None, _Opt(help="auto, cpu, cuda, cuda:1 ...; default auto.")] = None,
    dtype: Annotated[str | None, _Opt(help="auto, bf16, fp16, fp32; default auto.")] = None,
    threads: Annotated[int | None, _Opt(help="CPU threads for torch while generating.")] = None,
    seed: Annotated[int | None, _Opt(help=f"Run seed; default {_GEN.seed}.")] = None,
    sample_rows: Annotated[
        int | None, _Opt(help=f"Rows SAMPLE shows; default {_ENV.sample_rows}.")
    ] = None,
    max_observation_tokens: Annotated[
        int | None,
        _Opt(help=f"Longest observation in model tokens; default {_ENV.max_observation_tokens}."),
    ] = None,
    query_timeout: Annotated[
        float | None,
        _Opt(help=f"Seconds one query may run; default {_ENV.sandbox.deadline_seconds}."),
    ] = None,
    name: Annotated[str | None, _Opt(help="Run name (unique in the store).")] = None,
    run_id: Annotated[int | None, _Opt(help="Play a queued run (the dashboard's worker).")] = None,
    resume: Annotated[
        str | None, _Opt(help="Finish an unfinished run (name or id) with its own settings.")
    ] = None,
    quiet: Annotated[bool, _Opt(help="No progress bar.")] = False,
) -> None:
    """Play a batch of episodes and record every step in the store."""
    given = {
        "--policy": policy, "--dataset": dataset, "--questions": questions, "--db-dir": db_dir,
        "--limit": limit, "--question-id": question_id, "--samples": samples,
        "--batch-size": batch_size, "--step-budget": step_budget, "--temperature": temperature,
        "--top-p": top_p, "--max-new-tokens": max_new_tokens, "--device": device,
        "--dtype": dtype, "--threads": threads, "--seed": seed, "--sample-rows": sample_rows,
        "--max-observation-tokens": max_observation_tokens, "--query-timeout": query_timeout,
        "--name": name,
    }  # fmt: skip
    if run_id is not None and resume is not None:
        fail("give --run-id or --resume, not both")
    st = open_store(store)
    try:
        if run_id is not None or resume is not None:
            extra = [flag for flag, value in given.items() if value is not None]
            if extra:
                fail(
                    f"{', '.join(extra)} cannot change a stored run: --run-id and --resume play "
                    "it with its own settings"
                )
            ref = str(run_id) if run_id is not None else str(resume)
            run_id, prepared, skip = batch.reopen_run(st, ref, resume=resume is not None)
        else:
            generation = _overlay(
                _GEN, temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens,
                seed=seed, batch_size=batch_size, device=device, dtype=dtype, threads=threads,
            )  # fmt: skip
            environment = _overlay(
                _ENV, step_budget=step_budget, sample_rows=sample_rows,
                max_observation_tokens=max_observation_tokens,
            )  # fmt: skip
            for flag, value in (("--samples", samples), ("--limit", limit)):
                if value is not None and value < 1:
                    fail(f"{flag} must be at least 1, got {value}")
            if query_timeout is not None:
                if query_timeout <= 0:
                    fail(f"--query-timeout must be more than 0 seconds, got {query_timeout}")
                sandbox = dataclasses.replace(_ENV.sandbox, deadline_seconds=query_timeout)
                environment = dataclasses.replace(environment, sandbox=sandbox)
            request = RunRequest(
                policy=policy or "oracle",
                dataset=dataset,
                questions=questions,
                db_dir=db_dir,
                name=name,
                limit=limit,
                question_ids=tuple(question_id or ()),
                samples=1 if samples is None else samples,
                generation=generation,
                environment=environment,
            )
            run_id, prepared = batch.start_run(st, request)
            skip = set()
    except USER_ERRORS as exc:
        fail(_one_line(exc))
    _play(st, run_id, prepared, skip, quiet)


T = TypeVar("T")


def _overlay(base: T, **given: object) -> T:
    """`base` with the options that were given (not None) put in; SettingsError if invalid."""
    values = {k: v for k, v in given.items() if v is not None}
    try:
        return dataclasses.replace(base, **values)  # type: ignore[type-var]
    except SettingsError as exc:  # named as the user typed it
        fail(f"--{exc.field.replace('_', '-')} {exc.problem}")


def _play(
    st: Store, run_id: int, prepared: batch.Prepared, skip: set[EpisodeKey], quiet: bool
) -> None:
    total = prepared.planned - len(skip)
    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]} ep/s  acc {task.fields[acc]}"),
        TimeElapsedColumn(),
        console=err,
        disable=quiet,
    )
    task = progress.add_task(prepared.spec.name, total=total, rate="-", acc="-")

    def on_episode(rec: EpisodeRecord, stats: RunStats) -> None:
        elapsed = max(progress.tasks[0].elapsed or 0.0, 1e-9)
        progress.update(
            task, advance=1, rate=f"{stats.episodes / elapsed:.1f}", acc=f"{stats.accuracy:.1%}"
        )

    try:
        with progress:
            stats = batch.play_run(
                st, run_id, prepared, skip=skip, on_episode=on_episode, on_note=err.print
            )
    except batch.Cancelled as exc:
        fail(str(exc), code=130)
    except batch.JobError as exc:
        cause = exc.__cause__
        if cause is not None and not isinstance(cause, USER_ERRORS):
            # Not bad input: a bug or a broken model. The run records the one-line error; the
            # terminal also gets the traceback to debug it.
            traceback.print_exception(cause, file=sys.stderr)
        fail(str(exc), code=1)
    summary = st.get_run(run_id)
    assert summary is not None
    out.print(runs_table([summary]))
    eps = stats.episodes / stats.wall_seconds if stats.wall_seconds else 0.0
    out.print(
        f"run {summary.id} {summary.name!r}: {stats.episodes} episodes in "
        f"{stats.wall_seconds:.1f} s ({eps:.1f} ep/s), accuracy {stats.accuracy:.1%}",
        highlight=False,
    )


@cli.command()
def runs(
    store: StoreOpt = DEFAULT_STORE,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    limit: int = 50,
) -> None:
    """List the runs in a store with their metrics."""
    summaries = open_reader(store).list_runs(limit=limit)
    if as_json:
        print(json.dumps([_jsonable(dataclasses.asdict(s)) for s in summaries], indent=2))
    elif not summaries:
        out.print("no runs yet: start one with `rollscope run --policy oracle --dataset demo`")
    else:
        out.print(runs_table(summaries))


@cli.command()
def show(
    episode_id: Annotated[int, typer.Argument(help="Episode id (see the dashboard or export).")],
    store: StoreOpt = DEFAULT_STORE,
) -> None:
    """Print one episode's transcript."""
    detail = open_reader(store).get_episode(episode_id)
    if detail is None:
        fail(f"no episode {episode_id} in the store")
    out.print(episode_transcript(detail))


@cli.command()
def export(
    run_refs: Annotated[
        list[str] | None, typer.Option("--run", help="Run name or id; repeat for several runs.")
    ] = None,
    all_runs: Annotated[bool, typer.Option("--all", help="Every run in the store.")] = False,
    store: StoreOpt = DEFAULT_STORE,
    fmt: Annotated[str, typer.Option("--format", help="jsonl or parquet.")] = "jsonl",
    output: Annotated[
        Path | None,
        typer.Option(help="File to write (default: RUN.FORMAT, or rollscope-export.FORMAT)."),
    ] = None,
) -> None:
    """Write runs' finished episodes with their steps to one JSONL or Parquet file.

    JSONL has one object per episode with a `steps` list; Parquet has the same columns, the
    steps a nested list of structs. Runs follow one another in the order given (--all: oldest
    first). The file appears only when complete.
    """
    from app.export import EXPORT_FORMATS, default_output, export_episodes

    if fmt not in EXPORT_FORMATS:
        fail(f"unknown format {fmt!r} (choose {' or '.join(EXPORT_FORMATS)})")
    if bool(run_refs) == all_runs:
        fail("name the runs to export: --run NAME (repeatable) or --all, not both")
    if output is not None:
        _check_output(output)
    st = open_reader(store)
    if all_runs:
        chosen = sorted(st.list_runs(limit=sys.maxsize), key=lambda r: r.id)
        if not chosen:
            fail("the store has no runs to export (list them with `rollscope runs`)")
    else:
        chosen = []
        for ref in dict.fromkeys(run_refs or []):  # a run named twice is exported once
            found = st.find_run(ref)
            if found is None:
                fail(f"no run {ref!r} in the store (list them with `rollscope runs`)")
            chosen.append(found)
    target = output or default_output([r.name for r in chosen], fmt)
    _check_output(target)
    try:
        count = export_episodes(st, [r.id for r in chosen], target, fmt)
    except OSError as exc:
        fail(f"cannot write {target}: {exc.strerror or exc}")
    runs_text = "1 run" if len(chosen) == 1 else f"{len(chosen)} runs"
    out.print(f"wrote {count} episodes of {runs_text} to {target}", highlight=False)


def _check_output(path: Path) -> None:
    """Refuse, before anything is written, an output that cannot become a file."""
    if path.is_dir():
        fail(f"--output {path} is a folder; give a file name")
    if not path.parent.is_dir():
        fail(f"the folder {path.parent} does not exist; create it or choose another --output")


@cli.command()
def dashboard(
    store: StoreOpt = DEFAULT_STORE,
    port: Annotated[int, typer.Option(help="Port to serve on.")] = 8501,
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    read_only: Annotated[bool, typer.Option(help="Hide Launch; no writes.")] = False,
    checkpoint_root: Annotated[
        list[Path] | None, typer.Option(help="Folders Launch may load checkpoints from.")
    ] = None,
) -> None:
    """Serve the Streamlit dashboard on a store."""
    from app.dashboard.serve import serve

    # A bad URL or an unreadable store fails here, in one line, not inside the page. A writable
    # dashboard creates a missing store (its Launch would); it never upgrades an existing one.
    try:
        Store(store, read_only=True).close()
    except StoreMissing as exc:
        if read_only:
            fail(str(exc))
        open_store(store).close()
    except StoreError as exc:
        fail(str(exc))
    serve(store, port=port, host=host, read_only=read_only, checkpoint_roots=checkpoint_root or [])


@cli.command()
def migrate(store: StoreOpt = DEFAULT_STORE) -> None:
    """Upgrade a store to the schema this rollscope needs (a new store is created)."""
    upgrade = open_store(store).schema_upgrade
    assert upgrade is not None  # a writer always reports what it did
    if upgrade.before == upgrade.after:
        out.print(
            f"store {store}: already at schema {upgrade.after}", highlight=False, soft_wrap=True
        )
    else:
        before = upgrade.before or "none (new store)"
        out.print(
            f"store {store}: schema {before} -> {upgrade.after}", highlight=False, soft_wrap=True
        )


@cli.command()
def demo(
    store: StoreOpt = DEFAULT_STORE,
    work_dir: Annotated[Path, typer.Option("--dir", help="Checkpoints go here.")] = Path("demo"),
    steps: Annotated[int, typer.Option(help="Training steps of the tiny model.")] = 500,
    samples: Annotated[int, typer.Option(help="Samples per held-out question.")] = 4,
    threads: Annotated[int | None, typer.Option(help="CPU threads for torch.")] = None,
    grpo_steps: Annotated[
        int, typer.Option(help="GRPO steps of the training run (TRL); 0 for none.")
    ] = GrpoSettings().steps,
    serve_after: Annotated[bool, typer.Option("--serve", help="Open the dashboard after.")] = False,
    port: int = 8501,
) -> None:
    """Train tiny demo checkpoints offline and fill the store with their rollouts."""
    from app.demo.pipeline import DEFAULT_SAVE_AT, DemoSettings, build_demo

    if steps < max(DEFAULT_SAVE_AT[:-1]) + 1:
        fail(f"--steps must be more than {max(DEFAULT_SAVE_AT[:-1])}, got {steps}")
    if grpo_steps < 0:
        fail(f"--grpo-steps must be 0 (no training run) or more, got {grpo_steps}")
    save_at = (*DEFAULT_SAVE_AT[:-1], steps)
    settings = DemoSettings(
        work_dir=work_dir,
        steps=steps,
        save_at=save_at,
        samples=samples,
        threads=threads,
        grpo=GrpoSettings(steps=grpo_steps) if grpo_steps else None,
    )
    st = open_store(store)
    try:
        report = build_demo(st, settings, log=lambda line: err.print(line, highlight=False))
    except batch.Cancelled as exc:
        fail(str(exc), code=130)
    except USER_ERRORS as exc:
        fail(_one_line(exc))
    out.print(runs_table(st.list_runs()))
    out.print(f"demo ready in {report.seconds['total']:.0f} s: store {store}", highlight=False)
    if serve_after:
        from app.dashboard.serve import serve

        out.print(f"dashboard: http://127.0.0.1:{port}", highlight=False)
        st.close()
        serve(store, port=port, checkpoint_roots=[work_dir.resolve()])


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().strip("'\"") or type(exc).__name__
    return text.splitlines()[0]


def main() -> None:
    """Console entry point."""
    try:
        code = cli(standalone_mode=False)
    except (KeyboardInterrupt, typer.Abort):
        err.print("interrupted")
        sys.exit(130)
    except Exception as exc:
        # Click's usage errors (unknown flag, wrong type): one line like every other error,
        # not a five-line box. typer vendors click, so match its exceptions by their shape.
        exit_code = getattr(exc, "exit_code", None)
        if not hasattr(exc, "format_message") or not isinstance(exit_code, int):
            raise
        if type(exc).__name__ == "NoArgsIsHelpError":
            out.print(exc.format_message(), highlight=False, markup=False)
            sys.exit(exit_code)
        ctx = getattr(exc, "ctx", None)
        hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
        message = " ".join(exc.format_message().split())
        err.print(f"[bold red]error:[/] {message}{hint}", highlight=False, soft_wrap=True)
        sys.exit(exit_code)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
