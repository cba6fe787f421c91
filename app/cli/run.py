"""`rollscope run`: play a new batch of episodes, a queued run or an unfinished one."""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.cli.options import command_from, flag
from app.cli.output import USER_ERRORS, err, fail, one_line
from app.cli.run_options import RunOptions
from app.cli.stores import open_store, refuse_uncreatable, store_exists

if TYPE_CHECKING:
    from app.fanout.cluster import RayFanout
    from app.fanout.target import RayTarget
    from rollout_core.records import EpisodeKey


def run(opts: RunOptions) -> None:
    """Play a batch of episodes and record every step in the store."""
    from app import batch
    from app.cli.play import play
    from app.fanout.target import ray_target
    from rollout_core.settings import SettingsError
    from rollout_core.specs import build_spec

    # Everything a user can get wrong is refused before the store is opened.
    try:
        target = ray_target(opts.ray_address, opts.workers, opts.gpus_per_worker)
        stored = opts.stored_run()
        plan = None if stored is not None else build_spec(opts.request())
    except SettingsError as exc:
        fail(f"{flag(RunOptions, exc.field)} {exc.problem}")
    except USER_ERRORS as exc:
        fail(one_line(exc))
    fanout = None if target is None else _ray_fanout(target, opts.store)
    built = None
    # The policy first where the store is new: one that cannot be built (a server that does
    # not answer) leaves no empty store behind. Ray workers that write to the store themselves
    # (PostgreSQL) open it as they start, so there it is made first.
    if plan is not None and not store_exists(opts.store):
        refuse_uncreatable(opts.store)
        if fanout is None or not fanout.workers_write:
            try:
                built = batch.prepare(plan, fanout)
            except USER_ERRORS as exc:
                fail(one_line(exc))
    recorded = "--run-id and --resume play a run recorded there"
    st = open_store(opts.store, existing=None if stored is None else recorded)
    try:
        if plan is not None:
            prepared = built if built is not None else batch.prepare(plan, fanout)
            named = opts.name is not None
            run_id, prepared = batch.record_run(st, prepared, name_given=named)
            skip: set[EpisodeKey] = set()
        else:
            assert stored is not None
            resume = opts.resume is not None
            run_id, prepared, skip = batch.reopen_run(st, stored, resume=resume, fanout=fanout)
    except USER_ERRORS as exc:
        fail(one_line(exc))
    play(st, opts.store, run_id, prepared, skip, opts.quiet)


def _ray_fanout(target: RayTarget, store_url: str) -> RayFanout:
    from app.fanout.cluster import RayFanout  # imports Ray itself only when it starts
    from storage.store import StoreError

    try:
        return RayFanout(target, store_url, on_note=lambda text: err.print(text))
    except StoreError as exc:  # a URL that names no store
        fail(str(exc))


run_command = command_from(RunOptions, run)
