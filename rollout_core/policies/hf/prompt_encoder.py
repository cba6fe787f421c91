"""Token ids of each episode's prompt, encoding again only the text after its last special token.

An agent's prompt grows turn by turn, and every episode of a run opens with the same system
prompt; encoding each prompt whole repeats most of the work. A fast tokenizer splits its special
tokens (`<|im_end|>`, ...) out of the text before anything else, so the ids up to and including
a special token do not depend on what follows it: the ids of a prompt are the ids of an earlier
prompt that starts the same way, up to the last special token in the shared start, plus the
encoding of the text after it. The earlier prompt is the episode's own last one, or for a new
episode the last prompt encoded. The ids are the same as a full encoding; tokenizers whose
special tokens strip or match neighbouring text break that rule and are always encoded in full,
and the first reuses are checked against a full encoding.
"""

from __future__ import annotations

from collections.abc import Sequence

from transformers import PreTrainedTokenizerBase

from rollout_core.records import EpisodeKey

CHECKED_REUSES = 1
"""Batches whose reused ids are compared with a full encoding before the shortcut is trusted."""


class PromptEncoder:
    """Encodes batches of prompts, remembering each episode's last prompt and its ids."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase) -> None:
        self.tokenizer = tokenizer
        self._specials = _clean_special_tokens(tokenizer)
        self.enabled = bool(self._specials)
        self._known: dict[EpisodeKey, tuple[str, list[int]]] = {}
        self._last: tuple[str, list[int]] | None = None
        """The last prompt encoded, where a new episode starts from."""
        self._checks_left = CHECKED_REUSES

    def release(self, keys: Sequence[EpisodeKey]) -> None:
        for key in keys:
            self._known.pop(key, None)

    def encode(self, keys: Sequence[EpisodeKey | None], texts: Sequence[str]) -> list[list[int]]:
        """Ids of `texts` without added special tokens; `keys` name episodes (None = none)."""
        heads: list[list[int]] = []
        tails: list[str] = []
        for key, text in zip(keys, texts, strict=True):
            head, cut = self._reusable(key, text)
            heads.append(head)
            tails.append(text[cut:])
        encoded = self.tokenizer(tails, add_special_tokens=False)["input_ids"]
        rows = [head + tail for head, tail in zip(heads, encoded, strict=True)]
        if self._checks_left > 0 and any(heads):
            self._check(texts, heads, rows)
        for key, text, row in zip(keys, texts, rows, strict=True):
            if key is not None:
                self._known[key] = self._last = (text, row)
        return rows

    def _reusable(self, key: EpisodeKey | None, text: str) -> tuple[list[int], int]:
        """Ids of the start of `text` known from an earlier prompt, and where they end: up to
        the last special token inside the start the two texts share."""
        if key is None or not self.enabled:
            return [], 0
        known = self._known.get(key) or self._last
        if known is None:
            return [], 0
        old_text, old_ids = known
        same = len(old_text) if text.startswith(old_text) else _common_length(old_text, text)
        end = len(old_text)
        for j in range(len(old_ids) - 1, -1, -1):
            token = self._specials.get(old_ids[j])
            if token is None:
                continue
            # Special ids and occurrences of their text pair up in order: walk back through both.
            start = old_text.rfind(token, 0, end)
            if start < 0:
                return [], 0
            if start + len(token) <= same:
                return old_ids[: j + 1], start + len(token)
            end = start
        return [], 0

    def _check(self, texts: Sequence[str], heads: list[list[int]], rows: list[list[int]]) -> None:
        reused = [i for i, head in enumerate(heads) if head]
        full = self.tokenizer([texts[i] for i in reused], add_special_tokens=False)["input_ids"]
        if any(rows[i] != ids for i, ids in zip(reused, full, strict=True)):
            self.enabled = False
            for i, ids in zip(reused, full, strict=True):
                rows[i] = ids
        self._checks_left -= 1


def _common_length(a: str, b: str) -> int:
    """Length of the longest common start (bisection over C-speed slice comparisons)."""
    lo, hi = 0, min(len(a), len(b)) + 1  # a[:lo] == b[:lo]; a[:hi] != b[:hi] or hi too long
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def _clean_special_tokens(tokenizer: PreTrainedTokenizerBase) -> dict[int, str]:
    """Special tokens that split text cleanly (none stripping or matching nearby text)."""
    added = getattr(tokenizer, "added_tokens_decoder", {})
    special = {i: t for i, t in added.items() if getattr(t, "special", False)}
    if not special or not getattr(tokenizer, "is_fast", False):
        return {}
    for token in special.values():
        if token.lstrip or token.rstrip or token.single_word or token.normalized:
            return {}
    return {i: str(t.content) for i, t in special.items()}
