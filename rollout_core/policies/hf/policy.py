"""A local transformers checkpoint as a policy: one left-padded batched `generate` per call."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase
from transformers.utils import logging as hf_logging

from rollout_core.checkpoints import fingerprint_checkpoint
from rollout_core.policies.base import Completion, PolicyError, PolicyOutOfMemory, PolicyRequest
from rollout_core.policies.hf.prefix_cache import PrefixCache, plain_attention_layers
from rollout_core.policies.hf.prompt_encoder import PromptEncoder
from rollout_core.policies.hf.shared_prefix import ATTENTION_NAME, SharedPrefix
from rollout_core.policies.hf.shared_prefix import active as shared_prefix_active
from rollout_core.records import EpisodeKey, PolicyInfo
from rollout_core.settings import GenerationSettings

# Local directories only: never reach for a model hub at run time.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


def pick_device(device: str = "auto") -> torch.device:
    """`auto` means CUDA when present, else CPU."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def pick_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """`auto` means bf16 on CUDA (where it is fast and safe for inference), else fp32."""
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    try:
        return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
    except KeyError:
        raise PolicyError(f"unknown dtype {dtype!r} (choose auto, bf16, fp16 or fp32)") from None


def check_checkpoint_dir(path: Path) -> None:
    """Fail early, in one line, when `path` is not a transformers checkpoint directory."""
    if not path.is_dir():
        raise PolicyError(f"checkpoint not found: {path} (pass --policy hf:DIR with a model dir)")
    if not (path / "config.json").is_file():
        raise PolicyError(f"{path} is not a transformers checkpoint: it has no config.json")
    weights = [
        *path.glob("*.safetensors"),
        *path.glob("*.bin"),
        *path.glob("*.safetensors.index.json"),
    ]
    if not weights:
        raise PolicyError(f"{path} has no weights (*.safetensors or *.bin); was it fully saved?")


class HFPolicy:
    """Batched generation with a local causal LM and its chat template."""

    name = "hf"

    def __init__(
        self,
        checkpoint: str | Path,
        *,
        device: str = "auto",
        dtype: str = "auto",
        max_new_tokens: int = 64,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int = 0,
        threads: int | None = None,
        prefix_cache: bool = True,
        static_cache: bool = True,
        shared_prefix: bool | None = None,
        prefix_cache_entries: int = 1024,
        model: Any = None,
        tokenizer: PreTrainedTokenizerBase | None = None,
    ) -> None:
        if max_new_tokens < 1:
            raise PolicyError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
        if temperature < 0:
            raise PolicyError(f"temperature must be >= 0, got {temperature}")
        if threads:
            torch.set_num_threads(threads)
        self.checkpoint = str(checkpoint)
        self.device = pick_device(device)
        self.dtype = pick_dtype(dtype, self.device)
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.top_p = top_p
        self.seed = seed
        self.generate_seconds = 0.0
        """Wall time spent inside `model.generate` (for overhead accounting)."""
        self.prefix_seconds = 0.0
        """Wall time spent computing shared prefixes, the one model call outside `generate`."""
        self.reused_tokens = 0
        """Prompt tokens taken from the per-episode cache instead of being prefilled again."""
        self.prefix_cache = prefix_cache
        self.shared_prefix_calls = 0
        """Calls whose rows' common prefix was held once for the batch (see shared_prefix)."""
        self.static_cache = static_cache
        self._prefix = PrefixCache(max_entries=prefix_cache_entries)
        if model is None or tokenizer is None:
            model, tokenizer = self._load(Path(checkpoint))
        self.model = model
        self.tokenizer = tokenizer
        self.tokenizer.padding_side = "left"  # generation continues at the right edge
        self.shared_prefix = self._use_shared_prefix(shared_prefix)
        self._encoder = PromptEncoder(self.tokenizer)
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.max_prompt_tokens = self._context_length() - max_new_tokens

    @classmethod
    def from_model(cls, model: Any, tokenizer: PreTrainedTokenizerBase, **kw: Any) -> HFPolicy:
        """Wrap an already loaded model (e.g. inside a training loop)."""
        device = str(next(model.parameters()).device)
        return cls(
            getattr(model, "name_or_path", "model"),
            model=model,
            tokenizer=tokenizer,
            device=device,
            **kw,
        )

    def _load(self, path: Path) -> tuple[Any, PreTrainedTokenizerBase]:
        check_checkpoint_dir(path)
        hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # no per-load bars
        try:
            tokenizer = AutoTokenizer.from_pretrained(path)
            model = AutoModelForCausalLM.from_pretrained(path, dtype=self.dtype)
        # Corrupt weights raise the loaders' own error types (SafetensorError, ...), not OSError.
        except Exception as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise PolicyError(f"cannot load checkpoint {path}: {first}") from exc
        if tokenizer.chat_template is None:
            raise PolicyError(f"{path} has no chat template; save one with the tokenizer")
        model.to(self.device)  # type: ignore[arg-type]
        model.train(False)  # inference mode: no dropout
        return model, tokenizer

    def _use_shared_prefix(self, requested: bool | None) -> bool:
        """Switch the model to shared-prefix attention when asked, or by default on CPU.

        The attention kernel it needs is the CPU one; elsewhere the default stays plain `sdpa`.
        Outside this policy's `generate` calls the switched model computes plain `sdpa`.
        """
        wanted = self.device.type == "cpu" if requested is None else requested
        config = self.model.config
        able = (
            self.device.type == "cpu"
            and self.static_cache
            and self.prefix_cache
            and getattr(config, "_attn_implementation", None) in ("sdpa", ATTENTION_NAME)
            and plain_attention_layers(config) is not None
        )
        if wanted and not able and requested:
            raise PolicyError(
                "shared-prefix attention needs a CPU device, the static and prefix caches, "
                "sdpa attention and a model whose layers are all full attention"
            )
        if wanted and able:
            self.model.set_attn_implementation(ATTENTION_NAME)
            return True
        return False

    def _context_length(self) -> int:
        config = self.model.config
        return int(getattr(config, "max_position_embeddings", 0) or 2048)

    def describe(self) -> PolicyInfo:
        path = Path(self.checkpoint)
        fingerprint = None
        if (path / "config.json").is_file():
            try:
                fingerprint = fingerprint_checkpoint(path)
            except OSError:
                fingerprint = None
        return PolicyInfo(
            name="hf",
            model_class=type(self.model).__name__,
            parameters=sum(p.numel() for p in self.model.parameters()),
            dtype=str(self.dtype).removeprefix("torch."),
            device=str(self.device),
            fingerprint=fingerprint,
            extra={"checkpoint": self.checkpoint, "shared_prefix": self.shared_prefix},
        )

    def render(self, messages: list[dict[str, str]]) -> str:
        """The prompt text exactly as the model sees it."""
        text = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=False
        )
        return str(text)

    def release(self, episodes: Sequence[EpisodeKey]) -> None:
        """Drop the cached conversations of finished episodes."""
        self._prefix.release(episodes)
        self._encoder.release(episodes)

    def _encode(self, requests: Sequence[PolicyRequest]) -> list[list[int]]:
        prompts = [self.render(r.messages) for r in requests]
        encoded = self._encoder.encode([r.episode for r in requests], prompts)
        # Long conversations keep their most recent turns: the model's context is the limit.
        return [ids[-self.max_prompt_tokens :] for ids in encoded]

    def _compute_prefix(self, ids: list[int]) -> SharedPrefix:
        """Keys and values of a prefix every row of a batch starts with, computed once."""
        t0 = time.perf_counter()
        with torch.inference_mode():
            ids_t = torch.tensor([ids], device=self.device)
            out = self.model(input_ids=ids_t, use_cache=True, logits_to_keep=1)
        self.prefix_seconds += time.perf_counter() - t0
        kv = [(layer.keys, layer.values) for layer in out.cache.layers]
        return SharedPrefix(len(ids), kv)

    def generate(self, requests: Sequence[PolicyRequest]) -> list[Completion]:
        if not requests:
            return []
        rows = self._encode(requests)
        keys = [r.episode if self.prefix_cache else None for r in requests]
        pad_id = int(self.tokenizer.pad_token_id)
        batch = self._prefix.assemble(
            keys,
            rows,
            pad_id,
            self.device,
            config=self.model.config if self.static_cache else None,
            new_tokens=self.max_new_tokens,
            compute_prefix=self._compute_prefix if self.shared_prefix else None,
        )
        sampling = self.temperature > 0
        kwargs: dict[str, Any] = {"do_sample": sampling, "max_new_tokens": self.max_new_tokens}
        if sampling:
            # One generator per call, derived from the run seed and the episodes' seeds, so a
            # rerun of the same batch samples the same tokens.
            torch.manual_seed(hash((self.seed, *(r.seed for r in requests), requests[0].step_no)))
            kwargs.update(temperature=self.temperature, top_p=self.top_p)
        if batch.cache is not None:
            kwargs["cache"] = batch.cache
        t0 = time.perf_counter()
        try:
            with torch.inference_mode(), shared_prefix_active(batch.prefix):
                out = self.model.generate(
                    input_ids=batch.input_ids,
                    attention_mask=batch.attention_mask,
                    pad_token_id=pad_id,
                    return_dict_in_generate=True,
                    **kwargs,
                )
        except torch.cuda.OutOfMemoryError as exc:
            torch.cuda.empty_cache()
            raise PolicyOutOfMemory(f"out of GPU memory at batch {len(requests)}") from exc
        self.generate_seconds += time.perf_counter() - t0
        self.reused_tokens += batch.reused
        self.shared_prefix_calls += bool(batch.shared)
        width = batch.input_ids.shape[1]
        completions, sequences = [], []
        eos = self.tokenizer.eos_token_id
        for row, generated in zip(rows, out.sequences[:, width:].tolist(), strict=True):
            n_out = _generated_length(generated, eos, pad_id)
            text = str(self.tokenizer.decode(generated[:n_out], skip_special_tokens=True))
            completions.append(Completion(text=text.strip(), tokens_in=len(row), tokens_out=n_out))
            sequences.append(row + generated[:n_out])
        if self.prefix_cache and not self._prefix.store(keys, sequences, batch, out.cache):
            self.prefix_cache = False  # this architecture's cache cannot be reused this way
        return completions


def _generated_length(ids: list[int], eos: int | None, pad: int | None) -> int:
    """Tokens up to and including the first end-of-sequence (padding after it not counted)."""
    for i, tok in enumerate(ids):
        if tok == eos:
            return i + 1
        if tok == pad and eos != pad:
            return i
    return len(ids)


def hf_policy(arg: str | None, settings: GenerationSettings) -> HFPolicy:
    """Registry factory of `hf:CHECKPOINT_DIR`."""
    if not arg:
        raise PolicyError("the hf policy needs a checkpoint: --policy hf:/path/to/checkpoint")
    return HFPolicy(
        arg,
        device=settings.device,
        dtype=settings.dtype,
        max_new_tokens=settings.max_new_tokens,
        temperature=settings.temperature,
        top_p=settings.top_p,
        seed=settings.seed,
        threads=settings.threads,
    )
