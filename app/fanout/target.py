"""Where a run fans out: a Ray address and how many workers, checked before anything starts."""

from __future__ import annotations

from dataclasses import dataclass

from rollout_core.errors import RollscopeError

LOCAL = "local"


class TargetError(RollscopeError, ValueError):
    """A fan-out setting that cannot work; the message names the flag and the fix."""


@dataclass(frozen=True, slots=True)
class RayTarget:
    """A Ray cluster to play on and the actors to start there."""

    address: str
    """`local` (start a cluster on this machine) or a Ray address: `auto`, `HOST:6379`,
    `ray://HOST:10001`."""
    workers: int
    """Actors playing shards; each builds its own policy."""
    gpus_per_worker: float = 0.0
    """GPUs each actor holds (fractions share one GPU); 0 for CPU actors."""

    def __post_init__(self) -> None:
        if not self.address.strip():
            raise TargetError("--ray needs `local` or a Ray cluster address such as HOST:6379")
        if self.workers < 1:
            raise TargetError(f"--workers must be at least 1, got {self.workers}")
        if self.gpus_per_worker < 0:
            raise TargetError(f"--gpus-per-worker must be 0 or more, got {self.gpus_per_worker}")

    @property
    def is_local(self) -> bool:
        return self.address.strip().lower() == LOCAL

    def cli_flags(self) -> list[str]:
        """The `rollscope run` flags that ask for this target."""
        flags = ["--ray", self.address, "--workers", str(self.workers)]
        if self.gpus_per_worker:
            flags += ["--gpus-per-worker", f"{self.gpus_per_worker:g}"]
        return flags

    def label(self) -> str:
        """e.g. `local, 2 workers` or `HOST:6379, 8 workers x 1 GPU`."""
        text = f"{self.address}, {self.workers} worker{'s' if self.workers != 1 else ''}"
        if self.gpus_per_worker:
            text += f" x {self.gpus_per_worker:g} GPU"
        return text


def ray_target(
    address: str | None, workers: int | None, gpus_per_worker: float | None
) -> RayTarget | None:
    """Where a run is asked to fan out (None: this process plays it); TargetError names the
    flag to fix. Placement is not a run setting, so it may go with a queued or resumed run."""
    if address is None:
        if workers is not None or gpus_per_worker is not None:
            raise TargetError("--workers and --gpus-per-worker need --ray local or --ray ADDRESS")
        return None
    if workers is None:
        raise TargetError("--ray needs --workers N: how many Ray workers play the run")
    return RayTarget(address, workers, gpus_per_worker or 0.0)
