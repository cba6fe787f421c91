"""Attention that reads the prefix every row of a batch shares once, instead of once per row.

Every episode of a run opens with the same system prompt (on the demo benchmark, 242 of the
~300 tokens of a first prompt). When a batch of 32 conversations decodes a token, each row reads
its own keys and values for every position; on CPU that memory traffic, not the arithmetic, is
what a decoding step costs, and a third to a half of it is the same prefix read 32 times.

Here the batch's common prefix is held once, `[1, kv_heads, P, dim]`, and the cache holds only the
positions after it. Each query attends to the prefix and to its own row separately, and the two
partial results are merged exactly with their log-sum-exp weights (the decomposition known as
cascade attention or Hydragen). The cache still reports the prefix as held, so `generate` builds
position ids and masks for the whole sequence as usual.

The attention function is registered with transformers under `ATTENTION_NAME` on first use
(`register`); a model switched to it behaves exactly like `sdpa` except inside `active(prefix)`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import AttentionInterface, StaticLayer
from transformers.cache_utils import Cache
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

ATTENTION_NAME = "sdpa_shared_prefix"

KV = list[tuple[torch.Tensor, torch.Tensor]]
"""Per layer: keys and values, each [batch or 1, kv_heads, tokens, head_dim]."""
OwnBias = tuple[torch.Tensor | None, torch.Tensor | None]


@dataclass
class SharedPrefix:
    """Keys and values of the tokens that open every row of a batch, stored once per layer."""

    length: int
    kv: KV
    _bias: tuple[torch.Tensor, int, OwnBias] | None = field(default=None, repr=False)
    """The last mask seen, the groups, and what `own_bias` made of it: every layer of a forward
    pass gets the same mask, so it is converted once per pass."""

    def own_bias(self, mask: torch.Tensor | None, groups: int, dtype: torch.dtype) -> OwnBias:
        """The additive mask over each row's own positions, and the queries that see none.

        A padding position sees none of its row's own keys; the kernel reports such a query as
        log-sum-exp 0, which would weigh an empty result in. (A decoding query sees itself.)
        """
        if mask is None:  # transformers drops the mask only when every key is visible
            return None, None
        if self._bias is not None and self._bias[0] is mask and self._bias[1] == groups:
            return self._bias[2]
        bias = _suffix_bias(mask, self.length, groups, dtype)
        unseen = torch.isneginf(bias).all(dim=-1) if bias.shape[2] > 1 else None
        self._bias = (mask, groups, (bias, unseen))
        return bias, unseen


_ACTIVE: ContextVar[SharedPrefix | None] = ContextVar("rollscope_shared_prefix", default=None)


@contextmanager
def active(prefix: SharedPrefix | None) -> Iterator[None]:
    """Make attention read `prefix` for the duration of one `generate` call."""
    token = _ACTIVE.set(prefix)
    try:
        yield
    finally:
        _ACTIVE.reset(token)
        if prefix is not None:
            prefix._bias = None  # entries keep the prefix; they need not keep the last mask


class SuffixLayer(StaticLayer):  # type: ignore[no-untyped-call]  # transformers is untyped
    """Preallocated keys and values after the shared prefix; reports the prefix as held too."""

    def __init__(self, max_cache_len: int, prefix_len: int = 0) -> None:
        super().__init__(max_cache_len=max_cache_len)
        self.prefix_len = prefix_len

    def preload(self, keys: torch.Tensor, values: torch.Tensor, length: int) -> None:
        """Adopt full-size tensors whose first `length` positions are already filled."""
        self.device = keys.device
        self.batch_size, self.num_heads, _, self.k_head_dim = keys.shape
        self.v_head_dim = values.shape[-1]
        self.keys, self.values = keys, values
        self.cumulative_length = torch.tensor(length, dtype=torch.long, device=keys.device)
        self.is_initialized = True

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.prefix_len + self.max_cache_len, 0

    def get_seq_length(self) -> int:
        # A tensor like StaticLayer's own (no device sync on CUDA), offset by the prefix.
        if not self.is_initialized:
            return self.prefix_len
        return self.prefix_len + self.cumulative_length  # type: ignore[return-value]

    def get_max_length(self) -> int:
        return self.prefix_len + self.max_cache_len


class BatchCache(Cache):
    """Static per-row caches behind an optional shared prefix (held in `prefix`, not here)."""

    def __init__(self, num_layers: int, max_cache_len: int, prefix: SharedPrefix | None) -> None:
        prefix_len = prefix.length if prefix is not None else 0
        layers = [SuffixLayer(max_cache_len, prefix_len) for _ in range(num_layers)]
        super().__init__(layers=layers)  # type: ignore[arg-type]
        self.prefix = prefix


def shared_prefix_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """`sdpa`, except that inside `active(prefix)` the prefix is attended to once for all rows."""
    prefix = _ACTIVE.get()
    if prefix is None or prefix.length == 0 or query.device.type != "cpu" or module.training:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    prefix_keys, prefix_values = prefix.kv[int(module.layer_idx)]  # type: ignore[arg-type]
    batch, q_heads, q_len, dim = query.shape
    kv_heads = key.shape[1]
    groups = q_heads // kv_heads
    scale = scaling if scaling is not None else dim**-0.5
    # Queries of one key/value head side by side: [batch, kv_heads, groups * q_len, dim].
    grouped = query.reshape(batch, kv_heads, groups * q_len, dim)

    # The prefix: every query of every row sees all of it, so the batch folds into the queries.
    folded = grouped.transpose(0, 1).reshape(1, kv_heads, batch * groups * q_len, dim)
    out_prefix, lse_prefix = _attend(folded, prefix_keys, prefix_values, None, scale)
    out_prefix = out_prefix.view(kv_heads, batch, groups * q_len, dim).transpose(0, 1)
    lse_prefix = lse_prefix.view(kv_heads, batch, groups * q_len).transpose(0, 1)

    # The row's own positions, with the usual causal and padding mask.
    bias, unseen = prefix.own_bias(attention_mask, groups, query.dtype)
    out_own, lse_own = _attend(grouped, key, value, bias, scale)

    # Merge the two softmaxes over disjoint key sets exactly: the prefix's share of the total
    # weight is exp(lse_prefix) / (exp(lse_prefix) + exp(lse_own)).
    share = torch.sigmoid(lse_prefix - lse_own)
    if unseen is not None:
        share = share.masked_fill(unseen, 1.0)
    merged = torch.lerp(out_own, out_prefix, share.unsqueeze(-1).to(out_own.dtype))
    out = merged.reshape(batch, q_heads, q_len, dim)
    return out.transpose(1, 2).contiguous(), None


def _attend(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    bias: torch.Tensor | None,
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention output and its log-sum-exp per query (CPU flash kernel)."""
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        query, key, value, attn_mask=bias, scale=scale
    )
    return out, lse


def _suffix_bias(
    mask: torch.Tensor, prefix_len: int, groups: int, dtype: torch.dtype
) -> torch.Tensor:
    """The additive mask over the positions after the prefix, one row per grouped query."""
    own = mask[..., prefix_len:]
    if own.dtype == torch.bool:
        own = torch.zeros(own.shape, dtype=dtype, device=own.device).masked_fill_(
            ~own, float("-inf")
        )
    else:
        own = own.to(dtype)
    if groups > 1 and own.shape[2] > 1:
        batch, heads, q_len, keys = own.shape
        own = own.unsqueeze(2).expand(batch, heads, groups, q_len, keys)
        own = own.reshape(batch, heads, groups * q_len, keys)
    return own


def register() -> None:
    """Make `ATTENTION_NAME` known to transformers (idempotent); importing does not do it."""
    AttentionInterface.register(ATTENTION_NAME, shared_prefix_attention)
    AttentionMaskInterface.register(ATTENTION_NAME, sdpa_mask)
