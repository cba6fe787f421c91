"""`rollscope env-server`: the SQL environment as an OpenEnv server recording every session."""

from __future__ import annotations

from typing import Annotated

import typer

from app.cli.listen import bind
from app.cli.output import USER_ERRORS, err, fail, one_line
from app.cli.stores import DEFAULT_STORE, StoreOpt, open_store
from app.plural import counted
from app.store_url import shown_url

MAX_SESSIONS = 64
MAX_WORKERS = 64


def env_server(
    name: Annotated[str, typer.Option(help="The run every session is recorded in.")],
    dataset: Annotated[
        str | None, typer.Option(help="demo, demo:train, demo:test or a questions file.")
    ] = None,
    questions: Annotated[str | None, typer.Option(help="Spider/BIRD questions JSON.")] = None,
    db_dir: Annotated[str | None, typer.Option(help="Folder of <db_id>/<db_id>.sqlite.")] = None,
    store: StoreOpt = DEFAULT_STORE,
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to serve on (0: any free one).")] = 8000,
    step_budget: Annotated[int | None, typer.Option(help="Actions per episode.")] = None,
    max_sessions: Annotated[
        int, typer.Option(help="Sessions (clients) served at once, by each worker.")
    ] = MAX_SESSIONS,
    workers: Annotated[int, typer.Option(help="Processes serving the run (one core each).")] = 1,
    allow_remote: Annotated[
        bool, typer.Option(help="Allow a --host other than loopback (needs --token).")
    ] = False,
    token: Annotated[
        str | None,
        typer.Option(
            envvar="ROLLSCOPE_ENV_TOKEN",
            help="Clients must send `Authorization: Bearer TOKEN`.",
        ),
    ] = None,
    evaluation_of: Annotated[
        str | None,
        typer.Option(
            help="The training run whose evaluation rollouts this server records (ServerTools' "
            "eval_url); the Training pages of the two open each other."
        ),
    ] = None,
) -> None:
    """Serve the SQL environment over OpenEnv's WebSocket protocol; every session's episodes
    are recorded, step by step, in the run --name (an env run of that name that was
    interrupted goes on). Stop it with Ctrl-C: episodes still in play end `abandoned`."""
    from app.dashboard.settings import is_loopback
    from rollout_core.errors import RollscopeError
    from rollout_core.records import RunSpec
    from rollout_core.settings import EnvironmentSettings, SettingsError
    from rollout_core.specs import checked_run_name, resolve_dataset

    if not name.strip():
        fail("give the run a name: --name RUN")
    if evaluation_of is not None:
        try:
            evaluation_of = checked_run_name(evaluation_of)
        except RollscopeError as exc:
            fail(f"--evaluation-of: {exc}")
    if max_sessions < 1:
        fail(f"--max-sessions must be at least 1, got {max_sessions}")
    if not 1 <= workers <= MAX_WORKERS:
        fail(f"--workers must be between 1 and {MAX_WORKERS}, got {workers}")
    if not is_loopback(host) and not allow_remote:
        bind(host, port).close()  # a host that cannot be listened on is named as such first
        fail(
            f"--host {host} is reachable from other machines: pass --allow-remote with a "
            "--token clients must send, or bind 127.0.0.1"
        )
    if allow_remote and not token:
        fail("--allow-remote needs a --token (or ROLLSCOPE_ENV_TOKEN) that clients must send")
    if token and not (token.isascii() and token.isprintable() and " " not in token):
        # It travels in an HTTP header, and the server compares it as bytes.
        fail("--token must be ASCII letters, digits and punctuation, without spaces")
    try:
        environment = EnvironmentSettings()
        if step_budget is not None:
            environment = EnvironmentSettings(step_budget=step_budget)
        data = resolve_dataset(dataset, questions, db_dir)
    except (*USER_ERRORS, SettingsError) as exc:  # a dataset path the system refuses, too
        fail(one_line(exc))
    spec = RunSpec(
        name=name.strip(),
        policy="env-server",
        dataset=data.name,
        questions_path=str(data.questions_path),
        db_dir=str(data.db_dir),
        environment=environment,
        kind="env",
        evaluation_of=evaluation_of,
    )
    listener = bind(host, port)
    listener.set_inheritable(True)  # the workers serve on it
    opened = open_store(store)
    from app.batch import JobError
    from app.env_server.served import open_run
    from app.env_server.serving import serve_in_workers, serve_sessions

    try:
        run = open_run(opened, spec, data)
    except RollscopeError as exc:
        listener.close()
        fail(str(exc))
    bound = listener.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    left = run.abandoned_at_start
    by = f" by each of {workers} workers" if workers > 1 else ""
    abandoned = f"; {counted(left, 'unfinished episode')} marked abandoned" if left else ""

    def ready() -> None:
        err.print(
            f"serving run {spec.name!r} (dataset {data.name}, store {shown_url(store)}) at "
            f"http://{shown}:{bound} "
            f"(WebSocket ws://{shown}:{bound}/ws), {counted(max_sessions, 'session')} "
            f"at most{by}{abandoned}",
            soft_wrap=True,
        )

    try:
        if workers == 1:
            serve_sessions(
                run.served(), listener, max_sessions=max_sessions, token=token, ready=ready
            )
        else:
            serve_in_workers(
                run, listener, workers, max_sessions=max_sessions, token=token, ready=ready
            )
    except JobError as exc:
        fail(str(exc))
    run.complete()
    stored = opened.get_run(run.run_id)
    count = stored.episodes_finished if stored is not None else 0
    err.print(f"stopped: run {spec.name!r} is completed with {counted(count, 'episode')}")
