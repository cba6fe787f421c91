"""A chat-completion reply -> a Completion: text, token counts, truncation, token trace."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rollout_core.policies.base import Completion
from rollout_core.policies.token_text import fit_pieces, pieces_from_bytes
from rollout_core.records import TokenTrace
from rollout_core.settings import MAX_WHOLE
from rollout_core.utf8 import without_lone_surrogates


def completion_from_reply(reply: Any) -> Completion:
    """The first choice of an `openai` ChatCompletion as a Completion.

    Token counts come from `usage`, cached prompt tokens from its `prompt_tokens_details` when
    the server reports them, truncation from `finish_reason == "length"`, the token trace from
    `logprobs` (with vLLM's `token_ids` when present): no trace when the server sent no
    log-probabilities or when its tokens do not join to the text. The client keeps whatever
    JSON a server sent, so a reply without a usable choice raises ValueError, and a count that
    is not a whole number of tokens is unknown.
    """
    if isinstance(reply, str | bytes):
        raise ValueError(f"its body is not a JSON chat completion: {_excerpt(reply)}")
    choices = getattr(reply, "choices", None)
    if not isinstance(choices, list) or not choices:
        raise ValueError("the server's reply has no choices")
    choice = choices[0]
    message = getattr(choice, "message", None)
    if message is None or not hasattr(message, "content"):
        raise ValueError("its first choice has no message")
    # A lone surrogate (JSON's "\ud800") has no UTF-8 form: sent back with the next turn's
    # conversation, it failed the whole run in the client's encoder.
    text = without_lone_surrogates(message_text(message.content))
    usage = getattr(reply, "usage", None)
    details = getattr(usage, "prompt_tokens_details", None)
    return Completion(
        text=text,
        tokens_in=token_count(getattr(usage, "prompt_tokens", None)),
        tokens_out=token_count(getattr(usage, "completion_tokens", None)),
        tokens=token_trace(getattr(choice, "logprobs", None), _extra(choice, "token_ids"), text),
        truncated=getattr(choice, "finish_reason", None) == "length",
        cached_tokens=token_count(getattr(details, "cached_tokens", None)),
    )


def message_text(content: Any) -> str:
    """A message's text: its string, or the text parts of OpenAI's list-of-parts form joined
    (a refusal or other part holds no action); ValueError for anything else."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(_part(p, "type"), str) for p in content):
        texts = [_part(p, "text") for p in content if _part(p, "type") == "text"]
        if all(isinstance(t, str) for t in texts):
            return "".join(texts)
    raise ValueError(f"its message content is neither text nor text parts: {_excerpt(content)}")


def token_count(value: Any) -> int | None:
    """A token count as the store holds it; None (unknown) for anything but a whole number
    from 0 to the store's integer limit, never the value as given."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_WHOLE:
        return value
    return None


def token_trace(logprobs: Any, token_ids: Any, text: str) -> TokenTrace | None:
    """Per-token pieces, log-probabilities, alternatives and ids, or None (see module)."""
    entries: Sequence[Any] = getattr(logprobs, "content", None) or []
    if not entries:
        return None
    pieces = _fitted_pieces(entries, text)
    if pieces is None:
        return None
    ids = None
    if (
        isinstance(token_ids, list)
        and len(token_ids) == len(entries)
        and all(isinstance(i, int) and not isinstance(i, bool) for i in token_ids)
    ):
        ids = tuple(token_ids)
    tops = [e.top_logprobs or () for e in entries]
    top = None
    if any(tops):
        top = tuple(tuple((alt.token, float(alt.logprob)) for alt in alts) for alts in tops)
    return TokenTrace(
        text=pieces,
        logprobs=tuple(float(e.logprob) for e in entries),
        ids=ids,
        top=top,
    )


def _fitted_pieces(entries: Sequence[Any], text: str) -> tuple[str, ...] | None:
    """Pieces from the tokens' bytes when every token has them (exact for characters split
    over tokens), else from their strings; whichever fits the text."""
    candidates: list[list[str]] = []
    if all(e.bytes is not None for e in entries):
        candidates.append(pieces_from_bytes([e.bytes for e in entries]))
    candidates.append([e.token for e in entries])
    for pieces in candidates:
        fitted = fit_pieces(pieces, text)
        if fitted is not None:
            return fitted
    return None


def _extra(model: Any, name: str) -> Any:
    """A field the `openai` types do not declare but a server sent (kept as an extra)."""
    extra = getattr(model, "model_extra", None) or {}
    return extra.get(name)


def _part(part: Any, name: str) -> Any:
    """A field of a content part, whether the client kept it as a dict or a model."""
    return part.get(name) if isinstance(part, dict) else getattr(part, name, None)


def _excerpt(value: Any) -> str:
    """The start of what the server sent, on one line."""
    text = value.decode(errors="replace") if isinstance(value, bytes) else str(value)
    text = " ".join(text.split())
    return repr(text if len(text) <= 80 else text[:77] + "...")
