"""Model and dataset text shown as text: markdown escaped, chat prompts split by message."""

from __future__ import annotations

from app.dashboard.components.render import chat_messages, escape_markdown


def test_markdown_escaping_and_chat_prompts() -> None:
    assert escape_markdown("<b>x</b> **y**") == r"\<b\>x\</b\> \*\*y\*\*"
    assert chat_messages('[{"role": "user", "content": "hi"}]') == [("user", "hi")]
    assert chat_messages("plain text prompt") is None
    assert chat_messages('{"role": "user"}') is None
