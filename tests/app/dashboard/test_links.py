"""Every page answers a bad link parameter with a one-line notice and its default."""

from __future__ import annotations

import pytest

from tests.app.dashboard.apptest import open_page
from tests.support.dashboard_stores import FixtureStore


@pytest.mark.parametrize(
    ("page", "query", "notice"),
    [
        ("episodes/page.py", {"run": "abc"}, "run='abc' in the link is not a run id"),
        ("episodes/page.py", {"sort": "bogus"}, "sort='bogus' in the link is not a sort order"),
        ("episodes/page.py", {"size": "7"}, "size='7' in the link is not a page size"),
        ("episodes/page.py", {"cursor": "xyz"}, "page cursor is not valid here"),
        ("episodes/page.py", {"rmin": "lots"}, "rmin='lots' in the link is not a number"),
        ("episodes/page.py", {"outcome": "great"}, "outcome='great' in the link is not"),
        ("replay/page.py", {"episode": "abc"}, "episode='abc' in the link is not an episode"),
        # A digit int() refuses, and an id past the store's 64 bits: both raised before.
        ("replay/page.py", {"episode": "²"}, "episode='²' in the link is not an episode"),
        ("replay/page.py", {"episode": "9" * 20}, f"episode='{'9' * 20}' in the link is not"),
        ("episodes/page.py", {"run": "²"}, "run='²' in the link is not a run id"),
        ("compare/page.py", {"run": ["1@²", "2"]}, "run='1@²' in the link is not a run id"),
        ("groups/page.py", {"group": "9" * 20}, f"group='{'9' * 20}' in the link is not a group"),
        ("episodes/page.py", {"smin": "9" * 20}, f"smin='{'9' * 20}' in the link is not a step"),
        ("episodes/page.py", {"tmax": "9" * 20}, f"tmax='{'9' * 20}' in the link is not a train"),
        ("replay/page.py", {"episode": "1", "step": "99"}, "step='99' in the link is not a step"),
        ("compare/page.py", {"run": ["1", "2"], "question": "nope"}, "question='nope'"),
        (None, {"run": "abc"}, "run='abc' in the link is not a run id"),
        (
            "compare/page.py",
            {"runs": "1,2"},
            "runs= in the link is not a parameter of this page (did you mean run=?); ignored.",
        ),
        (
            None,
            {"runz": "1"},
            "runz= in the link is not a parameter of this page (did you mean run=?)",
        ),
        (
            "replay/page.py",
            {"x": "1"},
            "x= in the link is not a parameter of this page (it reads episode, step, from)",
        ),
        ("episodes/page.py", {"tmni": "3"}, "(did you mean tmin=?)"),
    ],
)
def test_a_bad_link_parameter_gets_a_notice_and_a_default(
    store_env: FixtureStore, page: str | None, query: dict[str, str | list[str]], notice: str
) -> None:
    at = open_page(page, **query)  # open_page fails on any exception
    assert any(notice in w.value.replace("\\", "") for w in at.warning), [
        w.value for w in at.warning
    ]


def test_a_notice_names_the_allowed_steps_once(store_env: FixtureStore) -> None:
    # It once read "... not a step of this episode (1-2) (1, 2)".
    at = open_page("replay/page.py", episode=str(store_env.query_episode), step="99")
    (notice,) = [w.value.replace("\\", "") for w in at.warning]
    assert notice == "step='99' in the link is not a step of this episode (1-3); showing 1."


@pytest.mark.parametrize(
    ("page", "query"),
    [
        ("compare/page.py", {"run": ["1", "2"]}),
        ("episodes/page.py", {"run": "1", "tmin": "0", "tmax": "9", "cursor": []}),
        ("replay/page.py", {"episode": "1", "step": "1", "from": "run=1"}),
        ("groups/page.py", {"run": "1", "question": "q", "group": "0"}),
        ("training/page.py", {"run": "1", "question": "q"}),
        ("question_map/page.py", {"run": ["1", "2"], "shared": "0"}),
        (None, {"run": ["1", "2"]}),
    ],
)
def test_a_pages_own_parameters_are_not_called_unknown(
    store_env: FixtureStore, page: str | None, query: dict[str, str | list[str]]
) -> None:
    at = open_page(page, **query)
    assert not [w.value for w in at.warning if "not a parameter of this page" in w.value]


def test_runs_typed_with_commas_are_each_chosen(store_env: FixtureStore) -> None:
    at = open_page("compare/page.py", run=f"{store_env.run_a},{store_env.run_b}")
    assert at.multiselect[0].value == [store_env.run_a, store_env.run_b]
    assert not [w.value for w in at.warning if "link" in w.value]
    at = open_page("episodes/page.py", outcome="wrong,correct")
    assert at.multiselect(key="ep_outcomes").value == ["wrong", "correct"]


def test_a_parameter_the_page_does_not_take_goes_at_the_users_next_change(
    store_env: FixtureStore,
) -> None:
    at = open_page("compare/page.py", runs="1,2")
    assert any("runs= in the link" in w.value for w in at.warning)
    at.multiselect[0].set_value([store_env.run_a, store_env.run_b]).run()
    assert "runs" not in at.query_params
    assert at.query_params["run"] == [str(store_env.run_a), str(store_env.run_b)]
    assert not [w.value for w in at.warning if "link" in w.value]
