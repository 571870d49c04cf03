"""transformers' own KV cache (`DynamicCache`), for the forward of a model the lean forward does not run
(`lean.ModelForward`): the lean forward keeps its own static cache.

After a tree or lookahead forward the cache holds K/V for every speculated
token; only the accepted ones may stay, moved to the slots right after the
committed prefix. transformers 5 exposes each layer's `keys`/`values` tensors
(batch, heads, seq, head_dim) on `cache.layers`, which is all we touch.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache


def new_cache(model) -> DynamicCache:
    return DynamicCache(config=model.config)


def keep_positions(cache: DynamicCache, prefix_len: int, keep: torch.Tensor) -> None:
    """Keep the first `prefix_len` slots plus the slots `keep` (absolute indices, ascending).

    `keep` must index slots at or after `prefix_len`; they are moved, in order, to
    `prefix_len`, `prefix_len + 1`, ... and everything after them is dropped.
    """
    n_keep = int(keep.numel())
    for layer in cache.layers:
        if n_keep:
            # Move rather than index_select the whole cache: the prefix is left in place.
            layer.keys[:, :, prefix_len:prefix_len + n_keep] = layer.keys.index_select(2, keep)
            layer.values[:, :, prefix_len:prefix_len + n_keep] = layer.values.index_select(2, keep)
        layer.keys = layer.keys[:, :, :prefix_len + n_keep]
        layer.values = layer.values[:, :, :prefix_len + n_keep]


def crop(cache: DynamicCache, length: int) -> None:
    """Drop every slot from `length` on."""
    for layer in cache.layers:
        layer.keys = layer.keys[:, :, :length]
        layer.values = layer.values[:, :, :length]
