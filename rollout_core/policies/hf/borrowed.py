"""Use a caller's model for one call and give it back as it was.

Inside a training loop the model, torch's thread count and the tokenizer belong to the trainer.
The policy changes what it needs (threads, inference mode of the layers, the attention function)
for the duration of one call and restores it afterwards, also when the call fails.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch


@contextmanager
def borrowed(
    model: Any, *, threads: int | None = None, attention: str | None = None
) -> Iterator[None]:
    """Run with `threads` torch threads, dropout off and the `attention` implementation."""
    old_threads = torch.get_num_threads()
    training = [m for m in model.modules() if m.training]
    old_attention = getattr(model.config, "_attn_implementation", None)
    switch = attention is not None and attention != old_attention
    try:
        if threads and threads != old_threads:
            torch.set_num_threads(threads)
        for module in training:
            module.training = False  # what `model.train(False)` does, module by module
        if switch:
            model.set_attn_implementation(attention)
        yield
    finally:
        if switch:
            model.set_attn_implementation(old_attention)
        for module in training:
            module.training = True
        if torch.get_num_threads() != old_threads:
            torch.set_num_threads(old_threads)
