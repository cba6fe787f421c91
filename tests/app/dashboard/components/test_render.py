"""Model and dataset text shown as text: markdown escaped."""

from __future__ import annotations

from app.dashboard.components.render import escape_markdown
from app.pictured import picture_controls


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
    kept = "line\n\ttab é 中 \u2028 <b> \xa0"
    assert picture_controls(kept) == kept
    # C1 controls (CSI is U+009B) have no picture
    assert picture_controls("\x80\x9b31m\x9f") == "\ufffd\ufffd31m\ufffd"
    # a Windows line end is a line end; a carriage return alone is pictured
    assert picture_controls("a\r\nb\rc") == "a\nb␍c"


def test_bidirectional_overrides_are_named_not_obeyed() -> None:
    # U+202E would draw "evil" as "live": the text shown must read as the text stored.
    assert picture_controls("rtl:\u202eevil\u202c") == "rtl:[U+202E]evil[U+202C]"
    assert picture_controls("\u2066x\u2069 \u202a") == "[U+2066]x[U+2069] [U+202A]"
    assert picture_controls("\u200d\u200f") == "\u200d\u200f"  # joiners and marks stay


def _brief_of_steps() -> None:
    """A page showing three steps in brief: a QUERY, an output run as a QUERY without an
    action line, and an imported turn that took no action."""
    from app.dashboard.components.render import show_step_action
    from tests.support.records import step

    show_step_action(step("q", 0, 1, raw="QUERY: SELECT 1", argument="SELECT 1"))
    show_step_action(step("q", 0, 2, raw="  select name ", argument="select name", parsed=False))
    show_step_action(step("q", 0, 3, raw="Let me think.", action=None, argument=None, parsed=False))


def test_steps_in_brief_say_which_action_each_took() -> None:
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_function(_brief_of_steps).run()
    assert not at.exception
    assert [c.value for c in at.caption] == [
        "QUERY · reward +0.000",
        "QUERY · reward +0.000 · unparsed",  # run as a QUERY all the same
        "no SQL · reward +0.000",  # nothing ran it: no action
    ]
    # What each acted on: the SQL, the text run, and the output of the turn without one.
    assert [c.value for c in at.code] == ["SELECT 1", "select name", "Let me think."]


def _results_of_steps() -> None:
    """The results of steps: an ANSWER rollscope graded, an imported last turn that nothing
    answered (NULL), an earlier one, and a query whose reply was empty."""
    from app.dashboard.components.render import show_step_result
    from tests.support.records import step

    show_step_result(step("q", 0, 3, action="ANSWER", observation="Answer submitted: correct.",
                          done=True))  # fmt: skip
    show_step_result(step("q", 1, 3, action="ANSWER", observation=None, done=True))
    show_step_result(step("q", 1, 2, action="QUERY", observation=None))
    show_step_result(step("q", 1, 1, action="QUERY", observation=""))


def test_a_step_nothing_answered_says_so_not_that_the_reply_was_empty() -> None:
    from streamlit.testing.v1 import AppTest

    from app.dashboard.components.render import NO_REPLY

    at = AppTest.from_function(_results_of_steps).run()
    assert not at.exception
    assert [c.value for c in at.code] == ["Answer submitted: correct."]
    assert [c.value for c in at.caption] == [NO_REPLY, "(no reply)", "(empty)"]
