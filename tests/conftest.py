"""Shared test setup: the `--benchmarks` switch, the Spider dev data, and the session's real
servers (a tiny checkpoint behind `transformers serve`, PostgreSQL).

How the tree is laid out:

- `tests/<package>/` mirrors the source: `tests/app/cli/` tests `app/cli/`,
  `tests/rollout_core/policies/hf/` tests `rollout_core/policies/hf/`, and the tests of a flat
  module sit with its package's (`tests/app/test_export.py` tests `app/export.py`).
- `tests/browser/` drives a real Chromium against a served dashboard; `tests/robustness/` gives
  the whole program bad input, hostile SQL, crashes and concurrent writers;
  `tests/benchmarks/` prints figures and runs only with `--benchmarks` (`make bench`).
- `tests/support/` is what tests share; it holds no test. Every store a test reads is built
  there one way, through the real write path (`Store.sink`): `records.py` makes the records,
  `stores.py` writes them into a run (`write_run`) or plays a policy into one (`play_run`),
  `dashboard_stores.py` builds the named stores the dashboard's tests open, and only
  `synthetic.py`, for benchmarks of millions of rows, fills a store around the sink. Beside
  them: `benchmark.py` (a small Spider-layout benchmark), `store_files.py` (journal modes,
  snapshots, schema revisions), `postgres.py`, `serving.py`, `mounts.py` (read-only and full
  file systems), `cli.py` (running `rollscope`).
- Fixtures live in `conftest.py` files and call those builders: the session's here, the
  `store` on SQLite and PostgreSQL in `tests/storage/conftest.py`, the stores served to the
  pages in `tests/app/dashboard/conftest.py`.

Markers (pyproject.toml): `browser`, `postgres` (uses the `postgres_server` below, skipped
where PostgreSQL is not installed), `slow`, and `benchmark`, given here to every test under
tests/benchmarks/. `make test-quick` leaves out browser, postgres and slow.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, settings

from tests.support.ports import free_port
from tests.support.postgres import PgServer, running_postgres
from tests.support.serving import ServedModel, serving_copy

if TYPE_CHECKING:
    from alembic.config import Config

REPO = Path(__file__).resolve().parents[1]

# One torch thread per test process and the CLIs it starts (set before torch is imported):
# `make test` runs a process per core, and torch's threads, one per core each, spin-waited
# on one another (the demo models' training took 130 s instead of 20 s).
os.environ.setdefault("OMP_NUM_THREADS", "1")

# Started in the background (`make test &` in a script), the suite inherits SIGINT ignored, and
# so would every process it starts; the tests that press Ctrl-C, and the dashboard's stopping
# with the script that started it, assume a terminal's. Restored in each test process.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Property tests draw new examples on every local run (failures replay from .hypothesis/).
# CI sets HYPOTHESIS_PROFILE=ci: one fixed draw, so whether a commit lands never depends on luck,
# nor on the machine's load (Hypothesis' timing checks failed a draw made slow by other tests).
settings.register_profile(
    "ci",
    derandomize=True,
    print_blob=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--benchmarks", action="store_true", help="run tests/benchmarks (they print figures)"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    run_benchmarks = config.getoption("--benchmarks")
    skip = pytest.mark.skip(reason="benchmark: run with --benchmarks (make bench)")
    for item in items:
        if "benchmarks" in item.path.parts:
            item.add_marker(pytest.mark.benchmark)
            if not run_benchmarks:
                item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def _isolated_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Built demo data and caches go to a temporary home, never the user's."""
    old = os.environ.get("ROLLSCOPE_HOME")
    os.environ["ROLLSCOPE_HOME"] = str(tmp_path_factory.mktemp("rollscope-home"))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    yield
    if old is None:
        os.environ.pop("ROLLSCOPE_HOME", None)
    else:
        os.environ["ROLLSCOPE_HOME"] = old


def spider_dir() -> Path | None:
    """The Spider dev set beside the checkout (or $ROLLSCOPE_SPIDER_DIR), if present."""
    env = os.environ.get("ROLLSCOPE_SPIDER_DIR")
    candidates = [Path(env)] if env else []
    candidates.append(REPO.parent / "shared" / "data" / "spider_dev")
    for path in candidates:
        if (path / "questions.json").is_file() and (path / "database").is_dir():
            return path
    return None


@pytest.fixture(scope="session")
def spider() -> Path:
    path = spider_dir()
    if path is None:
        pytest.skip(
            "Spider dev set not found: put it at ../shared/data/spider_dev or set "
            "ROLLSCOPE_SPIDER_DIR to a folder with questions.json and database/"
        )
    return path


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random-init Llama with a tokenizer trained here on the prompt format's text."""
    from app.demo.tiny_model import make_random_checkpoint
    from rollout_core.prompts import get_system_prompt
    from tests.support.benchmark import QUESTIONS

    texts = [get_system_prompt(), *(q for _, q, _ in QUESTIONS), *(s for _, _, s in QUESTIONS)]
    texts += ["DESCRIBE singer", "QUERY SELECT COUNT(*) FROM singer", "ANSWER 5"] * 5
    path = tmp_path_factory.mktemp("tiny-ckpt") / "checkpoint-0"
    return make_random_checkpoint(
        path, texts * 4, vocab_size=400, hidden=32, layers=2, heads=2, ffn=64, max_positions=1024
    )


@pytest.fixture(scope="session")
def served_checkpoint(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny checkpoint as `transformers serve` needs it to sample (`serving_copy`)."""
    return serving_copy(tiny_checkpoint, tmp_path_factory.mktemp("served"))


@pytest.fixture(scope="session")
def openai_server(
    served_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServedModel]:
    """A real OpenAI-compatible server (`transformers serve`, CPU, loopback) for the session."""
    log = tmp_path_factory.mktemp("serve-log") / "serve.log"
    server = ServedModel(served_checkpoint, free_port(), log)
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PgServer]:
    """A PostgreSQL server for the session (one per test process); skips the test where its
    binaries are missing."""
    with running_postgres() as server:
        yield server


@pytest.fixture
def newer_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Config:
    """This process runs as a rollscope one schema revision ahead (9001) of the stores here."""
    import storage.migrations
    from tests.support.store_files import add_revision

    cfg = add_revision(tmp_path / "migrations")
    monkeypatch.setattr(storage.migrations, "alembic_config", lambda: cfg)
    monkeypatch.setattr(storage.migrations, "HEAD_REVISION", "9001")
    return cfg
