"""Several people tag one episode with one tag at once on a PostgreSQL store: each call
succeeds, and one note (the last written) is kept, as on SQLite."""

from __future__ import annotations

import threading

import pytest

from storage.store import Store
from tests.support.plain_sql import sql_rows
from tests.support.postgres import PgServer
from tests.support.records import play, spec

pytestmark = pytest.mark.postgres

WRITERS = 6
ROUNDS = 15


def test_tagging_one_target_at_once_keeps_one_note_and_fails_no_one(
    postgres_server: PgServer,
) -> None:
    with postgres_server.database("tagrace") as url:
        stores = [Store(url) for _ in range(WRITERS)]
        try:
            run = stores[0].create_run(spec("tagged"), episodes_planned=None)
            stores[0].sink(run).write(play("q", 0, "wrong", 0.0, 2))
            failures: list[BaseException] = []
            for round_no in range(ROUNDS):
                start = threading.Barrier(WRITERS)

                def tag(
                    store: Store, note: str, start: threading.Barrier, tag: str = f"race-{round_no}"
                ) -> None:
                    start.wait()
                    try:
                        store.annotate(1, tag, note=note)
                    except BaseException as exc:
                        failures.append(exc)

                threads = [
                    threading.Thread(target=tag, args=(s, f"note {i}", start))
                    for i, s in enumerate(stores)
                ]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
            assert failures == []
            kept = "SELECT tag, COUNT(*) FROM annotations GROUP BY tag ORDER BY tag"
            assert sql_rows(url, kept) == sorted((f"race-{r}", 1) for r in range(ROUNDS))
        finally:
            for s in stores:
                s.close()
