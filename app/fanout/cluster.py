"""`app.batch.Fanout` on Ray: connect (or start a cluster on this machine), start the worker
actors, play the run on them, stop them."""

from __future__ import annotations

import contextlib
import logging
import math
import socket
import time
from collections.abc import Callable, Sequence
from typing import Any

from app.fanout.driver import FanoutError, play_shards
from app.fanout.ray_auth import ask_for_token_auth, token_hint
from app.fanout.target import RayTarget, TargetError
from app.fanout.worker import ShardPlayer
from rollout_core.records import EpisodeRecord, PolicyInfo
from rollout_core.runner import EpisodeTask, RunStats
from rollout_core.specs import PlannedRun
from storage.engine import normalize_url
from storage.store import Store

RAY_TAG = "ray"
"""Run tag naming where a fanned-out run was played (`local, 2 workers`)."""
_CONNECT_SECONDS = 5.0
_CALLS_AT_ONCE = 3
"""A worker answers `stop` and `pid` while `play` runs."""


def import_ray() -> Any:
    """The `ray` module, or a one-line TargetError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise TargetError(
            "--ray needs Ray: pip install 'rollscope[ray]' (on every node of the cluster)"
        ) from None
    return ray


class RayFanout:
    """Plays one run on `target.workers` Ray actors; single use (closed after `play`)."""

    def __init__(
        self, target: RayTarget, store_url: str, *, on_note: Callable[[str], None] | None = None
    ) -> None:
        self.target = target
        self.workers_write = normalize_url(store_url).get_backend_name() != "sqlite"
        """PostgreSQL: every worker writes its own episodes. SQLite has one writer: the driver."""
        self._store_url = store_url
        self._on_note = on_note
        self._handles: list[Any] = []
        self._started_cluster = False

    def prepare(self, plan: PlannedRun) -> PolicyInfo:
        """Connect, start the workers and wait until each has built its policy; returns what
        the first one's policy reports. Bad input (a checkpoint a node cannot read) raises."""
        if not self.target.is_local and (note := ask_for_token_auth()) is not None:
            self._note(note)  # before Ray is imported: it reads the mode then
        ray = import_ray()
        began = time.perf_counter()
        self._connect(ray)
        cpus, gpus = self._worker_resources(ray)
        actor = ray.remote(ShardPlayer).options(
            num_cpus=cpus,
            num_gpus=gpus,
            max_restarts=-1,  # a dead worker comes back; the driver bounds replays per shard
            max_task_retries=0,  # the driver replays what was not recorded, nothing else
            max_concurrency=_CALLS_AT_ONCE,
        )
        url = self._store_url if self.workers_write else None
        self._note(f"starting {self.target.label()} on Ray ({cpus:g} CPU, {gpus:g} GPU each)")
        self._handles = [actor.remote(plan.spec, url) for _ in range(self.target.workers)]
        try:
            infos = ray.get([h.describe.remote() for h in self._handles])
        except ray.exceptions.RayActorError as exc:
            self.close()
            raise FanoutError(f"a Ray worker could not start: {_last_line(exc)}") from None
        except BaseException:
            self.close()
            raise
        self._note(f"{len(infos)} Ray workers ready in {time.perf_counter() - began:.1f} s")
        info: PolicyInfo = infos[0]
        return info

    def play(
        self,
        store: Store,
        run_id: int,
        plan: PlannedRun,
        tasks: Sequence[EpisodeTask],
        *,
        should_stop: Callable[[], bool],
        on_episode: Callable[[EpisodeRecord, RunStats], None] | None,
        on_note: Callable[[str], None] | None,
        group_seconds: float = 0.0,
    ) -> RunStats:
        """Play the run's tasks on the workers, then stop them (and a cluster started here);
        on SQLite the driver groups its writes every `group_seconds` (`play_shards`)."""
        try:
            store.tag_run(run_id, RAY_TAG, self.target.label())
            return play_shards(
                self._handles,
                store,
                run_id,
                tasks,
                batch_size=plan.spec.generation.batch_size,
                workers_write=self.workers_write,
                should_stop=should_stop,
                on_episode=on_episode,
                on_note=on_note,
                group_seconds=group_seconds,
            )
        finally:
            self.close()

    def worker_pids(self) -> list[int]:
        """The workers' process ids, in worker order (a restarted worker has a new one)."""
        ray = import_ray()
        pids: list[int] = ray.get([h.pid.remote() for h in self._handles])
        return pids

    def close(self) -> None:
        """Kill the workers; shut down the cluster when this process started it."""
        if not self._handles and not self._started_cluster:
            return
        ray = import_ray()
        for handle in self._handles:
            with contextlib.suppress(Exception):  # already dead is fine
                ray.kill(handle, no_restart=True)
        self._handles = []
        if self._started_cluster:
            self._started_cluster = False
            ray.shutdown()

    def _connect(self, ray: Any) -> None:
        if ray.is_initialized():  # the caller (a test, a notebook, a Ray job) connected already
            return
        quiet = {"logging_level": logging.ERROR, "log_to_driver": False}
        if self.target.is_local:
            # "local", not None: with no address Ray joins the cluster RAY_ADDRESS or the
            # last `ray start` names, and `--ray local` means a cluster of this run's own.
            ray.init(address="local", include_dashboard=False, **quiet)
        else:
            _check_reachable(self.target.address)
            try:
                ray.init(address=self.target.address, **quiet)
            except (ConnectionError, ValueError, RuntimeError) as exc:
                raise TargetError(
                    f"cannot reach the Ray cluster at {self.target.address!r}: "
                    f"{_last_line(exc)} (start it with `ray start --head`, or use --ray local"
                    f"{token_hint()})"
                ) from None
        self._started_cluster = True

    def _worker_resources(self, ray: Any) -> tuple[float, float]:
        """(CPUs, GPUs) each worker asks Ray for; TargetError when the cluster is too small."""
        nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
        total_cpus = sum(n.get("CPU", 0.0) for n in nodes)
        node_gpus = [n.get("GPU", 0.0) for n in nodes]
        workers, gpus = self.target.workers, self.target.gpus_per_worker
        if gpus:
            fit = sum(math.floor(g / gpus + 1e-9) for g in node_gpus)
            if fit < workers:
                have = f"{sum(node_gpus):g} GPU" if any(node_gpus) else "no GPU"
                raise TargetError(
                    f"the Ray cluster has {have}; {workers} workers x {gpus:g} GPU do not fit "
                    "(lower --workers or --gpus-per-worker)"
                )
            return 1.0, gpus
        if total_cpus <= 0:
            raise TargetError("the Ray cluster has no CPU to run workers on")
        # CPU workers share the cluster's cores evenly (Ray sets each one's torch threads from
        # it); fractions let more workers than cores run, which only helps I/O-bound policies.
        largest = max(n.get("CPU", 0.0) for n in nodes)
        return math.floor(min(largest, total_cpus / workers) * 1000) / 1000, 0.0

    def _note(self, text: str) -> None:
        if self._on_note is not None:
            self._on_note(text)


def _check_reachable(address: str) -> None:
    """Refuse a HOST:PORT nothing answers on (Ray itself retries such an address for minutes)."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdecimal():
        return  # `auto`, or an address Ray resolves itself
    try:
        socket.create_connection((host, int(port)), timeout=_CONNECT_SECONDS).close()
    except OSError as exc:
        raise TargetError(
            f"cannot reach the Ray cluster at {address!r}: {exc.strerror or exc} (is "
            "`ray start --head` running there? or use --ray local)"
        ) from None


def _last_line(exc: BaseException) -> str:
    """The last line of a Ray error: the worker's own `Type: message`."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__
