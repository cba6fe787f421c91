"""The Launch page through AppTest: each problem under its field; hidden when read-only."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from app.dashboard.settings import ENV_CHECKPOINT_ROOTS, ENV_READ_ONLY
from storage.store import Store
from tests.app.dashboard.apptest import MAIN, open_page, texts
from tests.support.dashboard_stores import FixtureStore


def test_launch_rejects_bad_input_with_clear_errors(
    store_env: FixtureStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_CHECKPOINT_ROOTS, str(tmp_path / "models"))
    at = open_page("launch/page.py")
    at.form_submit_button[0].click().run()
    assert "run name is empty" in texts(at)
    at.selectbox(key="ln_policy").set_value("other checkpoint directory...").run()
    at.text_input(key="ln_checkpoint").set_value("/etc")
    at.text_input(key="ln_run_name").set_value("try-1")
    at.form_submit_button[0].click().run()
    assert "outside the checkpoint roots" in texts(at)
    assert "Not launched: 1 field to fix" in at.error[0].value


def test_launch_counts_every_problem_at_once(store_env: FixtureStore) -> None:
    # Before: "1 field to fix" for the dataset, then the ids, then the name, one at a time.
    at = open_page("launch/page.py")
    at.text_input(key="ln_dataset").set_value("demo:test")
    at.text_input(key="ln_question_ids").set_value("bogus1, bogus2")
    at.text_input(key="ln_run_name").set_value("N" * 1500)
    at.form_submit_button[0].click().run()
    shown = texts(at).replace("\\", "")
    assert "unknown question ids in dataset 'demo:test'" in shown
    assert "the run name is 1,500 characters long" in shown
    assert "Not launched: 2 fields to fix" in at.error[0].value


def test_launch_is_off_in_read_only_mode(
    store_env: FixtureStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Out of the menu (the browser test looks), and a link to it says it is off."""
    monkeypatch.setenv(ENV_READ_ONLY, "1")
    at = AppTest.from_file(str(MAIN), default_timeout=30).run()
    at.switch_page("launch/page.py").run()
    assert not at.exception and not at.button and not at.text_input
    assert at.info[0].value == "This dashboard is read-only; launching runs is switched off."


def test_launch_reports_each_field_under_it(
    store_env: FixtureStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    at = open_page("launch/page.py")
    at.selectbox(key="ln_policy").set_value("other checkpoint directory...").run()
    at.number_input(key="ln_step_budget").set_value(99)
    at.number_input(key="ln_samples").set_value(0)
    at.text_input(key="ln_checkpoint").set_value("hf:/models/x")
    at.text_input(key="ln_dataset").set_value("/etc/passwd")
    at.text_input(key="ln_run_name").set_value("bad")
    at.form_submit_button[0].click().run()
    shown = texts(at)
    assert "step budget must be between 1 and 50, got 99" in shown
    assert "samples must be between 1 and 64, got 0" in shown
    assert "no checkpoint roots configured" in shown
    assert "no dataset roots configured" in shown
    assert "Not launched: 4 fields to fix" in at.error[0].value
    assert Store(store_env.url).find_run("bad") is None


def test_launch_shows_only_the_chosen_policys_fields(labelled: FixtureStore) -> None:
    # Issue 31, polish: every policy's fields showed whatever the policy.
    at = open_page("launch/page.py")
    labels = {t.label for t in at.text_input}
    assert "Checkpoint directory" not in labels and "Server URL" not in labels
    at.selectbox(key="ln_policy").set_value("other checkpoint directory...").run()
    labels = {t.label for t in at.text_input}
    assert "Checkpoint directory" in labels and "Server URL" not in labels
    at.selectbox(key="ln_policy").set_value("OpenAI-compatible server...").run()
    labels = {t.label for t in at.text_input}
    assert {"Server URL", "Server model"} <= labels and "Checkpoint directory" not in labels
    # A directory typed for one choice never turns another away: oracle launches.
    at.selectbox(key="ln_policy").set_value("other checkpoint directory...").run()
    at.text_input(key="ln_checkpoint").set_value("/models/x")
    at.selectbox(key="ln_policy").set_value("oracle").run()
    at.text_input(key="ln_run_name").set_value("oracle-after-a-path")
    at.form_submit_button[0].click().run()
    assert not at.error, [e.value for e in at.error]
    assert Store(labelled.url).find_run("oracle-after-a-path") is not None


def test_the_run_name_placeholder_reads_as_an_example(store_env: FixtureStore) -> None:
    # Issue 31, polish: "ckpt-1000-demo" as placeholder looked like a value already typed.
    at = open_page("launch/page.py")
    placeholder = at.text_input(key="ln_run_name").placeholder
    assert placeholder.startswith("name the new run, e.g. "), placeholder
