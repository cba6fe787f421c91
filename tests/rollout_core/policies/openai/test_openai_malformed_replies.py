"""Replies a server sends with HTTP 200 that are no usable chat completion (a web page, a choice
without its message, odd content or token counts): one line naming the reply, or the part
that is usable kept, never an AttributeError or a count stored as given."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from rollout_core.policies.base import Completion, PolicyError, PolicyRequest
from rollout_core.policies.openai.policy import OpenAIPolicy
from rollout_core.records import EpisodeKey, Question
from rollout_core.settings import EndpointSettings
from tests.support.benchmark import make_benchmark
from tests.support.cli import rollscope
from tests.support.fake_chat_server import Answer, FakeChatServer, chat_completion


@pytest.fixture()
def server() -> Iterator[FakeChatServer]:
    fake = FakeChatServer().start()
    yield fake
    fake.close()


def generate_one(server: FakeChatServer, answer: Answer) -> Completion:
    """The completion of one request whose reply is `answer` (the connection probe passes)."""
    policy = OpenAIPolicy(server.base_url, EndpointSettings(model=server.model, retry_seconds=2))
    server.answer = lambda request: answer
    try:
        request = PolicyRequest(
            messages=[{"role": "user", "content": QUESTION.question}],
            question=QUESTION,
            db_path=Path("unused.sqlite"),
            step_no=1,
            seed=1,
            episode=EpisodeKey(QUESTION.id, 0),
        )
        return policy.generate([request])[0]
    finally:
        policy.close()


QUESTION = Question("q1", "concerts", "How many singers are there?", "SELECT COUNT(*) FROM singer")
NO_MESSAGE = {"id": "x", "object": "chat.completion", "choices": [{"index": 0}]}


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        (b"<html><body>502 Bad Gateway</body></html>", "its body is not a JSON chat completion"),
        (NO_MESSAGE, "its first choice has no message"),
        ({"id": "x", "choices": ["QUERY SELECT 1"]}, "its first choice has no message"),
        ({"foo": "bar"}, "the server's reply has no choices"),
        (chat_completion(42), "its message content is neither text nor text parts: '42'"),
        (chat_completion([{"type": "text", "text": 7}]), "neither text nor text parts"),
        (chat_completion(["ANSWER 5"]), "neither text nor text parts: \"['ANSWER 5']\""),
    ],
    ids=[
        "html",
        "no message",
        "choice not an object",
        "no choices",
        "number",
        "part not text",
        "no parts",
    ],
)
def test_an_unusable_reply_is_one_line_naming_it(
    server: FakeChatServer, answer: Answer, problem: str
) -> None:
    with pytest.raises(PolicyError) as err:
        generate_one(server, answer)
    message = str(err.value)
    assert message.startswith(f"{server.base_url} sent an unusable reply: ")
    assert problem in message and "\n" not in message


def test_content_as_a_list_of_parts_is_its_text_parts_joined(server: FakeChatServer) -> None:
    parts = [
        {"type": "text", "text": "QUERY SELECT "},
        {"type": "refusal", "refusal": "no"},
        {"type": "text", "text": "COUNT(*) FROM singer"},
    ]
    completion = generate_one(server, chat_completion(parts))
    assert completion.text == "QUERY SELECT COUNT(*) FROM singer"
    assert (completion.tokens_in, completion.tokens_out) == (10, 3)


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        ("lots", None),
        (-5, None),
        (2.5, None),
        (2**40, None),
        ([3], None),
        (12.0, 12),
        (0, 0),
        (7, 7),
    ],
)
def test_a_token_count_that_is_no_whole_number_is_unknown(
    server: FakeChatServer, given: object, kept: int | None
) -> None:
    usage = {
        "prompt_tokens": given,
        "completion_tokens": given,
        "prompt_tokens_details": {"cached_tokens": given},
    }
    completion = generate_one(server, chat_completion("ANSWER 5", usage=usage))
    assert completion.text == "ANSWER 5"
    assert (completion.tokens_in, completion.tokens_out, completion.cached_tokens) == (kept,) * 3


@pytest.mark.parametrize("given", [True, False, float("nan"), float("inf"), "7", None, -1])
def test_a_count_is_a_whole_number_or_none(given: object) -> None:
    from rollout_core.policies.openai.replies import token_count

    assert token_count(given) is None


def test_usage_that_is_no_object_gives_unknown_counts(server: FakeChatServer) -> None:
    completion = generate_one(server, chat_completion("ANSWER 5", usage="n/a"))
    assert (completion.tokens_in, completion.tokens_out, completion.cached_tokens) == (None,) * 3


# -- as `rollscope run` meets them ------------------------------------------------------------


def _run(server: FakeChatServer, tmp_path: Path, name: str) -> Any:
    questions, db_dir = make_benchmark(tmp_path / "bench")
    return rollscope(
        "run", "--policy", f"openai:{server.base_url}", "--model", server.model,
        "--questions", questions, "--db-dir", db_dir, "--step-budget", "2", "--name", name,
        "--retry-deadline", "2", "--store", tmp_path / "store.db", "--quiet",
    )  # fmt: skip


def test_a_run_given_a_web_page_fails_in_one_line(server: FakeChatServer, tmp_path: Path) -> None:
    page = b"<html>oops</html>"
    server.answer = lambda r: server.scripted(r) if r.get("max_tokens") == 1 else page
    res = _run(server, tmp_path, "html")
    assert res.returncode == 1, res.stdout + res.stderr
    assert "Traceback" not in res.stderr and "AttributeError" not in res.stderr
    assert "sent an unusable reply: its body is not a JSON chat completion" in res.stderr
    with closing(sqlite3.connect(tmp_path / "store.db")) as conn:
        status, error = conn.execute("SELECT status, error FROM runs").fetchone()
    assert status == "failed" and "unusable reply" in error and "\n" not in error


def test_a_run_stores_nonsense_token_counts_as_unknown(
    server: FakeChatServer, tmp_path: Path
) -> None:
    usage = {"prompt_tokens": "lots", "completion_tokens": -5}
    server.answer = lambda r: chat_completion(server.script_text(r), usage=usage)
    res = _run(server, tmp_path, "bad-usage")
    assert res.returncode == 0, res.stderr
    with closing(sqlite3.connect(tmp_path / "store.db")) as conn:
        counts = conn.execute(
            "SELECT typeof(tokens_in), typeof(tokens_out) FROM steps WHERE replayed = 0"
        ).fetchall()
    assert counts and set(counts) == {("null", "null")}


def test_a_lone_surrogate_in_a_reply_is_one_steps_odd_output(
    server: FakeChatServer, tmp_path: Path
) -> None:
    # JSON may escape a lone surrogate ("\ud800"), which has no UTF-8 form: kept in the
    # conversation, the next turn's request failed to encode and the run failed.
    script = ("QUERY SELECT 'a\ud800b'", "ANSWER 5")
    server.answer = lambda r: chat_completion(script[min(_turns(r), 1)])
    res = _run(server, tmp_path, "surrogate")
    assert res.returncode == 0, res.stderr
    with closing(sqlite3.connect(tmp_path / "store.db")) as conn:
        status = conn.execute("SELECT status FROM runs").fetchone()[0]
        played = conn.execute(
            "SELECT raw_output FROM steps WHERE episode_id = 1 ORDER BY step_no"
        ).fetchall()
    assert status == "completed"
    assert [r[0] for r in played] == ["QUERY SELECT 'a\ufffdb'", "ANSWER 5"]


def _turns(request: dict[str, Any]) -> int:
    """The assistant turns a request's conversation holds."""
    return sum(m.get("role") == "assistant" for m in request.get("messages", []))
