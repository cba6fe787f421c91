"""Stores the analysis views' page tests share, and serving one to the pages `open_page` runs."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from app.dashboard.settings import ENV_CHECKPOINT_ROOTS, ENV_READ_ONLY, ENV_STORE
from tests.app.analysis_store import AnalysisStore, build_analysis_store


@pytest.fixture
def serve_store(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], None]:
    """Point the dashboard at the store at a URL, for this test."""

    def serve(url: str) -> None:
        monkeypatch.setenv(ENV_STORE, url)
        monkeypatch.delenv(ENV_READ_ONLY, raising=False)
        monkeypatch.delenv(ENV_CHECKPOINT_ROOTS, raising=False)

    return serve


@pytest.fixture(scope="session")
def analysis_store(tmp_path_factory: pytest.TempPathFactory) -> AnalysisStore:
    """Three checkpoints of four samples per question (`tests.app.analysis_store`)."""
    return build_analysis_store(tmp_path_factory.mktemp("analysis"))


@pytest.fixture
def fx(analysis_store: AnalysisStore, serve_store: Callable[[str], None]) -> AnalysisStore:
    serve_store(analysis_store.url)
    return analysis_store
