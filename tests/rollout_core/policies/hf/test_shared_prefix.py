"""Shared-prefix attention equals plain attention over the prefix followed by each row's keys."""

from __future__ import annotations

import pytest
import torch

from rollout_core.policies.hf.shared_prefix import SharedPrefix, active, shared_prefix_attention


class _Layer(torch.nn.Module):
    def __init__(self, groups: int) -> None:
        super().__init__()
        self.layer_idx = 0
        self.num_key_value_groups = groups
        self.is_causal = True
        self.train(False)


def _reference(
    query: torch.Tensor,
    prefix_k: torch.Tensor,
    prefix_v: torch.Tensor,
    own_k: torch.Tensor,
    own_v: torch.Tensor,
    mask: torch.Tensor,
    groups: int,
) -> torch.Tensor:
    batch = query.shape[0]
    keys = torch.cat([prefix_k.expand(batch, -1, -1, -1), own_k], dim=2)
    values = torch.cat([prefix_v.expand(batch, -1, -1, -1), own_v], dim=2)
    keys = keys.repeat_interleave(groups, dim=1)
    values = values.repeat_interleave(groups, dim=1)
    out = torch.nn.functional.scaled_dot_product_attention(query, keys, values, attn_mask=mask)
    return out.transpose(1, 2)


@pytest.mark.parametrize("groups", [1, 3])
@pytest.mark.parametrize("q_len", [1, 5])
def test_matches_plain_attention(groups: int, q_len: int) -> None:
    torch.manual_seed(0)
    batch, kv_heads, dim, prefix_len, own_len = 4, 2, 16, 12, 9
    query = torch.randn(batch, kv_heads * groups, q_len, dim)
    prefix_k, prefix_v = torch.randn(2, 1, kv_heads, prefix_len, dim)
    own_k, own_v = torch.randn(2, batch, kv_heads, own_len, dim)
    # Left padding of different widths inside each row's own part; queries are the last q_len
    # positions, causal among themselves; the prefix is visible to every query.
    mask = torch.ones(batch, 1, q_len, prefix_len + own_len, dtype=torch.bool)
    for row, pad in enumerate([0, 1, 3, 5]):
        mask[row, :, :, prefix_len : prefix_len + pad] = False
    for q in range(q_len):
        mask[:, :, q, prefix_len + own_len - q_len + q + 1 :] = False

    prefix = SharedPrefix(prefix_len, [(prefix_k, prefix_v)])
    with active(prefix):
        got, _ = shared_prefix_attention(_Layer(groups), query, own_k, own_v, mask)
    want = _reference(query, prefix_k, prefix_v, own_k, own_v, mask, groups)
    torch.testing.assert_close(got, want, atol=2e-6, rtol=1e-5)


def test_outside_a_generate_call_it_is_plain_sdpa() -> None:
    torch.manual_seed(1)
    query, key, value = torch.randn(3, 2, 2, 4, 8)
    mask = torch.ones(2, 1, 4, 4, dtype=torch.bool).tril()
    got, _ = shared_prefix_attention(_Layer(1), query, key, value, mask)
    want = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=mask)
    torch.testing.assert_close(got, want.transpose(1, 2))
