"""Model and dataset text shown as text: markdown escaped."""

from __future__ import annotations

from app.dashboard.components.render import escape_markdown, picture_controls


def test_markdown_escaping() -> None:
    assert escape_markdown("<b>x</b> **y**") == r"\<b\>x\</b\> \*\*y\*\*"
    # a question or a tag with a control character shows its picture too
    assert escape_markdown("a\x1bb") == "a␛b"


def test_control_characters_show_as_their_control_pictures() -> None:
    assert picture_controls("a\x1b[31mb\x07\x7f") == "a␛[31mb␇␡"
    assert picture_controls("\x00\x0d\x1f") == "\u2400\u240d\u241f"
    # every C0 control but newline and tab, and DEL; nothing else
    for code in range(0x20):
        shown = picture_controls(chr(code))
        assert shown == (chr(code) if chr(code) in "\n\t" else chr(0x2400 + code))
    kept = "line\n\ttab é 中 \u2028 <b> \x80"
    assert picture_controls(kept) == kept
    # a Windows line end is a line end; a carriage return alone is pictured
    assert picture_controls("a\r\nb\rc") == "a\nb␍c"
