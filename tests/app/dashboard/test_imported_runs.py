"""Pages on runs another framework wrote (verl rollout dumps, imported): they say what their
numbers are, and show no zeros for what their files do not hold."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from storage.store import Store
from tests.app.dashboard.apptest import open_page, texts
from tests.app.dashboard.conftest import serve_env
from tests.app.importers.conftest import run_import
from tests.app.importers.writers import sql_prompt, sql_response, verl_dump
from tests.support.records import spec

TURNS = [("<sql>SELECT 1</sql>", "\n1\n"), ("<solution>SELECT 1</solution>", None)]


def _import(store: Store, dump: Path, name: str, scores: list[float]) -> int:
    """Two training steps of one question's group, a score per sample."""
    n = len(scores)
    for step in (1, 2):
        inputs, outputs = [sql_prompt("How many?")] * n, [sql_response(TURNS)] * n
        verl_dump(dump, step, inputs, outputs, ["SELECT 1"] * n, scores, {})
    run_id, _ = run_import(store, dump, name)
    return run_id


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, int, int]:
    """A verl run scored 1 or 0, and one whose every score reaches the default --correct-at
    (a format reward of 1 beside a correctness reward)."""
    root = tmp_path_factory.mktemp("imported")
    store = Store(str(root / "store.db"))
    run_id = _import(store, root / "dump", "verl-grpo", [1.0, 0.0])
    formatted = _import(store, root / "formatted", "format-reward", [2.0, 1.0])
    store.close()
    return str(root / "store.db"), run_id, formatted


