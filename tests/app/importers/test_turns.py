"""`split_turns`: a flattened multi-turn output cut into the model's turns and the replies
between them, as verl and SkyRL decode it (chat-template residue with or without its special
tokens)."""

from __future__ import annotations

import pytest

from app.importers.turns import split_turns


def _pairs(text: str) -> list[tuple[str, str | None]]:
    return [(t.output, t.reply) for t in split_turns(text)]


def test_text_without_a_reply_is_one_turn_without_its_end_marks() -> None:
    assert _pairs("<solution>SELECT 1</solution><|im_end|>\n") == [
        ("<solution>SELECT 1</solution>", None)
    ]


_CHATML = ("<|im_end|>\n<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n")


@pytest.mark.parametrize(
    ("user", "assistant"),
    [("\nuser\n", "\nassistant\n"), _CHATML],
    ids=["skipped special tokens", "special tokens"],
)
def test_each_reply_closes_the_turn_before_it(user: str, assistant: str) -> None:
    text = (
        f"<sql>SELECT a FROM t</sql>{user}<observation>\n| 1 |\n</observation>{assistant}"
        f"<sql>SELECT b FROM t</sql>{user}<observation>no such column: b</observation>"
        f"{assistant}<solution>SELECT a FROM t</solution>"
    )
    assert _pairs(text) == [
        ("<sql>SELECT a FROM t</sql>", "| 1 |"),
        ("<sql>SELECT b FROM t</sql>", "no such column: b"),
        ("<solution>SELECT a FROM t</solution>", None),
    ]
    # The messages a turn adds: the model's, then the reply as the next user message.
    assert split_turns(text)[0].messages == (
        {"role": "assistant", "content": "<sql>SELECT a FROM t</sql>"},
        {"role": "user", "content": "| 1 |"},
    )


def test_replies_with_only_template_residue_between_them_answer_one_turn() -> None:
    # A tool agent's turn that called two tools: verl writes both answers after it.
    text = (
        "<tool_call>a</tool_call>\n<tool_call>b</tool_call><|im_end|>\n<|im_start|>user\n"
        "<tool_response>3</tool_response><|im_end|>\n<|im_start|>user\n"
        "<tool_response>4</tool_response><|im_end|>\n<|im_start|>assistant\nIt is 7."
    )
    assert _pairs(text) == [
        ("<tool_call>a</tool_call>\n<tool_call>b</tool_call>", "3\n4"),
        ("It is 7.", None),
    ]


def test_a_rollout_that_ends_on_a_reply_has_no_empty_last_turn() -> None:
    text = "<sql>SELECT 1</sql>\nuser\n<observation>1</observation>\nassistant\n"
    assert _pairs(text) == [("<sql>SELECT 1</sql>", "1")]


_TEMPLATES = {
    "skipped special tokens": ("\nuser\n", "\nassistant\n", ""),
    "ChatML": (
        "<|im_end|>\n<|im_start|>user\n",
        "<|im_end|>\n<|im_start|>assistant\n",
        "<|im_end|>",
    ),
    "Llama 3": (
        "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n",
        "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
        "<|eot_id|>",
    ),
}


@pytest.mark.parametrize("template", _TEMPLATES, ids=list(_TEMPLATES))
def test_replies_the_template_frames_as_user_turns_close_the_turn_before_them(
    template: str,
) -> None:
    # A multi-turn rollout_func's completion as TRL logs it (its ids decoded) and verl's
    # interactions: the environment answers in user turns, with no tag around the reply.
    user, assistant, end = _TEMPLATES[template]
    text = (
        f"QUERY SELECT name FROM singer{user}name\nAnn\nBo{assistant}"
        f"QUERY SELECT x FROM singer{user}Error: no such column: x{assistant}ANSWER Ann{end}"
    )
    assert _pairs(text) == [
        ("QUERY SELECT name FROM singer", "name\nAnn\nBo"),
        ("QUERY SELECT x FROM singer", "Error: no such column: x"),
        ("ANSWER Ann", None),
    ]
    # Ending on a reply and the next generation prompt: no empty last turn.
    assert _pairs(f"QUERY SELECT 1{user}1{assistant}") == [("QUERY SELECT 1", "1")]


def test_a_reply_line_that_reads_user_is_the_replys_text() -> None:
    # A query's result can hold the value `user`: within a reply, only the model's next turn
    # ends it.
    text = "QUERY SELECT role FROM staff\nuser\nrole\nuser\nadmin\nassistant\nANSWER user"
    assert _pairs(text) == [
        ("QUERY SELECT role FROM staff", "role\nuser\nadmin"),
        ("ANSWER user", None),
    ]


@pytest.mark.parametrize(
    "text",
    [
        "QUERY SELECT user FROM t\nANSWER user",  # `user` inside a line is no turn
        "\nuser\nWhat is it?\nassistant\nANSWER 1",  # a user turn before any model turn
        "ANSWER 1\nsystem\nYou are...",  # a system turn is no environment's reply
    ],
    ids=["a word", "a reply first", "a system turn"],
)
def test_text_that_is_no_model_turn_and_its_replies_is_one_turn(text: str) -> None:
    assert _pairs(text) == [(text, None)]
