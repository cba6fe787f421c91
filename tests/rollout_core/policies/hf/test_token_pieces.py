"""Token pieces join to the decoded text exactly, whatever the tokens split."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from rollout_core.policies.hf.token_pieces import TokenPieces, trim_pieces


def test_pieces_join_to_the_text_and_split_characters_go_to_the_token_completing_them(
    tiny_checkpoint: Path,
) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint)
    split = TokenPieces(tokenizer)
    texts = ["QUERY SELECT name FROM singer", "ANSWER café ☃ naïve", " DESCRIBE  singer\n"]
    rows = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    rows[1] += [tokenizer.eos_token_id]
    decoded = [tokenizer.decode(r, skip_special_tokens=True) for r in rows]
    pieces = split(rows, decoded)
    for row, text, row_pieces in zip(rows, decoded, pieces, strict=True):
        assert len(row_pieces) == len(row)
        assert "".join(row_pieces) == text
    # byte-level tokens: the snowman's three bytes are not one token of this small vocabulary
    snowman = [p for p in pieces[1] if "☃" in p]
    assert len(snowman) == 1 and "\ufffd" not in "".join(pieces[1])
    assert pieces[1][-1] == ""  # the end-of-sequence token adds no text
    assert pieces[0][0] == tokenizer.decode(rows[0][:1])


def test_a_decoder_that_drops_the_first_tokens_space() -> None:
    """SentencePiece-style: `▁world` alone decodes to `world`, after a token to ` world`."""
    vocab = {"▁Hello": 0, "▁world": 1, "!": 2, "[UNK]": 3}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Metaspace()
    backend.decoder = decoders.Metaspace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend)
    rows = [[0, 1, 2], [1, 1]]
    texts = [tokenizer.decode(r) for r in rows]
    assert texts == ["Hello world!", "world world"]
    assert TokenPieces(tokenizer)(rows, texts) == [["Hello", " world", "!"], ["world", " world"]]


@functools.cache
def _tokenizer(path: Path) -> Any:
    return AutoTokenizer.from_pretrained(path)


@settings(max_examples=40, deadline=None)
@given(ids=st.lists(st.integers(0, 399), max_size=30))
def test_any_token_sequence(tiny_checkpoint: Path, ids: list[int]) -> None:
    """Random ids, special tokens and stray bytes of multi-byte characters included."""
    tokenizer = _tokenizer(tiny_checkpoint)
    ids = [i % len(tokenizer) for i in ids]
    text = tokenizer.decode(ids, skip_special_tokens=True)
    (pieces,) = TokenPieces(tokenizer)([ids], [text])
    assert len(pieces) == len(ids) and "".join(pieces) == text


@given(st.lists(st.text(alphabet=" \nab\t", max_size=4), max_size=8))
def test_trimmed_pieces_join_to_the_stripped_text(pieces: list[str]) -> None:
    text = "".join(pieces)
    trimmed = trim_pieces(pieces, text)
    assert len(trimmed) == len(pieces)
    assert "".join(trimmed) == text.strip()
    assert all(t in p for t, p in zip(trimmed, pieces, strict=True))
