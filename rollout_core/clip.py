"""Text cut to a width for a message: a value from outside (a path, an id, a host) may be as
long as its sender made it, and a one-line error must stay one line a person can read."""

from __future__ import annotations

import reprlib


def clip(text: str, width: int) -> str:
    """`text` when it fits in `width` characters, else its start and "..." in that width."""
    return text if len(text) <= width else text[: width - 3] + "..."


class _Shown(reprlib.Repr):
    """repr() of a value as a message shows it: lists thousands deep run repr() out of
    stack, and a whole number past 4,300 digits makes it raise ValueError."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel = 4
        self.maxstring = self.maxlong = self.maxother = 400  # clip() cuts the rest

    def repr_int(self, x: int, level: int) -> str:
        return _size(x) if x.bit_length() > 10_000 else super().repr_int(x, level)


_SHOWN = _Shown()


def clip_repr(value: object, width: int) -> str:
    """`repr(value)` clipped to `width`, read no deeper than a message shows."""
    return clip(_SHOWN.repr(value), width)


def grouped(number: int) -> str:
    """A whole number with its thousands grouped (`1,000`), or its size where it has more
    digits than a message shows."""
    return _size(number) if number.bit_length() > 200 else f"{number:,}"


def _size(number: int) -> str:
    return f"{'-' if number < 0 else ''}a number of {number.bit_length():,} bits"
