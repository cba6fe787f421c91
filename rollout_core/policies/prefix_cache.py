"""Keep each episode's attention cache between turns, so a turn prefills only its new tokens.

An agent's prompt at step n is its prompt at step n-1 plus its completion and the new
observation. Recomputing that whole conversation every turn makes prefill the bulk of the work
on long conversations (measured: 400-token prompts, 24 new tokens, batch 32 on 2 CPU cores:
0.40 s of prefill against 0.16 s of decoding per call). The cache keeps, per episode, the token
ids whose keys and values it holds; the next turn reuses the longest common prefix of those ids
and the new prompt's ids, so it is exact whatever the tokenizer does at turn boundaries.

Rows of a batch have different cached lengths; they are left-padded so that every row has the
same number of uncached tokens (the largest), with padded positions masked out. Given the
model's config, the cache is a preallocated `StaticCache` sized for the prompt and the new
tokens, so decoding writes in place.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import DynamicCache, PreTrainedConfig, StaticCache

SHARED_PREFIX_CANDIDATES = 16
KV = list[tuple[torch.Tensor, torch.Tensor]]
"""Per layer: keys and values of one sequence, each [heads, tokens, head_dim]."""


@dataclass
class _Entry:
    ids: list[int]
    kv: KV


@dataclass
class Batch:
    """Model inputs for one generate call, with the cache rows put together."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    cache: DynamicCache | StaticCache | None
    pads: list[int]
    """Left padding of each row."""
    reused: int
    """Prompt tokens whose keys and values came from the cache (not recomputed)."""


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


class PrefixCache:
    """Per-episode key/value caches, bounded in number (least recently used go first)."""

    def __init__(self, max_entries: int = 1024) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._last_released: _Entry | None = None
        """Kept after its episode ends: the next wave of episodes shares its system prompt."""

    def __len__(self) -> int:
        return len(self._entries)

    def release(self, keys: Sequence[str]) -> None:
        """Forget finished episodes."""
        for key in keys:
            entry = self._entries.pop(key, None)
            if entry is not None:
                self._last_released = entry

    def assemble(
        self,
        keys: Sequence[str],
        rows: Sequence[list[int]],
        pad_id: int,
        device: torch.device,
        *,
        config: PreTrainedConfig | None = None,
        new_tokens: int = 0,
    ) -> Batch:
        """Left-padded inputs for `rows`, with the cached part of each row filled in."""
        lengths = [len(r) for r in rows]
        width = max(lengths)
        chosen = [self._best_entry(key, row) for key, row in zip(keys, rows, strict=True)]
        # At least one token of every row must be fed to the model.
        usable = [
            0 if entry is None else min(_common_prefix(entry.ids, row), len(row) - 1)
            for entry, row in zip(chosen, rows, strict=True)
        ]
        uncached = max(n - u for n, u in zip(lengths, usable, strict=True))
        cached = width - uncached
        pads = [width - n for n in lengths]
        input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
        attention = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            input_ids[i, pads[i] :] = torch.tensor(row, dtype=torch.long)
            attention[i, pads[i] :] = 1
        cache: DynamicCache | StaticCache | None = None
        if config is not None:
            # A preallocated cache: each decoding step writes in place instead of re-concatenating
            # every layer's keys and values (measured: torch.cat was ~20% of a batch-32 call).
            cache = StaticCache(config=config, max_cache_len=width + new_tokens)
        reused = 0
        if cached > 0:
            cache = cache if cache is not None else DynamicCache()
            reused = self._stack(cache, chosen, lengths, uncached, cached, device)
        return Batch(input_ids.to(device), attention.to(device), cache, pads, reused)

    def _best_entry(self, key: str, row: list[int]) -> _Entry | None:
        """The episode's own cache; for a new episode, the recent one sharing most of its prompt.

        Episodes of a run share their system prompt, and a prefix's keys and values depend on
        its tokens alone, so a new episode can start from another's.
        """
        if not key:
            return None
        own = self._entries.get(key)
        if own is not None:
            return own
        recent = list(self._entries.values())[-SHARED_PREFIX_CANDIDATES:]
        if self._last_released is not None:
            recent.append(self._last_released)
        return max(recent, key=lambda e: _common_prefix(e.ids, row), default=None)

    def _stack(
        self,
        cache: DynamicCache | StaticCache,
        chosen: Sequence[_Entry | None],
        lengths: list[int],
        uncached: int,
        cached: int,
        device: torch.device,
    ) -> int:
        """Write the rows' cached keys and values into `cache`; returns the tokens reused."""
        template = next(
            e for e, n in zip(chosen, lengths, strict=True) if e is not None and n - uncached > 0
        )
        reused = 0
        for layer, (k0, _) in enumerate(template.kv):
            heads, _, dim = k0.shape
            keys_t = torch.zeros((len(chosen), heads, cached, dim), dtype=k0.dtype, device=device)
            values_t = torch.zeros_like(keys_t)
            for i, (entry, n) in enumerate(zip(chosen, lengths, strict=True)):
                real = max(0, n - uncached)  # this row's tokens inside the cached span
                if real == 0 or entry is None:
                    continue
                k, v = entry.kv[layer]
                keys_t[i, :, cached - real :] = k[:, :real]
                values_t[i, :, cached - real :] = v[:, :real]
                if layer == 0:
                    reused += real
            cache.update(keys_t, values_t, layer)
        return reused

    def store(
        self,
        keys: Sequence[str],
        sequences: Sequence[list[int]],
        pads: Sequence[int],
        cache: object,
    ) -> bool:
        """Remember, per row, the real tokens whose keys and values `cache` now holds.

        Returns False (and stores nothing) for caches this scheme cannot reuse: sliding-window
        or linear-attention layers keep something other than every position's keys and values.
        """
        layers = _full_attention_layers(cache)
        if layers is None:
            return False
        held = _held_length(cache, layers)
        for i, (key, seq) in enumerate(zip(keys, sequences, strict=True)):
            if not key:
                continue
            count = min(len(seq), held - pads[i])
            start = pads[i]
            kv = [
                (k[i, :, start : start + count].clone(), v[i, :, start : start + count].clone())
                for k, v in layers
            ]
            self._entries[key] = _Entry(list(seq[:count]), kv)
            self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
        return True


def _held_length(cache: object, layers: KV) -> int:
    """How many positions of the layers' tensors hold keys and values."""
    if isinstance(cache, StaticCache):
        return int(cache.get_seq_length())
    return int(layers[0][0].shape[2])


def _full_attention_layers(cache: object) -> KV | None:
    """Each layer's [batch, heads, tokens, dim] keys and values, if all layers are plain ones."""
    if not isinstance(cache, DynamicCache | StaticCache):
        return None
    layers: KV = []
    for layer in cache.layers:
        keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
        plain = type(layer).__name__ in ("DynamicLayer", "StaticLayer")
        if not plain or not isinstance(keys, torch.Tensor):
            return None
        assert isinstance(values, torch.Tensor)
        layers.append((keys, values))
    return layers or None
