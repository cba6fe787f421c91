"""The server's step threads: steps in order on one lane, a slow step played around, errors and
shutdown as an executor's."""

from __future__ import annotations

import threading
from concurrent.futures import Future

import pytest

from app.env_server.step_threads import StepThreads


def test_steps_play_in_order_on_one_thread() -> None:
    threads = StepThreads(spares=3)
    seen: list[tuple[int, str]] = []
    futures = [
        threads.submit(lambda i=i: seen.append((i, threading.current_thread().name)))
        for i in range(200)
    ]
    for f in futures:
        f.result(timeout=10)
    threads.shutdown()
    assert [i for i, _ in seen] == list(range(200))
    assert {name for _, name in seen} == {"env-step"}


def test_a_slow_step_does_not_hold_the_steps_behind_it() -> None:
    threads = StepThreads(spares=2, stuck_after=0.01)
    release = threading.Event()
    slow = threads.submit(release.wait, 30)
    quick: list[Future[str]] = [
        threads.submit(lambda: threading.current_thread().name) for _ in range(5)
    ]
    # They finish while the slow step still holds the lane, on the spares.
    names = {f.result(timeout=10) for f in quick}
    assert not slow.done()
    assert names <= {"env-step-spare-0", "env-step-spare-1"}
    release.set()
    assert slow.result(timeout=10) is True
    threads.shutdown()


def test_errors_reach_the_caller_and_the_lane_goes_on() -> None:
    threads = StepThreads(spares=1)

    def broken() -> None:
        raise ValueError("bad action")

    failed = threads.submit(broken)
    with pytest.raises(ValueError, match="bad action"):
        failed.result(timeout=10)
    assert threads.submit(lambda: 7).result(timeout=10) == 7
    threads.shutdown()


def test_shutdown_plays_what_waits_then_refuses_more() -> None:
    threads = StepThreads(spares=1)
    release = threading.Event()
    first = threads.submit(release.wait, 30)
    waiting = threads.submit(lambda: "played")
    stopper = threading.Thread(target=threads.shutdown)
    stopper.start()
    release.set()
    stopper.join(10)
    assert not stopper.is_alive()
    assert first.result(timeout=0) is True and waiting.result(timeout=0) == "played"
    with pytest.raises(RuntimeError, match="stopping"):
        threads.submit(lambda: None)


def test_shutdown_can_cancel_what_waits() -> None:
    threads = StepThreads(spares=1, stuck_after=60)
    started, release = threading.Event(), threading.Event()
    first = threads.submit(lambda: started.set() or release.wait(30))
    assert started.wait(10)
    waiting = threads.submit(lambda: "played")
    threads.shutdown(wait=False, cancel_futures=True)
    release.set()
    threads.shutdown()
    assert first.result(timeout=0) is True
    assert waiting.cancelled()
