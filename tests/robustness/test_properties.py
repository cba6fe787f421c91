"""Properties of the parser, the grader and the environment over generated inputs."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rollout_core import rewards
from rollout_core.actions import SQLAction
from rollout_core.datasets import Dataset, load_dataset
from rollout_core.environment import SQLEnvironment
from rollout_core.grading import GoldResult, _grade, format_answer, grade_answer
from rollout_core.parse import parse_model_output
from rollout_core.records import ACTION_KINDS
from tests.support.benchmark import make_benchmark

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Text a model might write: any characters, with newlines, fences and action words likely.
_pieces = st.sampled_from(
    ["\n", "\n\n", "```", "```sql\n", "QUERY", "ANSWER", "DESCRIBE", "SAMPLE", ":", "**",
     " ", "`", "SELECT 1", "\r\n", "\t", "query:", "answer ", ";"]
)  # fmt: skip
model_text = st.lists(st.one_of(st.text(max_size=20), _pieces), max_size=12).map("".join)


# -- parser ---------------------------------------------------------------------------------


@SETTINGS
@given(model_text)
def test_parser_never_raises_and_returns_a_known_action(text: str) -> None:
    action = parse_model_output(text)
    assert action.action_type in ACTION_KINDS
    if not action.parsed:
        assert action.action_type == "QUERY" and action.argument == text.strip()
    else:
        assert action.argument and action.argument == action.argument.strip()
        assert not action.argument.startswith("```") and not action.argument.endswith("```")


# Chatter: a line that is no action even when a continuation line follows it (`QUERY` alone
# is no action, but `QUERY` then `0` is one).
_plain_line = st.text(
    st.characters(blacklist_categories=["Cs", "Zl", "Zp", "Cc"]), max_size=30
).filter(lambda line: not parse_model_output(f"{line}\nx").parsed and "`" not in line)
_table = st.from_regex(r"[A-Za-z][A-Za-z0-9_]{0,15}", fullmatch=True)
_free = st.text(
    st.characters(whitelist_categories=["L", "N", "Zs"], whitelist_characters="*(),=<>'.%-+"),
    min_size=1,
    max_size=40,
).filter(lambda s: s.strip() and not s.strip().startswith(("**", "__", ":")))


@SETTINGS
@given(
    prefix=st.lists(_plain_line, max_size=5),
    kind=st.sampled_from(ACTION_KINDS),
    table=_table,
    free=_free,
    separator=st.sampled_from([" ", ": ", " : ", ":"]),
    case=st.sampled_from([str.upper, str.lower, str.title]),
)
def test_action_after_chatter_is_found(
    prefix: list[str], kind: str, table: str, free: str, separator: str, case: object
) -> None:
    argument = table if kind in ("DESCRIBE", "SAMPLE") else free.strip()
    line = f"{case(kind)}{separator}{argument}"  # type: ignore[operator]
    text = "\n".join([*prefix, line, "", "trailing words"])
    action = parse_model_output(text)
    assert (action.action_type, action.argument, action.parsed) == (kind, argument, True)


@SETTINGS
@given(kind=st.sampled_from(["QUERY", "ANSWER"]), body=_free, lang=st.sampled_from(["", "sql"]))
def test_fenced_argument_loses_its_fences(kind: str, body: str, lang: str) -> None:
    for text in (f"{kind}:\n```{lang}\n{body}\n```", f"{kind} ```{body}```", f"{kind} `{body}`"):
        action = parse_model_output(text)
        assert (action.action_type, action.argument) == (kind, body.strip()), text


# -- grader ---------------------------------------------------------------------------------

_int64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
_cell = st.one_of(
    st.none(),
    _int64,
    st.floats(allow_nan=False),
    st.text(max_size=12),
    st.binary(max_size=8),
)
_any_cell = st.one_of(_cell, st.floats(), st.booleans())


@st.composite
def gold_results(draw: st.DrawFn, cells: st.SearchStrategy[object] = _cell) -> GoldResult:
    width = draw(st.integers(1, 3))
    rows = draw(st.lists(st.tuples(*[cells] * width), max_size=6))
    return GoldResult([f"c{i}" for i in range(width)], rows, draw(st.booleans()))


@SETTINGS
@given(answer=st.one_of(model_text, st.text()), gold=gold_results(_any_cell))
def test_grader_never_raises(answer: str, gold: GoldResult) -> None:
    assert grade_answer(answer, gold) in (True, False)
    _grade(answer, gold)  # the inner grader too: a swallowed exception would be a wrong grade


@SETTINGS
@given(gold=gold_results())
def test_canonical_answer_grades_correct(gold: GoldResult) -> None:
    answer = format_answer(gold.rows, len(gold.columns))
    assert grade_answer(answer, gold), answer


@SETTINGS
@given(gold=gold_results(), data=st.data())
def test_any_row_order_grades_correct_when_unordered(gold: GoldResult, data: st.DataObject) -> None:
    unordered = GoldResult(gold.columns, gold.rows, ordered=False)
    shuffled = data.draw(st.permutations(gold.rows))
    assert grade_answer(format_answer(shuffled, len(gold.columns)), unordered)


def test_infinite_gold_values_grade() -> None:
    """SQLite returns inf for overflowing REAL arithmetic (1e308 * 10)."""
    gold = GoldResult(["a", "b"], [(math.inf, -math.inf)], ordered=False)
    assert grade_answer(format_answer(gold.rows, 2), gold)


# -- environment ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    questions, db_dir = make_benchmark(tmp_path_factory.mktemp("props"))
    return load_dataset(questions, db_dir)


_arguments = st.one_of(
    st.sampled_from(
        ["singer", "SINGER", "concert", "nope", "", "  ", "SELECT COUNT(*) FROM singer",
         "SELECT name FROM singer", "SELECT * FROM concert", "SELECT 1/0", "DROP TABLE singer",
         "5", "6", "[]", "Ada, Cy", "null", "SELECT name FROM singer WHERE country = 'France'"]
    ),
    st.text(max_size=30),
)  # fmt: skip
_actions = st.builds(SQLAction, st.sampled_from(ACTION_KINDS), _arguments, st.booleans())


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    question=st.sampled_from(["q-count", "q-france", "q-oldest", "q-avg", "q-join", "q-empty"]),
    actions=st.lists(_actions, min_size=1, max_size=12),
    budget=st.integers(1, 6),
)
def test_environment_survives_any_action_sequence(
    dataset: Dataset, question: str, actions: list[SQLAction], budget: int
) -> None:
    with SQLEnvironment(dataset=dataset, step_budget=budget) as env:
        _play(env, question, actions, budget)


def _play(env: SQLEnvironment, question: str, actions: list[SQLAction], budget: int) -> None:
    env.reset(question_id=question)
    progress = 0.0
    for action, n in zip(actions, itertools.count(1), strict=False):
        if env.state.done:
            with pytest.raises(RuntimeError, match="episode is over"):
                env.step(action)
            break
        obs = env.step(action)
        assert obs.step == n and obs.steps_left == budget - n
        assert rewards.ERROR_PENALTY <= obs.reward <= rewards.ANSWER_CORRECT + 0.1
        progress += max(0.0, obs.reward) if action.action_type == "QUERY" else 0.0
        assert obs.done == (env.state.done)
    state = env.state
    assert state.cumulative_progress <= rewards.PROGRESS_SCALE + 1e-9
    assert progress <= rewards.PROGRESS_SCALE + 1e-9
    assert state.step_count <= budget
    assert state.outcome in (None, "correct", "wrong", "budget_exhausted")
