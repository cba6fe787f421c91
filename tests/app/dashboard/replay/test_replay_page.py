"""The Replay page through AppTest: output as text, the step player, errors once, a query run
again, the gold answer."""

from __future__ import annotations

import json

from app.dashboard.replay.context import ABANDONED
from rollout_core.records import IterationBatch
from storage.read_models import EpisodeFilter
from storage.store import Store
from tests.app.dashboard.apptest import open_page, texts
from tests.support.benchmark import QUESTIONS
from tests.support.dashboard_stores import XSS_OUTPUT, AnalysisStore, FixtureStore
from tests.support.records import finish, spec, start, step


def test_replay_shows_model_output_literally_never_as_html(store_env: FixtureStore) -> None:
    at = open_page("replay/page.py", episode=str(store_env.xss_episode), step="2")
    assert XSS_OUTPUT in [c.value for c in at.code]
    # Nothing renders it as markdown or HTML.
    assert not any("<script" in m.value for m in at.markdown)
    assert not at.get("html")
    assert "No action line found" in at.warning[0].value


def test_replay_steps_through_the_episode(store_env: FixtureStore) -> None:
    at = open_page("replay/page.py", episode=str(store_env.query_episode))
    assert at.subheader[0].value == "Step 1 of 3: DESCRIBE"
    next(b for b in at.button if b.label == "Next").click().run()
    assert at.subheader[0].value == "Step 2 of 3: QUERY"
    assert at.query_params["step"] == "2"
    assert "SELECT name FROM singer WHERE country = 'France'" in [c.value for c in at.code]
    next(b for b in at.button if b.label == "Last").click().run()
    assert at.subheader[0].value == "Step 3 of 3: ANSWER"
    next(b for b in at.button if b.label == "First").click().run()
    assert at.subheader[0].value == "Step 1 of 3: DESCRIBE"


def test_replay_reruns_a_query_and_reports_it_still_matches(store_env: FixtureStore) -> None:
    at = open_page("replay/page.py", episode=str(store_env.query_episode), step="2")
    next(b for b in at.button if b.label == "Run this query again").click().run()
    assert "Same result as recorded." in [s.value for s in at.success]
    rows = at.dataframe[0].value
    assert list(rows["name"]) == ["Ada", "Cy"]


def test_replay_reveals_the_gold_answer_by_running_the_gold_sql(store_env: FixtureStore) -> None:
    at = open_page("replay/page.py", episode=str(store_env.query_episode))
    assert not at.dataframe
    at.toggle[0].set_value(True).run()
    assert "SELECT name FROM singer WHERE country = 'France'" in [c.value for c in at.code]
    assert list(at.dataframe[0].value["name"]) == ["Ada", "Cy"]


def test_replay_sql_error_is_highlighted_and_escaped(store_env: FixtureStore) -> None:
    # ckpt-1000 got q-avg wrong with a query naming a missing column.
    flt = EpisodeFilter(run_ids=(store_env.run_a,), question_id="q-avg")
    episode = Store(store_env.url).list_episodes(flt).items[0]
    at = open_page("replay/page.py", episode=str(episode.id), step="2")
    # Escaped for markdown: the text shows literally.
    assert r"no such column\: nme" in [e.value for e in at.error]


def test_replay_with_an_unknown_or_missing_episode(store_env: FixtureStore) -> None:
    at = open_page("replay/page.py", episode="424242")
    assert "424242" in at.warning[0].value
    at = open_page("replay/page.py")
    assert "Pick an episode" in at.info[0].value


def test_replay_shows_an_error_once(store_env: FixtureStore) -> None:
    flt = EpisodeFilter(run_ids=(store_env.run_a,), question_id="q-avg")
    episode = Store(store_env.url).list_episodes(flt).items[0]
    at = open_page("replay/page.py", episode=str(episode.id), step="2")
    shown = r"no such column\: nme"
    # once in the step view, once in the folded transcript; never again as a code block
    transcript = next(e for e in at.expander if e.label == "Full transcript")
    assert [e.value for e in transcript.error] == [shown]
    assert [e.value for e in at.error] == [shown, shown]
    assert not any("no such column" in c.value for c in at.code)


def test_replay_offers_a_rerun_only_for_a_parsed_query(store_env: FixtureStore) -> None:
    at = open_page("replay/page.py", episode=str(store_env.xss_episode), step="2")
    assert at.subheader[0].value == "Step 2 of 3: QUERY"
    assert "Run this query again" not in [b.label for b in at.button]
    at = open_page("replay/page.py", episode=str(store_env.query_episode), step="2")
    assert "Run this query again" in [b.label for b in at.button]