def test_training_says_the_reward_is_the_files_own(
    imported: tuple[str, int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, run_id, _ = imported
    serve_env(monkeypatch, url)
    shown = texts(open_page("training/page.py", run=str(run_id)))
    assert "Mean episode reward as the trainer's files give it" in shown
    assert "plus shaping" not in shown
    assert "as TRL numbers" not in shown
    assert "Left out" not in shown


def test_pages_on_a_step_played_again_say_which_play_they_show(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(str(tmp_path / "store.db"))
    run_id = _import(store, tmp_path / "dump", "resumed", [1.0, 0.0])
    # Resumed from step 1's checkpoint, the trainer plays step 2 again and writes its file anew.
    inputs, outputs = [sql_prompt("How many?")] * 2, [sql_response(TURNS)] * 2
    verl_dump(tmp_path / "dump", 2, inputs, outputs, ["SELECT 1"] * 2, [0.5, 0.5], {})
    run_import(store, tmp_path / "dump", "resumed")
    store.close()
    with closing(sqlite3.connect(tmp_path / "store.db")) as conn:
        ((question_id,),) = conn.execute("SELECT DISTINCT question_id FROM episodes").fetchall()
    serve_env(monkeypatch, str(tmp_path / "store.db"))
    page = open_page("training/page.py", run=str(run_id))
    captions = [c.value for c in page.caption]
    assert any(
        c.startswith("Left out: 2 episodes of earlier plays of training step 2, which a later")
        for c in captions
    ), captions
    assert [m.value for m in page.metric][1:3] == ["6", "2"]  # the run's episodes, its steps
    # Compare with the step as a side says the same of it, and nothing of the step before.
    compare = open_page("compare/page.py", run=[f"{run_id}@1", f"{run_id}@2"])
    captions = [c.value for c in compare.caption]
    assert [c for c in captions if "earlier play" in c] == [
        "resumed @ step 2: the step as its rewritten file holds it now; 2 episodes of an "
        "earlier play of it left out (a trainer resumed from a checkpoint played the step "
        "again)."
    ]
    # Episodes lists both plays, the earlier one's episodes ticked "replaced".
    table = open_page("episodes/page.py", run=str(run_id), tmin="2").dataframe[0].value
    shown = sorted(zip(table["id"], table["replaced"], strict=True))
    assert shown == [(3, True), (4, True), (5, False), (6, False)]
    first = open_page("episodes/page.py", run=str(run_id), tmax="1").dataframe[0].value
    assert "replaced" not in first.columns
    # GRPO groups counts the earlier play's samples in its group, and its group says so.
    table = open_page("groups/page.py", run=str(run_id)).dataframe[0].value
    replaced = table.set_index("training step")["replaced"]
    assert sorted(replaced.items()) == [(1, 0), (2, 0), (2, 2)]
    for group, said in (("1", True), ("2", False)):
        view = open_page("groups/page.py", run=str(run_id), question=question_id, group=group)
        told = "Its samples are of an earlier play of this step, which a later play replaced"
        assert any(c.value.startswith(told) for c in view.caption) is said, group
    # Replay's origin line of an episode of the earlier play, and of one of the new play.
    for episode, said in ((3, "line 1 (since rewritten without this row)"), (5, "line 1 ·")):
        shown = texts(open_page("replay/page.py", episode=str(episode)))
        assert "imported from verl rollout dump file `2.jsonl`, " + said in shown


def test_training_says_how_trls_files_number_the_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pandas as pd

    # As TRL's GRPOTrainer.log writes it (`completions_{step:05d}.parquet`).
    folder = tmp_path / "out" / "completions"
    folder.mkdir(parents=True)
    pd.DataFrame(
        {
            "step": [1, 1],
            "prompt": [[{"role": "user", "content": "How many?"}]] * 2,
            "completion": [[{"role": "assistant", "content": "<solution>SELECT 1</solution>"}]] * 2,
            "exact": [1.0, 0.0],
        }
    ).to_parquet(folder / "completions_00001.parquet")
    store = Store(str(tmp_path / "store.db"))
    run_id, _ = run_import(store, tmp_path / "out", "trl-log")
    store.close()
    serve_env(monkeypatch, str(tmp_path / "store.db"))
    shown = texts(open_page("training/page.py", run=str(run_id)))
    assert "Training steps as TRL numbers its completions files" in shown


def test_replay_shows_no_zero_timings_or_empty_tokens(
    imported: tuple[str, int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, run_id, _ = imported
    serve_env(monkeypatch, url)
    with closing(sqlite3.connect(url)) as conn:
        (episode,) = conn.execute(
            "SELECT min(id) FROM episodes WHERE run_id = ?", (run_id,)
        ).fetchone()
    shown = texts(open_page("replay/page.py", episode=str(episode)))
    assert "reward **+0.000**" in shown
    assert "policy 0.00 s" not in shown and "tokens - in" not in shown


def test_groups_point_an_imported_run_at_correct_at_not_at_rollscopes_shaping(
    imported: tuple[str, int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _, formatted = imported
    serve_env(monkeypatch, url)
    shown = texts(open_page("groups/page.py", run=str(formatted)))
    assert "2 of 2 groups get their advantages from the trainer's reward terms" in shown
    assert "rollscope import --correct-at" in shown
    assert "QUERY progress" not in shown


def test_groups_open_on_an_imported_run_before_a_newer_batch_of_one_sample(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An import keeps no `samples` in its spec (it did not play them): its groups are still
    # what the page opens on, not the newer run that has none.
    store = Store(str(tmp_path / "store.db"))
    run_id = _import(store, tmp_path / "dump", "verl-grpo", [1.0, 0.0])
    store.create_run(spec("batch-after"), episodes_planned=1)
    store.close()
    serve_env(monkeypatch, str(tmp_path / "store.db"))
    at = open_page("groups/page.py")
    assert at.selectbox[0].value == run_id
    assert {m.label: m.value for m in at.metric}["groups"] == "2"


def test_pages_averaging_a_questions_samples_say_when_a_run_holds_several_agents(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two trained agents answer each line's task (self-play): their traces are samples of the
    # question, and a user comparing the run should know its figures mix them.
    from app.dashboard.components.render import escape_markdown
    from tests.app.importers.test_verifiers_traces import _episode as v1_episode
    from tests.app.importers.test_verifiers_traces import _solver
    from tests.app.importers.writers import verifiers_write_episode

    hostile = "<b>critic</b> *2*"
    pair = [_solver(), _solver(agent={"name": hostile, "trainable": True})]
    verifiers_write_episode(tmp_path / "pair", v1_episode(pair))
    verifiers_write_episode(tmp_path / "solo", v1_episode([_solver()]))
    url = str(tmp_path / "store.db")
    store = Store(url)
    pair_run, _ = run_import(store, tmp_path / "pair", "self-play")
    solo_run, _ = run_import(store, tmp_path / "solo", "solo")
    assert store.run_agents([pair_run, solo_run]) == {
        pair_run: ("agent", hostile),
        solo_run: ("agent",),
    }
    store.close()
    serve_env(monkeypatch, url)
    named = f'("agent", "{escape_markdown(hostile)}")'
    said = (
        f"{escape_markdown('self-play')} holds the traces of 2 trained agents {named}:"
        " each trace is a sample of its question here, so the agents' rewards average together."
    )
    pages = [("compare/page.py", [str(solo_run), str(pair_run)]), ("question_map/page.py",
             [str(solo_run), str(pair_run)]), ("groups/page.py", str(pair_run)),
             ("training/page.py", str(pair_run))]  # fmt: skip
    for page, runs in pages:
        captions = [c.value for c in open_page(page, run=runs).caption]
        assert said in captions, page
        assert not any(c.startswith("solo holds") for c in captions), page
    # Side by side, the trace shown names its agent in the run of several, not in the other.
    compare = open_page("compare/page.py", run=[str(solo_run), str(pair_run)])
    compared = [c.value for c in compare.caption]
    outcomes = [c for c in compared if c.startswith("**correct**")]
    assert outcomes == [
        "**correct** · reward 1.100 · 2 steps",
        '**correct** · reward 1.100 · 2 steps · agent "agent"',
    ]
    # Its sample picker names each sample's agent, as plain text (a select box draws no markup).
    (picker,) = [b for b in compare.selectbox if b.label.startswith("Sample")]
    assert picker.options == ['0 · agent "agent"', f'1 · agent "{hostile}"']
