"""Each generated token's piece of the decoded text, so that the pieces join to it exactly.

Decoding token by token is not decoding the sequence: byte-level tokens may hold part of a
character, and some decoders drop or add spaces depending on the neighbours. Three ways, the
cheapest first, each checked by joining the pieces and comparing with the text:
1. each token decoded alone (remembered per id: a dictionary look-up per token), which is exact
   for byte-level BPE on whole characters, the usual case;
2. what a token adds to a few tokens of left context before it (one batched decode per call),
   for decoders that treat a sequence's first token apart (SentencePiece's leading space);
3. what a token adds to the whole prefix before it, exact by construction: each token gets the
   part of the text its prefix adds (a character split over tokens goes to the token that
   completes it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

CONTEXT_TOKENS = 6
"""Tokens of left context decoded with each token; decoders look at most a few tokens back."""

Decoder = Callable[[list[list[int]]], list[str]]


def batch_decoder(tokenizer: Any) -> Decoder:
    """Decode many id lists at once, special tokens skipped (one Rust call when available)."""
    from tokenizers import Tokenizer

    backend = getattr(tokenizer, "backend_tokenizer", None)
    if isinstance(backend, Tokenizer):
        return lambda seqs: backend.decode_batch(seqs, skip_special_tokens=True)
    return lambda seqs: [str(t) for t in tokenizer.batch_decode(seqs, skip_special_tokens=True)]


class TokenPieces:
    """Splits decoded texts into their tokens' pieces for one tokenizer."""

    def __init__(self, tokenizer: Any) -> None:
        self.decode = batch_decoder(tokenizer)
        self._alone: dict[int, str] = {}
        """Each id decoded by itself, filled as ids are met (at most the vocabulary)."""

    def __call__(self, rows: Sequence[list[int]], texts: Sequence[str]) -> list[list[str]]:
        """Per row, one piece per id; the pieces of row i concatenate to `texts[i]`."""
        new = list({i for ids in rows for i in ids if i not in self._alone})
        if new:
            self._alone.update(zip(new, self.decode([[i] for i in new]), strict=True))
        out: list[list[str]] = []
        redo: list[int] = []
        for n, (ids, text) in enumerate(zip(rows, texts, strict=True)):
            pieces = [self._alone[i] for i in ids]
            out.append(pieces)
            if "".join(pieces) != text:
                redo.append(n)
        if redo:
            fixed = token_pieces(self.decode, [rows[n] for n in redo], [texts[n] for n in redo])
            for n, pieces in zip(redo, fixed, strict=True):
                out[n] = pieces
        return out


def token_pieces(
    decode: Decoder, rows: Sequence[list[int]], texts: Sequence[str]
) -> list[list[str]]:
    """Per row, one piece per id, from each id decoded after a few tokens of left context."""
    windows: list[list[int]] = []
    for ids in rows:
        for k in range(len(ids)):
            start = max(0, k - CONTEXT_TOKENS)
            windows += [ids[start:k], ids[start : k + 1]]
    decoded = decode(windows) if windows else []
    out: list[list[str]] = []
    at = 0
    for ids, text in zip(rows, texts, strict=True):
        pairs = decoded[at : at + 2 * len(ids)]
        at += 2 * len(ids)
        pieces = [a[len(b) :] for b, a in zip(pairs[::2], pairs[1::2], strict=True)]
        exact = all(a.startswith(b) for b, a in zip(pairs[::2], pairs[1::2], strict=True))
        out.append(pieces if exact and "".join(pieces) == text else _by_prefix(decode, ids, text))
    return out


def _by_prefix(decode: Decoder, ids: list[int], text: str) -> list[str]:
    """Exact pieces: token k gets the text between what the prefixes up to k-1 and k share with
    the full text (a partial character goes to the token that completes it)."""
    prefixes = decode([ids[:k] for k in range(1, len(ids))]) if len(ids) > 1 else []
    pieces, done = [], 0
    for prefix in prefixes:
        shared = len(prefix) if text.startswith(prefix) else _common_length(prefix, text)
        end = max(done, shared)
        pieces.append(text[done:end])
        done = end
    if ids:
        pieces.append(text[done:])
    return pieces


def _common_length(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def trim_pieces(pieces: list[str], text: str) -> tuple[str, ...]:
    """The pieces of `text.strip()`: whitespace trimmed from the ends is cut from its pieces."""
    start = len(text) - len(text.lstrip())
    end = len(text.rstrip())
    if start >= end:
        return ("",) * len(pieces)
    out, pos = [], 0
    for piece in pieces:
        lo, hi = pos, pos + len(piece)
        pos = hi
        lo, hi = min(max(lo, start), end), min(max(hi, start), end)
        out.append(text[lo:hi])
    return tuple(out)
