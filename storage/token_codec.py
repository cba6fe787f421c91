"""A step's TokenTrace as one compact blob: about 6-10 bytes a token instead of ~60 in JSON.

Layout (little-endian): b"TT1", a flags byte, the token count n (uint32); then piece lengths
in characters (uint16[n]; the pieces are cut from the stored raw output, so their text is not
stored twice), log-probabilities (float16[n]) when flag 1, entropies (float16[n]) when flag 2,
ids (int32[n]) when flag 4, and the top alternatives as UTF-8 JSON to the end when flag 8.
float16 keeps about three significant digits: enough to shade and average, and the exact
values stay with the trainer that asked for them.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Sequence
from statistics import fmean
from typing import Any

from rollout_core.records import TokenTrace

_MAGIC = b"TT1"
_HEADER = struct.Struct("<3sBI")
_LOGPROBS, _ENTROPIES, _IDS, _TOP = 1, 2, 4, 8
# A piece longer than uint16 allows cannot come from one token; such a trace is not stored.
_MAX_PIECE = 0xFFFF
# struct's formats, so the codec needs no numpy: a CLI call imports this module, and numpy
# was a tenth of its start-up.
_LENGTH, _HALF, _ID = "H", "e", "i"
_INT32 = range(-(2**31), 2**31)


class TokenTraceError(ValueError):
    """A blob that is not a token trace of this layout."""


def encode_trace(trace: TokenTrace, text: str) -> bytes | None:
    """The blob for a trace whose pieces join to `text`; None when they do not (kept out)."""
    pieces = trace.text
    if "".join(pieces) != text or any(len(p) > _MAX_PIECE for p in pieces):
        return None
    n = len(pieces)
    flags = 0
    parts = [struct.pack(f"<{n}{_LENGTH}", *map(len, pieces))]
    for flag, values in ((_LOGPROBS, trace.logprobs), (_ENTROPIES, trace.entropies)):
        if values is not None and len(values) == n:
            flags |= flag
            parts.append(_halves(values))
    ids = trace.ids
    if ids is not None and len(ids) == n and all(int(i) in _INT32 for i in ids):
        flags |= _IDS
        parts.append(struct.pack(f"<{n}{_ID}", *ids))
    if trace.top is not None and len(trace.top) == n:
        flags |= _TOP
        parts.append(json.dumps(trace.top, ensure_ascii=False).encode())
    return _HEADER.pack(_MAGIC, flags, n) + b"".join(parts)


def decode_trace(blob: bytes, text: str) -> TokenTrace:
    """The trace stored in `blob`, its pieces cut from the step's raw output `text`."""
    if len(blob) < _HEADER.size:
        raise TokenTraceError("token trace blob is too short")
    magic, flags, n = _HEADER.unpack_from(blob)
    if magic != _MAGIC:
        raise TokenTraceError(f"not a token trace (starts with {magic!r})")
    offset = _HEADER.size
    lengths, offset = _unpack(blob, offset, n, _LENGTH)
    pieces: list[str] = []
    start = 0
    for length in lengths:
        pieces.append(text[start : start + length])
        start += length
    columns: dict[int, tuple[float, ...]] = {}
    for flag, code in ((_LOGPROBS, _HALF), (_ENTROPIES, _HALF), (_IDS, _ID)):
        if flags & flag:
            columns[flag], offset = _unpack(blob, offset, n, code)
    top = None
    if flags & _TOP:
        top = tuple(
            tuple((str(t), float(lp)) for t, lp in alts) for alts in json.loads(blob[offset:])
        )
    ids = columns.get(_IDS)
    return TokenTrace(
        text=tuple(pieces),
        logprobs=columns.get(_LOGPROBS),
        entropies=columns.get(_ENTROPIES),
        ids=None if ids is None else tuple(int(i) for i in ids),
        top=top,
    )


def trace_means(trace: TokenTrace | None) -> tuple[float | None, float | None]:
    """(mean log-probability, mean entropy) of a trace's tokens, None where not recorded."""
    if trace is None:
        return None, None
    lp = fmean(trace.logprobs) if trace.logprobs else None
    ent = fmean(trace.entropies) if trace.entropies else None
    return lp, ent


def _halves(values: Sequence[float]) -> bytes:
    """Values as float16, rounded to nearest; a value past float16's range becomes an infinity
    of its sign, as a cast would make it (struct refuses it)."""
    try:
        return struct.pack(f"<{len(values)}{_HALF}", *values)
    except OverflowError:
        # 65520 is where rounding to float16 reaches infinity; NaN compares False and stays.
        clamped = [math.copysign(math.inf, v) if abs(v) >= 65520 else v for v in values]
        return struct.pack(f"<{len(values)}{_HALF}", *clamped)


def _unpack(blob: bytes, offset: int, n: int, code: str) -> tuple[tuple[Any, ...], int]:
    fmt = struct.Struct(f"<{n}{code}")
    if offset + fmt.size > len(blob):
        raise TokenTraceError("token trace blob is truncated")
    return fmt.unpack_from(blob, offset), offset + fmt.size
