"""`rollscope compare` of runs on two Spider-layout files with the same stem and no ids: each
question's id is its position (`dev-0000`...), so an id can name another question in each
run. Those ids are left out of the pairing, and the command says so (all of them, as JSON)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.benchmark import QUESTIONS
from tests.support.cli import rollscope
from tests.support.same_stem import SPIDER, oracle_runs_of_same_stem


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Runs `full` (the file), `swapped` (its first two questions swapped) and `rotated`
    (every question one place on), each a dev.json of its own folder, played by the oracle."""
    root = tmp_path_factory.mktemp("ids-apart")
    files = {
        "full": SPIDER,
        "swapped": [SPIDER[1], SPIDER[0], *SPIDER[2:]],
        "rotated": SPIDER[1:] + SPIDER[:1],
    }
    return oracle_runs_of_same_stem(root, files)


def test_ids_naming_other_questions_are_left_out_of_the_pairing(store: Path) -> None:
    done = rollscope("compare", "full", "swapped", "--store", store, "--json")
    assert done.returncode == 0, done.stderr
    (vs,) = json.loads(done.stdout)["runs"]
    assert vs["questions"] == len(QUESTIONS) - 2  # dev-0000 and dev-0001 ask other questions
    assert (vs["accuracy"], vs["baseline_accuracy"], vs["difference"]) == (1.0, 1.0, 0.0)
    first, second = QUESTIONS[0][1], QUESTIONS[1][1]
    assert vs["question_ids_apart"] == [
        {"question_id": "dev-0000", "question": second, "baseline_question": first},
        {"question_id": "dev-0001", "question": first, "baseline_question": second},
    ]


def test_the_terminal_says_which_ids_it_left_out(store: Path) -> None:
    done = rollscope("compare", "full", "swapped", "--store", store)
    assert done.returncode == 0, done.stderr
    shown = " ".join(done.stdout.split())  # as the terminal's width wrapped it
    assert "questions both played 4" in shown
    assert (
        "2 question ids name different questions in swapped (#2) and full (#1) (the first: "
        f"dev-0000, '{QUESTIONS[1][1]}' against '{QUESTIONS[0][1]}'): left out; give the "
        "questions ids of their own"
    ) in shown


def test_runs_whose_every_shared_id_names_another_question_share_none(store: Path) -> None:
    done = rollscope("compare", "full", "rotated", "--store", store)
    assert done.returncode == 2
    assert done.stdout == ""
    message = " ".join(done.stderr.split())
    assert "rotated (#3) and the baseline full (#1) share no finished question" in message
    assert f"{len(QUESTIONS)} question ids name different questions" in message
