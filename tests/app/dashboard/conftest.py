"""The dashboard's test stores (the two-checkpoint fixture store, the analysis store), served
to the pages from the env."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import streamlit as st

from app.dashboard.settings import ENV_CHECKPOINT_ROOTS, ENV_DATASET_ROOTS, ENV_READ_ONLY, ENV_STORE
from storage.store import Store
from tests.support.dashboard_stores import (
    AnalysisStore,
    ComparisonStore,
    FixtureStore,
    build_analysis_store,
    build_comparison_store,
    build_fixture_store,
)
from tests.support.long_training import LongTraining, build_long_training


@pytest.fixture
def fresh_cache() -> Iterator[None]:
    """No cached read before or after the test: for a test that changes a cap a cached read
    applies but is not keyed by."""
    st.cache_data.clear()
    yield
    st.cache_data.clear()


def serve_env(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    """The settings of a writable dashboard on `url` with no roots."""
    monkeypatch.setenv(ENV_STORE, url)
    for name in (ENV_READ_ONLY, ENV_CHECKPOINT_ROOTS, ENV_DATASET_ROOTS):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def fixture_store(tmp_path_factory: pytest.TempPathFactory) -> FixtureStore:
    return build_fixture_store(tmp_path_factory.mktemp("dashboard"))


@pytest.fixture
def store_env(fixture_store: FixtureStore, monkeypatch: pytest.MonkeyPatch) -> FixtureStore:
    serve_env(monkeypatch, fixture_store.url)
    return fixture_store


@pytest.fixture(scope="module")
def comparison(tmp_path_factory: pytest.TempPathFactory) -> ComparisonStore:
    return build_comparison_store(tmp_path_factory.mktemp("comparison"))


@pytest.fixture
def compare_env(comparison: ComparisonStore, monkeypatch: pytest.MonkeyPatch) -> ComparisonStore:
    serve_env(monkeypatch, comparison.url)
    return comparison


@pytest.fixture
def empty_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    url = str(tmp_path / "empty.db")
    Store(url).close()
    serve_env(monkeypatch, url)
    yield url


@pytest.fixture
def labelled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FixtureStore:
    """A fresh fixture store (these tests write to it), served writable."""
    fixture = build_fixture_store(tmp_path)
    serve_env(monkeypatch, fixture.url)
    return fixture


@pytest.fixture
def serve_store(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], None]:
    """Point the dashboard at the store at a URL, for this test."""
    return lambda url: serve_env(monkeypatch, url)


@pytest.fixture(scope="session")
def analysis_store(tmp_path_factory: pytest.TempPathFactory) -> AnalysisStore:
    """Three checkpoints of four samples per question (`tests.support.dashboard_stores`)."""
    return build_analysis_store(tmp_path_factory.mktemp("analysis"))


@pytest.fixture
def fx(analysis_store: AnalysisStore, serve_store: Callable[[str], None]) -> AnalysisStore:
    serve_store(analysis_store.url)
    return analysis_store


@pytest.fixture(scope="session")
def long_training_store(tmp_path_factory: pytest.TempPathFactory) -> LongTraining:
    return build_long_training(tmp_path_factory.mktemp("long-training"))


@pytest.fixture
def long_training(
    long_training_store: LongTraining, serve_store: Callable[[str], None]
) -> LongTraining:
    serve_store(long_training_store.url)
    return long_training_store
