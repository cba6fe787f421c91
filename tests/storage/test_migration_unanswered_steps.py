"""Revision 0028: `steps.observation` is NULL where nothing answered the step (an imported or
Recorder rollout's last turn), where it read `''`, so `observation IS NULL` finds the turns
nothing answered and `''` is a reply that was empty. Written by the real producers (the
Recorder, the importer on a chat log), and a store at 0027 upgraded to the same."""

from __future__ import annotations

import json
from pathlib import Path

from app.importers.detect import format_of
from app.importers.importer import Importer, ImportOptions
from app.recorder import Recorder
from storage.store import Store
from tests.support.plain_sql import sql_rows
from tests.support.records import play, spec
from tests.support.store_files import downgrade_to

_OBSERVED = (
    "SELECT r.name, s.step_no, s.observation FROM steps s JOIN episodes e ON e.id = s.episode_id "
    "JOIN runs r ON r.id = e.run_id ORDER BY r.name, s.step_no"
)
_TURNS = [
    {"role": "user", "content": "How many books?"},
    {"role": "assistant", "content": "<sql>SELECT title FROM books WHERE 0</sql>"},
    {"role": "tool", "content": ""},  # an empty result, as the loop's tool wrote it
    {"role": "assistant", "content": "<sql>SELECT COUNT(*) FROM books</sql>"},
    {"role": "tool", "content": "3"},
    {"role": "assistant", "content": "<solution>SELECT COUNT(*) FROM books</solution>"},
]


def test_a_turn_nothing_answered_is_null_and_upgrades_from_empty(
    store_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "chat.jsonl"
    log.write_text(json.dumps({"messages": _TURNS, "reward": 1.0}) + "\n")
    store = Store(store_url)
    try:
        importer = Importer(store, format_of(log, "auto"), ImportOptions(path=log, name="chat"))
        importer.open()
        for f in importer.files():
            importer.import_file(f)
        importer.finish("completed")
        played = store.create_run(spec("played"), episodes_planned=1)
        store.sink(played).write(play("q1", 0, "correct", 1.0, 2))
    finally:
        store.close()
    with Recorder(store_url, run="recorded") as rec:
        rec.episode(question="How many books?", turns=_TURNS, reward=1.0)

    unanswered_last = [(1, ""), (2, "3"), (3, None)]
    at_head = {
        "chat": unanswered_last,
        "played": [(1, "obs 1"), (2, "obs 2")],  # rollscope's environment answers every step
        "recorded": unanswered_last,
    }
    assert _by_run(store_url) == at_head
    nothing = "SELECT count(*) FROM steps WHERE observation IS NULL"
    assert sql_rows(store_url, nothing) == [(2,)]

    downgrade_to(store_url, "0027")  # '' stood in for "nothing answered"
    assert sql_rows(store_url, nothing) == [(0,)]

    Store(store_url).close()  # a writer upgrades on open
    assert _by_run(store_url) == at_head


def _by_run(url: str) -> dict[str, list[tuple[int, str | None]]]:
    found: dict[str, list[tuple[int, str | None]]] = {}
    for name, step_no, observation in sql_rows(url, _OBSERVED):
        found.setdefault(name, []).append((step_no, observation))
    return found
