"""Revision 0024: a run whose policy reported nothing holds SQL NULL in `runs.policy_info`, so
plain SQL's `IS NULL` finds it; rows an earlier rollscope wrote as the JSON text `null` are
rewritten on upgrade."""

from __future__ import annotations

from rollout_core.records import PolicyInfo
from storage.migrations import HEAD_REVISION
from storage.store import Store
from tests.support.plain_sql import sql_rows, sql_run
from tests.support.records import spec
from tests.support.store_files import downgrade_to

_NOTHING_REPORTED = "SELECT name FROM runs WHERE policy_info IS NULL ORDER BY name"


def test_a_run_without_policy_info_holds_sql_null_and_old_json_nulls_upgrade(
    store_url: str,
) -> None:
    store = Store(store_url)
    try:
        store.create_run(spec("imported", kind="import"), episodes_planned=0)
        store.create_run(spec("played"), episodes_planned=0, policy_info=PolicyInfo(name="hf"))
    finally:
        store.close()
    assert sql_rows(store_url, _NOTHING_REPORTED) == [("imported",)]
    assert sql_rows(store_url, "SELECT count(*) FROM runs WHERE policy_info IS NOT NULL") == [(1,)]

    downgrade_to(store_url, "0023")
    as_json = "'null'::json" if store_url.startswith("postgresql") else "'null'"
    sql_run(store_url, f"UPDATE runs SET policy_info = {as_json} WHERE name = 'imported'")
    assert sql_rows(store_url, _NOTHING_REPORTED) == []  # as an earlier rollscope left it

    store = Store(store_url)  # a writer upgrades on open
    try:
        assert store.schema_upgrade is not None and store.schema_upgrade.after == HEAD_REVISION
        assert store.get_run(store.find_run("imported").id).policy_info is None  # type: ignore[union-attr]
    finally:
        store.close()
    assert sql_rows(store_url, _NOTHING_REPORTED) == [("imported",)]
