"""A chat-completion reply -> a Completion: text, token counts, truncation, token trace."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rollout_core.policies.base import Completion
from rollout_core.policies.token_text import fit_pieces, pieces_from_bytes
from rollout_core.records import TokenTrace


def completion_from_reply(reply: Any) -> Completion:
    """The first choice of an `openai` ChatCompletion as a Completion.

    Token counts come from `usage`, cached prompt tokens from its `prompt_tokens_details` when
    the server reports them, truncation from `finish_reason == "length"`, the token trace from
    `logprobs` (with vLLM's `token_ids` when present): no trace when the server sent no
    log-probabilities or when its tokens do not join to the text.
    """
    if not reply.choices:
        raise ValueError("the server's reply has no choices")
    choice = reply.choices[0]
    text = choice.message.content or ""
    usage = reply.usage
    details = getattr(usage, "prompt_tokens_details", None) if usage is not None else None
    return Completion(
        text=text,
        tokens_in=usage.prompt_tokens if usage is not None else None,
        tokens_out=usage.completion_tokens if usage is not None else None,
        tokens=token_trace(choice.logprobs, _extra(choice, "token_ids"), text),
        truncated=choice.finish_reason == "length",
        cached_tokens=getattr(details, "cached_tokens", None),
    )


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
