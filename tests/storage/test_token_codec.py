"""The compact token-trace blob: what goes in comes back (to float16's precision), a few bytes a
token, and a blob that is not one is refused by name."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rollout_core.records import TokenTrace
from storage.token_codec import TokenTraceError, decode_trace, encode_trace, trace_means

_PIECES = st.lists(st.text(max_size=6), min_size=1, max_size=30)
_LOGPROB = st.floats(min_value=-60.0, max_value=0.0)
_ENTROPY = st.floats(min_value=0.0, max_value=12.0)


@st.composite
def traces(draw: st.DrawFn) -> TokenTrace:
    pieces = tuple(draw(_PIECES))
    n = len(pieces)
    column = draw(st.booleans())
    return TokenTrace(
        text=pieces,
        logprobs=tuple(draw(st.lists(_LOGPROB, min_size=n, max_size=n))),
        entropies=tuple(draw(st.lists(_ENTROPY, min_size=n, max_size=n))) if column else None,
        ids=tuple(draw(st.lists(st.integers(0, 2**31 - 1), min_size=n, max_size=n))),
        top=tuple(((draw(st.text(max_size=4)), draw(_LOGPROB)),) if i % 2 else () for i in range(n))
        if column
        else None,
    )


@given(traces())
def test_a_trace_comes_back_to_float16_precision(trace: TokenTrace) -> None:
    text = "".join(trace.text)
    blob = encode_trace(trace, text)
    assert blob is not None
    back = decode_trace(blob, text)
    assert back.text == trace.text and back.ids == trace.ids and back.top == trace.top
    assert back.logprobs is not None and trace.logprobs is not None
    # float16: 11 significant bits, so a relative error of at most 2^-11
    for got, want in zip(back.logprobs, trace.logprobs, strict=True):
        assert math.isclose(got, want, rel_tol=2**-11, abs_tol=1e-7)
    if trace.entropies is None:
        assert back.entropies is None
    else:
        assert back.entropies is not None
        for got, want in zip(back.entropies, trace.entropies, strict=True):
            assert math.isclose(got, want, rel_tol=2**-11, abs_tol=1e-7)


def test_a_token_costs_eight_bytes_with_ids_and_four_without() -> None:
    n = 200
    trace = TokenTrace(
        text=("ab",) * n, logprobs=(-0.5,) * n, entropies=(1.0,) * n, ids=tuple(range(n))
    )
    blob = encode_trace(trace, "ab" * n)
    assert blob is not None and len(blob) == 8 + n * (2 + 2 + 2 + 4)
    bare = encode_trace(TokenTrace(text=("ab",) * n, logprobs=(-0.5,) * n), "ab" * n)
    assert bare is not None and len(bare) == 8 + n * (2 + 2)


def test_pieces_that_do_not_join_to_the_output_are_not_stored() -> None:
    assert encode_trace(TokenTrace(text=("SEL", "ECT")), "SELECT 1") is None


def test_a_blob_that_is_not_a_trace_is_refused_by_name() -> None:
    with pytest.raises(TokenTraceError, match="not a token trace"):
        decode_trace(b"PNG\x00\x00\x00\x00\x00", "x")
    blob = encode_trace(TokenTrace(text=("a", "b"), logprobs=(-1.0, -2.0)), "ab")
    assert blob is not None
    with pytest.raises(TokenTraceError, match="truncated"):
        decode_trace(blob[:-1], "ab")


def test_means_are_over_the_recorded_tokens() -> None:
    trace = TokenTrace(text=("a", "b"), logprobs=(-1.0, -3.0), entropies=(0.5, 1.5))
    assert trace_means(trace) == (-2.0, 1.0)
    assert trace_means(TokenTrace(text=("a",))) == (None, None)
    assert trace_means(None) == (None, None)


def test_values_past_float16_come_back_as_infinities_and_huge_ids_are_left_out() -> None:
    # A server can report -inf, or a very negative log-probability for a forced token.
    trace = TokenTrace(
        text=("a", "b", "c"),
        logprobs=(-math.inf, -1e6, -65519.0),
        entropies=(math.nan, 70000.0, 0.5),
        ids=(1, 2**31, 3),
    )
    blob = encode_trace(trace, "abc")
    assert blob is not None
    back = decode_trace(blob, "abc")
    assert back.logprobs == (-math.inf, -math.inf, -65504.0)
    assert back.entropies is not None
    assert math.isnan(back.entropies[0]) and back.entropies[1:] == (math.inf, 0.5)
    assert back.ids is None  # not int32: left out, never wrapped round
