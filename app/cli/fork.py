"""`rollscope fork`: continue recorded episodes with another policy or settings."""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable
from typing import Annotated, Any

import typer

from app.cli.episode_ids import episode_id as parse_episode_id
from app.cli.options import flag
from app.cli.output import USER_ERRORS, err, fail, one_line
from app.cli.run_options import RunOptions
from app.cli.stores import DEFAULT_STORE, StoreOpt, open_store
from rollout_core.policies.registry import usage as policy_usage

_Opt = typer.Option

SERVER_FLAGS = ("model", "api_key_env", "concurrency", "timeout_seconds", "retry_seconds")
"""`run`'s openai server options (`RunOptions` fields, named as `EndpointSettings` names them),
which `fork` takes too."""


def with_server_flags(body: Callable[..., None]) -> Callable[..., None]:
    """`body`, whose `**server` receives `SERVER_FLAGS`, as a typer command taking them as
    `run` declares them: their flags, types, defaults and help live in `RunOptions` only."""
    hints = typing.get_type_hints(RunOptions, include_extras=True)
    defaults = {f.name: f.default for f in dataclasses.fields(RunOptions)}
    own = inspect.signature(body, eval_str=True)
    params = [p for p in own.parameters.values() if p.kind is not p.VAR_KEYWORD]
    params += [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=defaults[name],
                          annotation=hints[name])
        for name in SERVER_FLAGS
    ]  # fmt: skip
    # typer reads the parameters from the signature and their types from the annotations.
    body.__signature__ = own.replace(parameters=params)  # type: ignore[attr-defined]
    body.__annotations__ = {p.name: p.annotation for p in params}
    return body


@with_server_flags
def fork(
    episode_id: Annotated[
        int | None,
        typer.Argument(
            parser=parse_episode_id,
            metavar="EPISODE",
            help="Episode to continue (with --step).",
            show_default=False,
        ),
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
    **server: Any,
) -> None:
    """Continue recorded episodes with another policy, checkpoint or temperature.

    The new run replays each episode's steps before the fork step (the environment executes the
    recorded actions again and must answer as recorded), then its own policy plays on. An
    openai policy takes run's server options; on the source's own server, the source's
    settings (its --model too) are kept unless given.
    """
    from app import batch
    from app.cli.play import play
    from app.forks import ForkRequest, plan_episode_fork, plan_failure_forks
    from rollout_core.settings import SettingsError
    from rollout_core.specs import SettingsRequest

    _check_fork_point(episode_id, step, run_ref, at)
    if samples < 1:
        fail(f"--samples must be at least 1, got {samples}")
    asked = SettingsRequest(
        temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens, seed=seed,
        batch_size=batch_size, device=device, dtype=dtype, threads=threads,
    )  # fmt: skip
    try:
        asked.build()  # each flag checked on its own, named as typed
    except SettingsError as exc:
        fail(f"{flag(RunOptions, exc.field)} {exc.problem}")
    changed = {f.name: getattr(asked, f.name) for f in dataclasses.fields(asked)}
    request = ForkRequest(
        policy=policy,
        generation={k: v for k, v in changed.items() if v is not None},
        samples=samples,
        name=name,
        endpoint={k: v for k, v in server.items() if v is not None},
    )
    st = open_store(store, existing="a fork continues episodes recorded there")
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
            )
        batch.plan_tasks(st, plan, set())  # a source gone or a changed question: refused now
        prepared = batch.prepare(plan)
        run_id, prepared = batch.record_run(st, prepared, name_given=name is not None)
    except SettingsError as exc:
        fail(f"{flag(RunOptions, exc.field)} {exc.problem}")
    except USER_ERRORS as exc:
        fail(one_line(exc))
    play(st, store, run_id, prepared, set(), quiet)


def _check_fork_point(
    episode_id: int | None, step: int | None, run_ref: str | None, at: str | None
) -> None:
    """An EPISODE with --step, or --run with --at first-error: refused in one line otherwise."""
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
