"""The `rollscope` command line: parse, build a spec, call one function, print, exit.

Exit codes: 0 done, 1 the run failed, 2 bad input, 130 stopped (Ctrl-C, SIGTERM, cancel).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from app import batch
from app.render import episode_transcript, runs_table
from rollout_core.datasets import DatasetError
from rollout_core.policies.base import PolicyError
from rollout_core.records import EpisodeRecord, RunSpec
from rollout_core.runner import RunStats
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
USER_ERRORS = (DatasetError, PolicyError, StoreError, batch.JobError, ValueError, KeyError)


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


@cli.command()
def run(
    policy: Annotated[str, typer.Option(help="oracle, random, or hf:CHECKPOINT_DIR.")] = "oracle",
    dataset: Annotated[str | None, typer.Option(help="`demo` or a questions file.")] = None,
    questions: Annotated[str | None, typer.Option(help="Spider/BIRD questions JSON.")] = None,
    db_dir: Annotated[str | None, typer.Option(help="Folder of <db_id>/<db_id>.sqlite.")] = None,
    store: StoreOpt = DEFAULT_STORE,
    limit: Annotated[int | None, typer.Option(help="First N questions only.")] = None,
    question_id: Annotated[list[str] | None, typer.Option(help="Only these ids.")] = None,
    samples: Annotated[int, typer.Option(help="Episodes per question (GRPO group).")] = 1,
    batch_size: Annotated[int, typer.Option(help="Episodes per policy call.")] = 16,
    step_budget: Annotated[int, typer.Option(help="Actions per episode.")] = 10,
    temperature: Annotated[float, typer.Option(help="0 for greedy.")] = 0.0,
    top_p: float = 1.0,
    max_new_tokens: Annotated[int, typer.Option(help="Tokens per action.")] = 64,
    device: Annotated[str, typer.Option(help="auto, cpu, cuda, cuda:1 ...")] = "auto",
    dtype: Annotated[str, typer.Option(help="auto, bf16, fp16, fp32.")] = "auto",
    threads: Annotated[int | None, typer.Option(help="CPU threads for torch.")] = None,
    seed: int = 0,
    name: Annotated[str | None, typer.Option(help="Run name (unique in the store).")] = None,
    run_id: Annotated[int | None, typer.Option(help="Play a queued run.")] = None,
    resume: Annotated[str | None, typer.Option(help="Finish an unfinished run.")] = None,
    quiet: Annotated[bool, typer.Option(help="No progress bar.")] = False,
) -> None:
    """Play a batch of episodes and record every step in the store."""
    st = open_store(store)
    try:
        if run_id is not None or resume is not None:
            run_id, prepared, skip = _reopen(st, run_id, resume)
        else:
            ds = batch.resolve_dataset(dataset, questions, db_dir)
            is_hf = policy.startswith("hf:")
            spec = RunSpec(
                name=name or batch.default_run_name(policy, dataset or questions or "demo"),
                policy=policy,
                dataset=ds.name,
                questions_path=str(ds.questions_path),
                db_dir=str(ds.db_dir),
                generation={
                    "max_new_tokens": max_new_tokens,
                    "temperature": temperature,
                    "top_p": top_p,
                    "seed": seed,
                    "device": device,
                    "dtype": dtype,
                    "threads": threads,
                }
                if is_hf
                else {},
                environment={"step_budget": step_budget},
                samples=samples,
                batch_size=batch_size,
                limit=limit,
                seed=seed,
                question_ids=tuple(question_id) if question_id else None,
            )
            prepared = batch.prepare(spec, ds)
            run_id = st.create_run(prepared.spec, episodes_planned=prepared.planned)
            skip = set()
    except USER_ERRORS as exc:
        fail(_one_line(exc))
    _play(st, run_id, prepared, skip, quiet)


def _reopen(
    st: Store, run_id: int | None, resume: str | None
) -> tuple[int, batch.Prepared, set[tuple[str, int]]]:
    """A queued run (`--run-id`) or an unfinished one (`--resume`), ready to play."""
    ref = str(run_id) if run_id is not None else str(resume)
    found = st.find_run(ref)
    if found is None:
        raise batch.JobError(f"no run {ref!r} in the store (list them with `rollscope runs`)")
    if resume is None and found.status != "queued":
        raise batch.JobError(f"run {found.id} is {found.status}, not queued; use --resume")
    if resume is not None and found.status == "completed":
        raise batch.JobError(f"run {found.name!r} is already completed")
    if resume is not None and batch.run_is_live(found):
        raise batch.JobError(
            f"run {found.name!r} is still running (pid {found.pid} on {found.host}); stop it "
            "first, or resume it once its heartbeat is stale and it reads interrupted"
        )
    spec = _spec_from_dict(found.spec)
    ds = batch.dataset_for_spec(spec)
    prepared = batch.prepare(spec, ds)
    skip: set[tuple[str, int]] = set()
    if resume is not None:
        st.delete_unfinished_episodes(found.id)  # replayed from the start, same seeds
        skip = st.finished_keys(found.id)
    st.set_run_status(found.id, "running")  # records this worker's host and pid
    return found.id, prepared, skip


def _spec_from_dict(data: dict[str, Any]) -> RunSpec:
    fields = {f.name for f in dataclasses.fields(RunSpec)}
    values = {k: v for k, v in data.items() if k in fields}
    if values.get("question_ids") is not None:
        values["question_ids"] = tuple(values["question_ids"])
    return RunSpec(**values)


def _play(
    st: Store, run_id: int, prepared: batch.Prepared, skip: set[tuple[str, int]], quiet: bool
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
    run_ref: Annotated[str, typer.Option("--run", help="Run name or id.")],
    store: StoreOpt = DEFAULT_STORE,
    fmt: Annotated[str, typer.Option("--format", help="jsonl or parquet.")] = "jsonl",
    output: Annotated[
        Path | None, typer.Option(help="File to write (default: RUN.FORMAT).")
    ] = None,
) -> None:
    """Write a run's episodes with their steps to JSONL or Parquet."""
    from app.export import export_run

    st = open_reader(store)
    found = st.find_run(run_ref)
    if found is None:
        fail(f"no run {run_ref!r} in the store (list them with `rollscope runs`)")
    if fmt not in ("jsonl", "parquet"):
        fail(f"unknown format {fmt!r} (choose jsonl or parquet)")
    target = output or Path(f"{found.name}.{fmt}")
    count = export_run(st, found.id, target, fmt)
    out.print(f"wrote {count} episodes to {target}")


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
    serve_after: Annotated[bool, typer.Option("--serve", help="Open the dashboard after.")] = False,
    port: int = 8501,
) -> None:
    """Train tiny demo checkpoints offline and fill the store with their rollouts."""
    from app.demo.pipeline import DEFAULT_SAVE_AT, DemoSettings, build_demo

    if steps < max(DEFAULT_SAVE_AT[:-1]) + 1:
        fail(f"--steps must be more than {max(DEFAULT_SAVE_AT[:-1])}, got {steps}")
    save_at = (*DEFAULT_SAVE_AT[:-1], steps)
    settings = DemoSettings(
        work_dir=work_dir, steps=steps, save_at=save_at, samples=samples, threads=threads
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
