"""The Recorder while its PostgreSQL store is away: a relay in front of the server is cut (its
connections dropped, new ones refused) and put back, as a restarting server is. A rollout is
taken once or refused whole, never both: a loop that calls again after an error records it
once, and one that gives up is told what is not in the store."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress

import pytest

from app.recorder import Recorder, RecorderError
from tests.support.plain_sql import sql_rows
from tests.support.ports import free_port
from tests.support.postgres import PgServer

pytestmark = pytest.mark.postgres

QUESTION = "How many books does the library have?"
OUTAGE_SECONDS = 2.0
"""How long a short outage lasts: well under the Recorder's `retry_seconds`."""


class _Relay:
    """A TCP relay to a server on a loopback port that can be cut and put back on its port."""

    def __init__(self, target: int) -> None:
        self.port = free_port()
        self._target = target
        self._open: list[socket.socket] = []
        self._guard = threading.Lock()
        self._cut = threading.Event()
        self._accepting: threading.Thread | None = None

    def url(self, server_url: str) -> str:
        """`server_url` by way of the relay."""
        return server_url.replace(f":{self._target}/", f":{self.port}/")

    def up(self) -> None:
        listener = socket.create_server(("127.0.0.1", self.port))
        listener.settimeout(0.05)
        self._cut.clear()
        self._accepting = threading.Thread(target=self._accept, args=(listener,), daemon=True)
        self._accepting.start()

    def down(self) -> None:
        """Refuse new connections and drop those open, as a server that went away."""
        self._cut.set()
        if self._accepting is not None:
            self._accepting.join()
        with self._guard:
            for sock in self._open:
                with suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            self._open.clear()

    def _accept(self, listener: socket.socket) -> None:
        with listener:
            while not self._cut.is_set():
                try:
                    client, _ = listener.accept()
                except TimeoutError:
                    continue
                client.settimeout(None)
                try:
                    server = socket.create_connection(("127.0.0.1", self._target))
                except OSError:
                    client.close()
                    continue
                with self._guard:
                    self._open += [client, server]
                for source, sink in ((client, server), (server, client)):
                    threading.Thread(target=_pump, args=(source, sink), daemon=True).start()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    with suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    with suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


@contextmanager
def _store_behind_relay(server: PgServer) -> Iterator[tuple[str, _Relay]]:
    """A new store's URL, and a relay to its server (up)."""
    with server.store_database("recorder_outage") as url:
        relay = _Relay(server.port)
        relay.up()
        try:
            yield url, relay
        finally:
            relay.down()


def _turns(sample: int) -> list[dict[str, str]]:
    return [
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": f"<solution>SELECT {sample}</solution>"},
    ]


def _record_until_taken(rec: Recorder, step: int, sample: int) -> int:
    """A loop that calls again after any error; the errors it met."""
    for attempt in range(150):
        try:
            rec.episode(
                question=QUESTION, turns=_turns(sample), reward=float(sample == 0), step=step
            )
            return attempt
        except Exception:
            time.sleep(0.2)
    raise AssertionError("the Recorder never took the rollout")


def test_a_short_outage_neither_doubles_nor_loses_a_rollout(postgres_server: PgServer) -> None:
    # A write falls due at every third rollout, mid-step too, all through the outage, and
    # each new step's groups are read from the store while it lasts.
    errors = sent = 0
    with _store_behind_relay(postgres_server) as (url, relay):
        back = threading.Timer(OUTAGE_SECONDS, relay.up)
        with Recorder(
            relay.url(url), run="r", kind="training", flush_every=3, flush_seconds=3600
        ) as rec:
            for step in range(24):
                for sample in range(4):
                    if (step, sample) == (8, 2):  # the call after this one makes a write due
                        relay.down()
                        back.start()
                    errors += _record_until_taken(rec, step, sample)
                    sent += 1
                time.sleep(0.1)
        back.join()
        rec.store.close()
        stored = sql_rows(
            url,
            "SELECT count(*), count(DISTINCT sample_index), "
            "sum(CASE WHEN outcome = 'correct' THEN 1 ELSE 0 END), "
            "count(DISTINCT (train_step, group_index)) FROM episodes",
        )
        status = sql_rows(url, "SELECT status, finished_episodes FROM runs")
    assert stored == [(sent, sent, 24, 24)]
    assert status == [("completed", sent)]
    assert errors == 0  # the loop went on while the store was away


def test_a_store_away_past_retry_seconds_refuses_rollouts_without_keeping_them(
    postgres_server: PgServer,
) -> None:
    taken = 0
    with _store_behind_relay(postgres_server) as (url, relay):
        with Recorder(
            relay.url(url), run="r", flush_every=2, flush_seconds=0.1, retry_seconds=1.0
        ) as rec:
            for sample in range(3):
                rec.episode(question=QUESTION, turns=_turns(sample), reward=1.0)
                taken += 1
            relay.down()
            give_up = time.monotonic() + 60
            with pytest.raises(RecorderError) as refused:
                while time.monotonic() < give_up:
                    rec.episode(question=QUESTION, turns=_turns(taken), reward=1.0)
                    taken += 1
                    time.sleep(0.1)
            relay.up()
            # The refused rollout, called again until the store is back: recorded once.
            assert _record_until_taken(rec, 0, taken) > 0
            taken += 1
        rec.store.close()
        stored = sql_rows(url, "SELECT count(*), count(DISTINCT sample_index) FROM episodes")
        status = sql_rows(url, "SELECT status FROM runs")
    said = str(refused.value)
    assert said.startswith("the store has taken no write for "), said
    assert "(OperationalError: " in said and "this rollout was not recorded" in said
    assert stored == [(taken, taken)]
    assert status == [("completed",)]


def test_close_says_what_a_store_that_stays_away_never_took(postgres_server: PgServer) -> None:
    with _store_behind_relay(postgres_server) as (url, relay):
        rec = Recorder(relay.url(url), run="r", flush_seconds=3600, retry_seconds=1.0)
        for sample in range(2):
            rec.episode(question=QUESTION, turns=_turns(sample), reward=1.0)
        rec.flush()
        for sample in range(2, 5):
            rec.episode(question=QUESTION, turns=_turns(sample), reward=1.0)
        relay.down()
        with pytest.raises(RecorderError) as closing:
            rec.close()
        relay.up()
        rec.store.close()
        stored = sql_rows(url, "SELECT count(*) FROM episodes")
    said = str(closing.value)
    assert said.startswith("3 of the 5 rollouts recorded could not be written (OperationalError: ")
    assert "the run's status could not be set" in said
    assert stored == [(2,)]
