"""Link parameters read as a person types them."""

from __future__ import annotations

from app.dashboard.components import params


def test_a_flag_reads_on_and_off_in_the_words_its_notice_uses() -> None:
    flag = params.flag("shared", "on or off")
    for value, meant in (("1", True), ("on", True), ("ON ", True), ("0", False), ("off", False)):
        assert flag.parse([value]) == (meant, [])
    assert flag.parse(["maybe"]) == (
        False,
        ["shared='maybe' in the link is not on or off (1 or 0); ignored."],
    )
