"""Retry one request: a timeout per attempt, exponential backoff with jitter, a total deadline."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Backoff:
    """Waits between attempts: doubling from `base_seconds` up to `cap_seconds`, each drawn in
    the upper half of its step so that many clients retrying at once spread out."""

    base_seconds: float = 0.5
    cap_seconds: float = 8.0

    def delay(self, attempt: int, rng: random.Random) -> float:
        """The wait before retry number `attempt + 1` (attempt 0 follows the first failure)."""
        step = min(self.cap_seconds, self.base_seconds * 2.0 ** min(attempt, 30))
        return step / 2 + rng.uniform(0, step / 2)


class GaveUp(Exception):
    """Every attempt failed with a retryable error until the deadline."""

    def __init__(self, last: BaseException, attempts: int, seconds: float) -> None:
        super().__init__(f"{attempts} attempts in {seconds:.1f} s, the last: {last}")
        self.last = last
        self.attempts = attempts
        self.seconds = seconds


Classify = Callable[[BaseException], float | None]
"""An error -> None when it is final, else the least wait before retrying (0 when any)."""


async def call_with_retries(
    call: Callable[[], Awaitable[T]],
    *,
    timeout_seconds: float,
    deadline_seconds: float,
    classify: Classify,
    backoff: Backoff,
    rng: random.Random,
    on_retry: Callable[[BaseException], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """`call()` until it succeeds; final errors propagate, retryable ones are retried until
    the next attempt would start past `deadline_seconds` (then GaveUp, from the last error).

    Each attempt is cut at `timeout_seconds` in all (a reply that trickles in counts too);
    a cut attempt is retryable like a dropped connection.
    """
    start = clock()
    attempt = 0
    while True:
        try:
            return await asyncio.wait_for(call(), timeout_seconds)
        except Exception as exc:
            wait = classify(exc)
            if wait is None:
                raise
            wait = max(wait, backoff.delay(attempt, rng))
            attempt += 1
            if clock() - start + wait > deadline_seconds:
                raise GaveUp(exc, attempt, clock() - start) from exc
            if on_retry is not None:
                on_retry(exc)
            await asyncio.sleep(wait)
