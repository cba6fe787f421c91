"""32 sessions at once into a PostgreSQL store: every episode recorded whole, each its own."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest
from openenv.core.generic_client import GenericEnvClient

from storage.store import Store
from tests.app.env_server.conftest import Bench, env_spec, serving
from tests.app.env_server.test_env_sessions import ORACLE, episodes
from tests.support.postgres import PgServer

pytestmark = pytest.mark.postgres

SESSIONS = 32


def test_thirty_two_sessions_at_once(postgres_server: PgServer, bench: Bench) -> None:
    with postgres_server.database("rollscope_env") as url:
        store = Store(url)
        with serving(store, env_spec(bench)) as served:

            async def session(question_id: str) -> float:
                async with GenericEnvClient(base_url=served.url) as env:
                    total = 0.0
                    for _ in range(2):
                        await env.reset(question_id=question_id)
                        for action in ORACLE[question_id]:
                            result = await env.step(action)
                            total += result.reward or 0.0
                    return total

            async def everyone() -> list[float]:
                questions = ["q-count", "q-france"] * (SESSIONS // 2)
                return await asyncio.gather(*(session(q) for q in questions))

            # A thread of its own: a test process may hold another event loop in its main
            # thread (Playwright's sync API, from a browser test run before this one).
            with ThreadPoolExecutor(1) as pool:
                totals = pool.submit(asyncio.run, everyone()).result()
            assert len(totals) == SESSIONS and all(t > 2.0 for t in totals)
            found = episodes(store, served.run_id)
        keys = sorted((e.summary.question_id, e.summary.sample_index) for e in found)
        assert keys == [(q, i) for q in ("q-count", "q-france") for i in range(SESSIONS)]
        assert all(e.summary.outcome == "correct" for e in found)
        assert all(len(e.steps) == len(ORACLE[e.summary.question_id]) for e in found)
        store.close()
