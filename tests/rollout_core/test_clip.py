"""Values from outside shown in a one-line message: cut to a width, whatever their size."""

from __future__ import annotations

from typing import Any

from rollout_core.clip import clip, clip_repr, grouped


def _nested(levels: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(levels - 1):
        value = [value]
    return value


def test_text_past_the_width_ends_in_dots_within_it() -> None:
    assert clip("abcdef", 6) == "abcdef"
    assert clip("abcdefg", 6) == "abc..."


def test_a_value_is_shown_as_repr_shows_it_up_to_the_width() -> None:
    assert clip_repr("x", 40) == "'x'"
    assert clip_repr([1, 2.5, None], 40) == "[1, 2.5, None]"
    assert clip_repr("x" * 1_000_000, 10) == "'xxxxxx..."


def test_values_repr_cannot_show_are_shown_by_their_shape() -> None:
    # repr() ran out of stack on the first and refused the digits of the second.
    assert clip_repr(_nested(5_000), 40) == "[[[[[...]]]]]"
    assert clip_repr(10**5_000, 40) == "a number of 16,610 bits"
    assert clip_repr([-(10**5_000)], 40) == "[-a number of 16,610 bits]"


def test_a_whole_number_is_grouped_or_sized() -> None:
    assert grouped(2**64) == "18,446,744,073,709,551,616"
    assert grouped(-(2**300)) == "-a number of 301 bits"
