"""Encoding only the new end of a growing conversation gives the ids of a full encoding."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from rollout_core.policies.hf.prompt_encoder import PromptEncoder
from rollout_core.records import EpisodeKey


class _Recording:
    """The real tokenizer, remembering the texts it was asked to encode."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.texts: list[str] = []

    def __call__(self, texts: list[str], **kw: Any) -> Any:
        self.texts += texts
        return self.tokenizer(texts, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.tokenizer, name)


def _conversation(tokenizer: Any, turns: int) -> list[str]:
    """The rendered prompt after each turn of one episode."""
    messages = [
        {"role": "system", "content": "Answer with DESCRIBE, SAMPLE, QUERY or ANSWER."},
        {"role": "user", "content": "Question: How many singers are there?"},
    ]
    prompts = []
    for turn in range(turns):
        prompts.append(
            tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        )
        messages += [
            {"role": "assistant", "content": f"QUERY SELECT count(*)\nFROM singer -- {turn}"},
            {"role": "user", "content": f"count(*)\n{turn * 7}\n<tag> {'x' * turn}"},
        ]
    return prompts


def test_growing_conversations_match_full_encoding(tiny_checkpoint: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint)
    encoder = PromptEncoder(_Recording(tokenizer))  # type: ignore[arg-type]
    assert encoder.enabled
    a, b = _conversation(tokenizer, 4), _conversation(tokenizer, 4)
    b = [p.replace("singers", "stadiums") for p in b]
    for turn in range(4):
        rows = encoder.encode(["a", "b"], [a[turn], b[turn]])
        full = tokenizer([a[turn], b[turn]], add_special_tokens=False)["input_ids"]
        assert rows == full
    assert encoder.enabled
    # later turns sent only their new end (plus one check of the first reuse) to the tokenizer
    sent = encoder.tokenizer.texts  # type: ignore[attr-defined]
    assert len(sent[-1]) < len(a[-1]) // 2


def test_a_new_episode_reuses_the_start_it_shares_with_the_last_prompt(
    tiny_checkpoint: Path,
) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint)
    recording = _Recording(tokenizer)
    encoder = PromptEncoder(recording)  # type: ignore[arg-type]
    first = _conversation(tokenizer, 3)[-1]
    other = _conversation(tokenizer, 1)[0].replace("singers", "stadiums")
    encoder.encode([EpisodeKey("q1", 0)], [first])
    assert encoder.encode([EpisodeKey("q2", 0)], [other]) == [
        tokenizer(other, add_special_tokens=False)["input_ids"]
    ]
    # the system message was not sent again, only what follows the last special token the
    # two prompts share; then the check of the first reuse encoded the prompt in full
    tail = other.split("<|im_start|>")[-2] + "<|im_start|>assistant\n"
    assert recording.texts[-2:] == [tail, other]


def test_an_edited_conversation_is_encoded_in_full(tiny_checkpoint: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint)
    encoder = PromptEncoder(tokenizer)
    first, second = _conversation(tokenizer, 2)
    encoder.encode(["a"], [first])
    edited = second.replace("How many", "How few")
    assert encoder.encode(["a"], [edited]) == [
        tokenizer(edited, add_special_tokens=False)["input_ids"]
    ]
    released = second
    encoder.release(["a"])
    assert encoder.encode(["a"], [released]) == [
        tokenizer(released, add_special_tokens=False)["input_ids"]
    ]


def test_a_wrong_shortcut_is_caught_and_turned_off(tiny_checkpoint: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint)
    encoder = PromptEncoder(tokenizer)
    first, second = _conversation(tokenizer, 2)
    encoder.encode(["a"], [first])
    text, ids = encoder._known["a"]
    encoder._known["a"] = (text, [ids[0] + 1, *ids[1:]])  # as if the split rule did not hold
    assert encoder.encode(["a"], [second]) == [
        tokenizer(second, add_special_tokens=False)["input_ids"]
    ]
    assert not encoder.enabled


@pytest.mark.parametrize(
    ("flags", "enabled"), [({}, True), ({"lstrip": True}, False), ({"rstrip": True}, False)]
)
def test_special_tokens_that_eat_whitespace_disable_the_shortcut(
    flags: dict[str, bool], enabled: bool
) -> None:
    backend = Tokenizer(models.WordLevel({"a": 0, "b": 1, "[UNK]": 2}, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.add_special_tokens([AddedToken("<end>", special=True, normalized=False, **flags)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend)
    assert PromptEncoder(tokenizer).enabled is enabled