def test_replay_shows_the_prompt_the_model_saw_message_by_message(store_env: FixtureStore) -> None:
    at = open_page("replay/page.py", episode=str(store_env.query_episode), step="2")
    expander = next(e for e in at.expander if e.label == "Prompt as the model saw it")
    assert [c.value for c in expander.caption] == ["system", "user"]
    assert [c.value for c in expander.code] == [
        "You answer with one action.",
        f"Question {QUESTIONS[1][0]}, step 2",
    ]


def test_the_prompt_shows_the_tool_calls_the_model_made_and_content_in_parts(
    labelled: FixtureStore,
) -> None:
    # An assistant turn that only called a tool showed as "(empty)": its call was left out.
    call = {"id": "c1", "type": "function", "function": {"name": "run_sql", "arguments": "{}"}}
    prompt = (
        {"role": "user", "content": [{"type": "text", "text": "How many?"}]},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "content": "[(6,)]", "tool_call_id": "c1"},
    )
    store = Store(labelled.url)
    run = store.create_run(spec("tools"), episodes_planned=1)
    store.sink(run).write(
        IterationBatch(
            [start("q1")], [step("q1", 0, 1, prompt=prompt)], [finish("q1", 0, "wrong", 0.0, 1)]
        )
    )
    (episode,) = store.list_episodes(EpisodeFilter(run_ids=(run,)), limit=5).items
    at = open_page("replay/page.py", episode=str(episode.id))
    expander = next(e for e in at.expander if e.label == "Prompt as the model saw it")
    assert [c.value for c in expander.caption] == ["user", "assistant", "(empty)", "tool"]
    assert [c.value for c in expander.code] == [
        '[{"type": "text", "text": "How many?"}]',
        json.dumps({"tool_calls": [call]}),
        "[(6,)]",
        '{"tool_call_id": "c1"}',
    ]


def test_replay_says_what_an_abandoned_episode_is(labelled: FixtureStore) -> None:
    # An env-server client that left mid-episode: only the bare word `abandoned` said so.
    store = Store(labelled.url)
    left = store.create_run(spec("served", kind="env"), episodes_planned=0, status="running")
    store.sink(left).write(
        IterationBatch(
            started=[start("q1")],
            steps=[step("q1", 0, 1, action="DESCRIBE")],
            finished=[finish("q1", 0, "abandoned", 0.0, 1, failure_class="abandoned")],
        )
    )
    (episode,) = store.list_episodes(EpisodeFilter(run_ids=(left,)), limit=5).items
    at = open_page("replay/page.py", episode=str(episode.id))
    assert ABANDONED in [c.value for c in at.caption]
    assert at.subheader[0].value == "Step 1 of 1: DESCRIBE"
    at = open_page("replay/page.py", episode=str(labelled.query_episode))
    assert ABANDONED not in [c.value for c in at.caption]


def test_an_env_server_step_is_shown_as_what_its_client_sent(labelled: FixtureStore) -> None:
    # The client may send the action alone: its raw output is then that action, not the
    # model's text, and the caption must not call it the model's.
    store = Store(labelled.url)
    served = store.create_run(spec("client", kind="env"), episodes_planned=0, status="running")
    sent = json.dumps({"action_type": "DESCRIBE", "argument": "singer"})
    store.sink(served).write(
        IterationBatch(
            started=[start("q1")],
            steps=[step("q1", 0, 1, action="DESCRIBE", raw=sent)],
            finished=[finish("q1", 0, "wrong", 0.0, 1)],
        )
    )
    (episode,) = store.list_episodes(EpisodeFilter(run_ids=(served,)), limit=5).items
    at = open_page("replay/page.py", episode=str(episode.id))
    captions = [c.value for c in at.caption]
    assert "raw output, as the client sent it" in captions
    assert "raw model output" not in captions
    assert sent in [c.value for c in at.code]
    at = open_page("replay/page.py", episode=str(labelled.query_episode))
    assert "raw model output" in [c.value for c in at.caption]


def test_an_episode_of_a_run_of_several_samples_links_its_questions_samples(
    fx: AnalysisStore,
) -> None:
    # A batch run's GRPO group is its question's samples: the link opens them, by question.
    at = open_page("replay/page.py", episode=str(fx.solved_episode))
    (link,) = [p.proto for p in at.get("page_link") if "GRPO group" in p.proto.label]
    assert (link.label, link.page) == ("Its GRPO group", "groups")
    assert link.query_string == f"run={fx.runs['ckpt-100']}&question=q-count"
    assert "training step" not in texts(at)
