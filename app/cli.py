"""The `rollscope` command line: parse, build a spec, call one function, print, exit.

Exit codes: 0 done, 1 the run failed, 2 bad input, 130 stopped (Ctrl-C, SIGTERM, cancel).
"""

from __future__ import annotations

import dataclasses
import getpass
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
from app.fanout.target import RayTarget
from app.render import episode_transcript, runs_table
from rollout_core.errors import RollscopeError
from rollout_core.policies.registry import usage as policy_usage
from rollout_core.records import EpisodeKey, EpisodeRecord
from rollout_core.runner import RunStats
from rollout_core.settings import (
    DEFAULT_CONCURRENCY,
    DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_RETRY_SECONDS,
    EndpointSettings,
    EnvironmentSettings,
    GenerationSettings,
    SettingsError,
)
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
    model: Annotated[str | None, _Opt(help="openai: the model name the server serves.")] = None,
    api_key_env: Annotated[
        str | None, _Opt(help="openai: name of the environment variable holding the API key.")
    ] = None,
    concurrency: Annotated[
        int | None,
        _Opt(help=f"openai: requests in flight; default {DEFAULT_CONCURRENCY} (sets the batch)."),
    ] = None,
    request_timeout: Annotated[
        float | None,
        _Opt(help=f"openai: seconds a reply may take; default {DEFAULT_REQUEST_TIMEOUT:g}."),
    ] = None,
    retry_deadline: Annotated[
        float | None,
        _Opt(help=f"openai: seconds to retry a request; default {DEFAULT_RETRY_SECONDS:g}."),
    ] = None,
    run_id: Annotated[int | None, _Opt(help="Play a queued run (the dashboard's worker).")] = None,
    resume: Annotated[
        str | None, _Opt(help="Finish an unfinished run (name or id) with its own settings.")
    ] = None,
    quiet: Annotated[bool, _Opt(help="No progress bar.")] = False,
    ray_address: Annotated[
        str | None,
        _Opt("--ray", help="Fan out over Ray: local (a cluster on this machine) or an address."),
    ] = None,
    workers: Annotated[int | None, _Opt(help="Ray workers, each with its own policy.")] = None,
    gpus_per_worker: Annotated[
        float | None, _Opt(help="GPUs each Ray worker holds (0.5 shares one); default 0.")
    ] = None,
) -> None:
    """Play a batch of episodes and record every step in the store."""
    given = {
        "--policy": policy, "--dataset": dataset, "--questions": questions, "--db-dir": db_dir,
        "--limit": limit, "--question-id": question_id, "--samples": samples,
        "--batch-size": batch_size, "--step-budget": step_budget, "--temperature": temperature,
        "--top-p": top_p, "--max-new-tokens": max_new_tokens, "--device": device,
        "--dtype": dtype, "--threads": threads, "--seed": seed, "--sample-rows": sample_rows,
        "--max-observation-tokens": max_observation_tokens, "--query-timeout": query_timeout,
        "--name": name, "--model": model, "--api-key-env": api_key_env,
        "--concurrency": concurrency, "--request-timeout": request_timeout,
        "--retry-deadline": retry_deadline,
    }  # fmt: skip
    if run_id is not None and resume is not None:
        fail("give --run-id or --resume, not both")
    target = _ray_target(ray_address, workers, gpus_per_worker)
    st = open_store(store)
    fanout = None if target is None else _ray_fanout(target, st)
    try:
        if run_id is not None or resume is not None:
            extra = [flag for flag, value in given.items() if value is not None]
            if extra:
                fail(
                    f"{', '.join(extra)} cannot change a stored run: --run-id and --resume play "
                    "it with its own settings"
                )
            ref = str(run_id) if run_id is not None else str(resume)
            run_id, prepared, skip = batch.reopen_run(
                st, ref, resume=resume is not None, fanout=fanout
            )
        else:
            endpoint = _endpoint(model, api_key_env, concurrency, request_timeout, retry_deadline)
            if endpoint is not None and batch_size is None:
                batch_size = endpoint.concurrency  # the runner sends one iteration at once
            generation = _overlay(
                _GEN, temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens,
                seed=seed, batch_size=batch_size, device=device, dtype=dtype, threads=threads,
                endpoint=endpoint,
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
            run_id, prepared = batch.start_run(st, request, fanout=fanout)
            skip = set()
    except USER_ERRORS as exc:
        fail(_one_line(exc))
    _play(st, run_id, prepared, skip, quiet)


def _ray_target(
    address: str | None, workers: int | None, gpus_per_worker: float | None
) -> RayTarget | None:
    """Where --ray asks the run to be played; None for this process. Ray placement is not a
    run setting, so it goes with --run-id and --resume too."""
    if address is None:
        if workers is not None or gpus_per_worker is not None:
            fail("--workers and --gpus-per-worker need --ray local or --ray ADDRESS")
        return None
    if workers is None:
        fail("--ray needs --workers N: how many Ray workers play the run")
    try:
        return RayTarget(address, workers, gpus_per_worker or 0.0)
    except USER_ERRORS as exc:
        fail(_one_line(exc))


def _ray_fanout(target: RayTarget, st: Store) -> batch.Fanout:
    from app.fanout.cluster import RayFanout  # imports Ray itself only when it starts

    return RayFanout(target, st, on_note=lambda text: err.print(text, highlight=False))


T = TypeVar("T")


def _overlay(base: T, **given: object) -> T:
    """`base` with the options that were given (not None) put in; SettingsError if invalid."""
    values = {k: v for k, v in given.items() if v is not None}
    try:
        return dataclasses.replace(base, **values)  # type: ignore[type-var]
    except SettingsError as exc:  # named as the user typed it
        fail(f"--{exc.field.replace('_', '-')} {exc.problem}")


def _endpoint(
    model: str | None,
    api_key_env: str | None,
    concurrency: int | None,
    timeout: float | None,
    retry: float | None,
) -> EndpointSettings | None:
    """The server settings of an openai policy, from its flags (None when none was given)."""
    flags = {
        "model": ("--model", model), "api_key_env": ("--api-key-env", api_key_env),
        "concurrency": ("--concurrency", concurrency),
        "timeout_seconds": ("--request-timeout", timeout),
        "retry_seconds": ("--retry-deadline", retry),
    }  # fmt: skip
    if model is None:
        extra = [flag for flag, value in flags.values() if value is not None]
        if extra:
            fail(f"{', '.join(extra)} need --model NAME (the openai policy's model)")
        return None
    given = {field: value for field, (_, value) in flags.items() if value is not None}
    try:
        return EndpointSettings(**given)  # type: ignore[arg-type]
    except SettingsError as exc:  # named as the user typed it
        fail(f"{flags[exc.field][0]} {exc.problem}")


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
def fork(
    episode_id: Annotated[
        int | None, typer.Argument(help="Episode to continue (with --step).", show_default=False)
    ] = None,
    step: Annotated[
        int | None, _Opt(help="First step the new policy plays; the ones before are replayed.")
    ] = None,
    run_ref: Annotated[
        str | None, _Opt("--run", help="Fork every failed episode of this run (with --at).")
    ] = None,
    at: Annotated[str | None, _Opt(help="first-error: each at its first failing step.")] = None,
    policy: Annotated[
        str | None, _Opt(help=f"{policy_usage()}; default: the source run's.")
    ] = None,
    samples: Annotated[int, _Opt(help="Continuations of each episode (distinct seeds).")] = 1,
    temperature: Annotated[float | None, _Opt(help="Default: the source run's.")] = None,
    top_p: Annotated[float | None, _Opt(help="Default: the source run's.")] = None,
    max_new_tokens: Annotated[int | None, _Opt(help="Default: the source run's.")] = None,
    seed: Annotated[int | None, _Opt(help="Default: the source run's (same noise).")] = None,
    batch_size: Annotated[int | None, _Opt(help="Default: the source run's.")] = None,
    device: Annotated[str | None, _Opt(help="auto, cpu, cuda ...; default: the source's.")] = None,
    dtype: Annotated[str | None, _Opt(help="auto, bf16, fp16, fp32; default: the source.")] = None,
    threads: Annotated[int | None, _Opt(help="CPU threads for torch while generating.")] = None,
    name: Annotated[str | None, _Opt(help="Run name (unique in the store).")] = None,
    store: StoreOpt = DEFAULT_STORE,
    quiet: Annotated[bool, _Opt(help="No progress bar.")] = False,
) -> None:
    """Continue recorded episodes with another policy, checkpoint or temperature.

    The new run replays each episode's steps before the fork step (the environment executes the
    recorded actions again and must answer as recorded), then its own policy plays on.
    """
    from app.forks import ForkRequest, plan_episode_fork, plan_failure_forks

    if (episode_id is None) == (run_ref is None):
        fail(
            "name what to fork: an EPISODE with --step K, or --run RUN --at first-error"
            if episode_id is None
            else "give an EPISODE or --run, not both"
        )
    if episode_id is not None and (step is None or at is not None):
        fail(
            "an EPISODE forks at --step K (the first step the new policy plays), not --at"
            if at is not None
            else "--step K is needed: the first step the new policy plays (1 replays nothing)"
        )
    if run_ref is not None and (at != "first-error" or step is not None):
        fail(
            "--run forks at --at first-error; --step is for one EPISODE"
            if step is not None
            else f"--run needs --at first-error (got {at!r})"
            if at
            else "--run needs --at first-error"
        )
    if samples < 1:
        fail(f"--samples must be at least 1, got {samples}")
    changed = {
        "temperature": temperature, "top_p": top_p, "max_new_tokens": max_new_tokens,
        "seed": seed, "batch_size": batch_size, "device": device, "dtype": dtype,
        "threads": threads,
    }  # fmt: skip
    _overlay(_GEN, **changed)  # each flag checked on its own, named as typed
    request = ForkRequest(
        policy=policy,
        generation={k: v for k, v in changed.items() if v is not None},
        samples=samples,
        name=name,
    )
    st = open_store(store)
    try:
        if episode_id is not None:
            assert step is not None
            plan = plan_episode_fork(st, episode_id, step, request)
        else:
            assert run_ref is not None
            found = plan_failure_forks(st, run_ref, request)
            plan = found.plan
            skipped = f"; {found.skipped} without steps left out" if found.skipped else ""
            err.print(
                f"forking {len(plan.spec.fork.points) if plan.spec.fork else 0} of "
                f"{found.failed} failed episodes of run {run_ref!r}{skipped}",
                highlight=False,
            )
        batch.plan_tasks(st, plan, set())  # a source gone or a changed question: refused now
        prepared = batch.prepare(plan)
        run_id = st.create_run(
            prepared.spec, episodes_planned=prepared.planned, policy_info=prepared.info
        )
    except SettingsError as exc:
        fail(f"--{exc.field.replace('_', '-')} {exc.problem}")
    except USER_ERRORS as exc:
        fail(_one_line(exc))
    _play(st, run_id, prepared, set(), quiet)


@cli.command()
def tag(
    episode_id: Annotated[int, typer.Argument(help="Episode to label.", show_default=False)],
    tag_name: Annotated[str, typer.Argument(metavar="TAG", help="A short label, e.g. wrong-join.")],
    note: Annotated[str | None, _Opt(help="Free text kept with the tag.")] = None,
    step: Annotated[int | None, _Opt(help="Label this step rather than the episode.")] = None,
    remove: Annotated[bool, _Opt("--remove", help="Take the tag off instead.")] = False,
    author: Annotated[
        str | None, _Opt(help="Who labels it; default: $USER.", show_default=False)
    ] = None,
    store: StoreOpt = DEFAULT_STORE,
) -> None:
    """Tag an episode (or one of its steps) with a label and a note; --remove takes it off.

    Tagging again with the same tag replaces the note. List tags with `rollscope tags`.
    """
    from storage.tagging import clean_tag

    if remove and note is not None:
        fail("--remove takes a tag off; it has no --note")
    st = open_store(store)
    where = f"episode {episode_id}" + ("" if step is None else f" step {step}")
    try:
        if remove:
            if not st.remove_annotation(episode_id, clean_tag(tag_name), step=step):
                fail(f"{where} has no tag {tag_name.strip()!r} (see `rollscope tags --run RUN`)")
            out.print(f"{where}: removed {tag_name.strip()!r}", highlight=False)
            return
        made = st.annotate(episode_id, tag_name, note=note, step=step, author=author or _login())
    except USER_ERRORS as exc:
        fail(_one_line(exc))
    out.print(f"{where}: tagged {made.tag!r}", highlight=False)


@cli.command()
def tags(
    run_refs: Annotated[
        list[str] | None, _Opt("--run", help="Run name or id; repeatable (default: all runs).")
    ] = None,
    tag_name: Annotated[
        str | None, _Opt("--tag", help="List the episodes carrying this tag, with their notes.")
    ] = None,
    limit: Annotated[int, _Opt(help="Episodes listed with --tag at most.")] = 100,
    as_json: Annotated[bool, _Opt("--json", help="Machine-readable output.")] = False,
    store: StoreOpt = DEFAULT_STORE,
) -> None:
    """Tags in use and how many episodes carry each; --tag lists those episodes."""
    from app.render import annotated_table, tag_table
    from storage.read_models import EpisodeFilter

    st = open_reader(store)
    run_ids = []
    for ref in dict.fromkeys(run_refs or []):
        found = st.find_run(ref)
        if found is None:
            fail(f"no run {ref!r} in the store (list them with `rollscope runs`)")
        run_ids.append(found.id)
    if tag_name is None:
        counts = st.annotation_tags(run_ids)
        if as_json:
            print(json.dumps([dataclasses.asdict(c) for c in counts], indent=2))
        elif not counts:
            out.print("no tags yet: add one with `rollscope tag EPISODE TAG --note ...`")
        else:
            out.print(tag_table(counts))
        return
    flt = EpisodeFilter(run_ids=tuple(run_ids), tags=(tag_name.strip(),), finished_only=False)
    page = st.list_episodes(flt, limit=max(1, limit))
    details = st.get_episodes([e.id for e in page.items])
    if as_json:
        rows = [
            {"episode_id": d.summary.id, "run_name": d.summary.run_name}
            | {"question_id": d.summary.question_id, "outcome": d.summary.outcome}
            | {"annotations": [dataclasses.asdict(a) for a in d.annotations]}
            for d in details
        ]
        print(json.dumps(_jsonable(rows), indent=2))
    elif not details:
        out.print(f"no episode carries the tag {tag_name.strip()!r}", highlight=False)
    else:
        out.print(annotated_table(details, tag_name.strip()))
        if page.next_cursor is not None:
            out.print(f"(first {len(details)} shown; --limit for more)", highlight=False)


def _login() -> str | None:
    """Who runs this command, for an annotation's author."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no $USER and no passwd entry (some containers)
        return None


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
    host: Annotated[
        str, typer.Option(help="Address to bind; not loopback: read-only unless --allow-writes.")
    ] = "127.0.0.1",
    read_only: Annotated[bool, typer.Option(help="Hide Launch; no writes.")] = False,
    allow_writes: Annotated[
        bool,
        typer.Option(
            envvar="ROLLSCOPE_ALLOW_WRITES",
            help="Keep Launch and Cancel on a non-loopback --host (put it behind authentication).",
        ),
    ] = False,
    checkpoint_root: Annotated[
        list[Path] | None, typer.Option(help="Folders Launch may load checkpoints from.")
    ] = None,
    ray_address: Annotated[
        str | None,
        typer.Option(help="Offer Launch on this Ray cluster (auto, HOST:6379, or local)."),
    ] = None,
    dataset_root: Annotated[
        list[Path] | None,
        typer.Option(help="Folders Launch may read questions files from (demo always works)."),
    ] = None,
) -> None:
    """Serve the Streamlit dashboard on a store.

    Bound to a non-loopback address, it is read-only (no Launch, no Cancel) unless
    --allow-writes is given; the first line it prints says which.
    """
    from app.dashboard.serve import serve
    from app.dashboard.settings import serve_mode

    try:
        serve_mode(host, read_only=read_only, allow_writes=allow_writes)
    except ValueError as exc:
        fail(str(exc))

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
    serve(
        store,
        port=port,
        host=host,
        read_only=read_only,
        allow_writes=allow_writes,
        checkpoint_roots=checkpoint_root or [],
        ray_address=ray_address,
        dataset_roots=dataset_root or [],
    )


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
