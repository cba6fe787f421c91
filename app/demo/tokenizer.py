"""A byte-level BPE tokenizer with a ChatML-style chat template, trained on the given texts."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
PAD = "<|pad|>"
SPECIAL_TOKENS = (PAD, IM_START, IM_END)
ROLES = ("system", "user", "assistant")

# Every whitespace character and every digit is a piece of its own, so " Canada" in a question
# and 'Canada' inside SQL quotes share the token "Canada" and the model can learn to copy it;
# a GPT-2 style split glues the space to the word. Single whitespace pieces also make a chat's
# tokens the concatenation of its messages' tokens (see app.demo.train.encode_conversation).
_PIECES = r"\s|\p{N}|[\p{L}\p{M}_]+|[^\s\p{L}\p{M}\p{N}_]+"

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def train_tokenizer(texts: Iterable[str], vocab_size: int = 2048) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE on `texts`; eos is `<|im_end|>`, pad `<|pad|>`, left padding."""
    if vocab_size < 256 + len(SPECIAL_TOKENS):
        raise ValueError(
            f"vocab_size {vocab_size} is below the byte alphabet plus specials; use at least 259"
        )
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_PIECES), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(_with_roles(texts), trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=backend,
        bos_token=IM_START,
        eos_token=IM_END,
        pad_token=PAD,
        padding_side="left",  # batched generation pads on the left
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def conversation_texts(conversations: Iterable[Sequence[dict[str, str]]]) -> Iterator[str]:
    """Yield the message contents of chat conversations, as tokenizer training text."""
    for messages in conversations:
        for message in messages:
            yield message["content"]


def _with_roles(texts: Iterable[str]) -> Iterator[str]:
    """Yield the texts, then the role names, so the chat scaffolding gets whole tokens."""
    yield from texts
    yield from ROLES
