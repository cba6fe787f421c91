"""Fit the token pieces a backend reports to the text it returned, or give up.

Servers and engines report each generated token's text apart from the reply's text. The two
usually join exactly, but not always: an end-of-sequence token may be listed that the text
leaves out, a server may strip the reply, and a character split over byte-level tokens comes
back as replacement characters. A `TokenTrace` promises pieces that join to the text, so a
viewer can shade it token by token; when the pieces cannot be made to, there is no trace.
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence


def fit_pieces(pieces: Sequence[str], text: str) -> tuple[str, ...] | None:
    """Pieces that join to `text` exactly, one per token, or None when they cannot be fitted.

    Accepted differences: tokens past the end of the text (end-of-sequence and other special
    tokens the text leaves out) become empty pieces, and whitespace the text lacks at its
    ends is cut from the pieces that hold it.
    """
    joined = "".join(pieces)
    if joined == text:
        return tuple(pieces)
    if joined.startswith(text):
        fitted = _blank_tail(pieces, len(text))
        if fitted is not None:
            return fitted
    lead = len(joined) - len(joined.lstrip())
    if text and joined.strip() == text:  # the server stripped the reply
        return _trim(pieces, lead, lead + len(text))
    return None


def pieces_from_bytes(token_bytes: Sequence[Sequence[int]]) -> list[str]:
    """Each token's piece of the UTF-8 text its bytes spell: a character split over tokens goes
    to the token that completes it (the others get empty pieces)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    pieces = [decoder.decode(bytes(b)) for b in token_bytes]
    if pieces:
        pieces[-1] += decoder.decode(b"", final=True)
    return pieces


def _blank_tail(pieces: Sequence[str], length: int) -> tuple[str, ...] | None:
    """Empty the pieces after the first `length` characters, if a piece boundary falls there."""
    out: list[str] = []
    pos = 0
    for piece in pieces:
        if pos >= length:
            out.append("")
            continue
        if pos + len(piece) > length:
            return None  # a piece straddles the end of the text: not a whole-token tail
        out.append(piece)
        pos += len(piece)
    return tuple(out) if pos == length else None


def _trim(pieces: Sequence[str], start: int, end: int) -> tuple[str, ...]:
    """The pieces cut to the characters [start, end) of their join."""
    out, pos = [], 0
    for piece in pieces:
        lo, hi = max(pos, start), min(pos + len(piece), end)
        out.append(piece[lo - pos : hi - pos] if lo < hi else "")
        pos += len(piece)
    return tuple(out)
