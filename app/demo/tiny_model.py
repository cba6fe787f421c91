"""Build, save and fingerprint small randomly initialised Llama checkpoints."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedModel, PreTrainedTokenizerBase

from app.demo.tokenizer import train_tokenizer
from rollout_core.checkpoints import fingerprint_checkpoint as checkpoint_fingerprint
from rollout_core.policies.hf.quiet import quiet_progress

__all__ = ["build_model", "checkpoint_fingerprint", "make_random_checkpoint", "save_checkpoint"]


def build_model(
    tokenizer: PreTrainedTokenizerBase,
    *,
    hidden: int = 128,
    layers: int = 4,
    heads: int = 4,
    ffn: int = 384,
    kv_heads: int | None = None,
    max_positions: int = 2048,
    seed: int = 0,
) -> LlamaForCausalLM:
    """A randomly initialised Llama with tied embeddings sized for `tokenizer`.

    `kv_heads` below `heads` makes grouped-query attention, as most released models use.
    """
    if hidden % heads:
        raise ValueError(f"hidden {hidden} is not divisible by heads {heads}; pick matching sizes")
    if kv_heads is not None and heads % kv_heads:
        raise ValueError(f"heads {heads} is not a multiple of kv_heads {kv_heads}")
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=ffn,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads or heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    model.train(False)
    return model


def save_checkpoint(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, path: Path | str
) -> Path:
    """Write an ordinary Hugging Face directory (weights, config, tokenizer, chat template)."""
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    with quiet_progress():  # a "Writing model shards" bar per checkpoint clutters training logs
        model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    # transformers 5 writes the weights 0600; dashboards and workers of other users read them.
    for weights in out.glob("*.safetensors"):
        weights.chmod(0o644)
    return out


def make_random_checkpoint(path: Path | str, texts: Iterable[str], **model_kw: Any) -> Path:
    """Train a tokenizer on `texts`, build a random model, save both; for tests.

    `vocab_size` goes to the tokenizer, the other keywords to `build_model`.
    """
    vocab_size = model_kw.pop("vocab_size", 2048)
    tokenizer = train_tokenizer(texts, vocab_size=vocab_size)
    return save_checkpoint(build_model(tokenizer, **model_kw), tokenizer, path)
