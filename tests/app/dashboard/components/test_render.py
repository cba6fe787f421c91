"""Model and dataset text shown as text: markdown escaped."""

from __future__ import annotations

from app.dashboard.components.render import escape_markdown


def test_markdown_escaping() -> None:
    assert escape_markdown("<b>x</b> **y**") == r"\<b\>x\</b\> \*\*y\*\*"
