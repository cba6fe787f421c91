"""A local transformers checkpoint as a policy: one left-padded batched `generate` per call.

Whatever the policy uses of the caller's (the model, its tokenizer, torch's thread count and
RNG) is left as it was found: see `borrowed`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LogitsProcessorList,
    PreTrainedTokenizerBase,
)

from rollout_core.checkpoints import CheckpointError, check_checkpoint_dir, fingerprint_checkpoint
from rollout_core.policies.base import Completion, PolicyError, PolicyOutOfMemory, PolicyRequest
from rollout_core.policies.hf.borrowed import borrowed
from rollout_core.policies.hf.prefix_cache import PrefixCache, plain_attention_layers
from rollout_core.policies.hf.prompt_encoder import PromptEncoder
from rollout_core.policies.hf.quiet import quiet_progress
from rollout_core.policies.hf.sampling import TokenChooser
from rollout_core.policies.hf.shared_prefix import ATTENTION_NAME, SharedPrefix, register
from rollout_core.policies.hf.shared_prefix import active as shared_prefix_active
from rollout_core.policies.hf.token_pieces import TokenPieces, trim_pieces
from rollout_core.records import EpisodeKey, PolicyInfo, TokenTrace
from rollout_core.settings import GenerationSettings


def pick_device(device: str = "auto") -> torch.device:
    """`auto` means CUDA when present, else CPU; PolicyError for a device torch here lacks."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        chosen = torch.device(device)
    except RuntimeError:
        raise PolicyError(
            f"unknown device {device!r}; use --device auto, cpu, cuda or cuda:N"
        ) from None
    gpus = torch.cuda.device_count()  # 0 where torch is built without CUDA
    if chosen.type == "cuda" and (chosen.index or 0) >= gpus:
        raise PolicyError(
            f"device {device!r} is not available: torch here sees {gpus} CUDA GPU(s); use "
            "--device auto or cpu" + (f", or cuda:N with N below {gpus}" if gpus else "")
        )
    return chosen


def pick_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """`auto` means bf16 on CUDA (where it is fast and safe for inference), else fp32."""
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    try:
        return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
    except KeyError:
        raise PolicyError(f"unknown dtype {dtype!r} (choose auto, bf16, fp16 or fp32)") from None


class HFPolicy:
    """Batched generation with a local causal LM and its chat template."""

    name = "hf"

    def __init__(
        self,
        checkpoint: str | Path,
        settings: GenerationSettings | None = None,
        *,
        prefix_cache: bool = True,
        static_cache: bool = True,
        shared_prefix: bool | None = None,
        prefix_cache_entries: int = 1024,
        model: Any = None,
        tokenizer: PreTrainedTokenizerBase | None = None,
        encoder: Callable[[Sequence[PolicyRequest]], list[list[int]]] | None = None,
    ) -> None:
        """`encoder`, when given, turns requests into prompt token ids in place of the chat
        template (a trainer's exact token history: the ids it trains on are the ids the model
        saw, see app.training.tokens)."""
        settings = settings or GenerationSettings()
        self.encoder = encoder
        self.settings = settings
        self.checkpoint = str(checkpoint)
        self.device = pick_device(settings.device)
        self.dtype = pick_dtype(settings.dtype, self.device)
        self.max_new_tokens = settings.max_new_tokens
        self.temperature = settings.temperature
        self.top_p = settings.top_p
        self.threads = settings.threads
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
        else:
            self.dtype = next(model.parameters()).dtype
        self.model = model
        self.tokenizer = tokenizer
        self.eos_ids = _eos_ids(tokenizer, model)
        # The tokenizer's own padding settings are left alone: rows are padded by hand.
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(self.eos_ids)
        self.pad_id = int(pad)
        self.shared_prefix = self._use_shared_prefix(shared_prefix)
        self._encoder = PromptEncoder(self.tokenizer)
        self._pieces = TokenPieces(self.tokenizer)
        context = self._context_length()
        if self.max_new_tokens >= context:  # no token of the prompt would be left to the model
            raise PolicyError(
                f"--max-new-tokens {self.max_new_tokens} does not fit the model's context of "
                f"{context} tokens; give {context - 1} or fewer"
            )
        self.max_prompt_tokens = context - self.max_new_tokens
        self._info: PolicyInfo | None = None

    @classmethod
    def from_model(
        cls,
        model: Any,
        tokenizer: PreTrainedTokenizerBase,
        settings: GenerationSettings | None = None,
        **options: Any,
    ) -> HFPolicy:
        """Wrap an already loaded model (e.g. inside a training loop) on the device it is on.

        `options` are the constructor's cache switches (`prefix_cache`, `shared_prefix`, ...).
        """
        device = str(next(model.parameters()).device)
        settings = replace(settings or GenerationSettings(), device=device)
        name = getattr(model, "name_or_path", "") or "model"
        return cls(name, settings, model=model, tokenizer=tokenizer, **options)

    def _load(self, path: Path) -> tuple[Any, PreTrainedTokenizerBase]:
        try:
            check_checkpoint_dir(path)
        except CheckpointError as exc:
            raise PolicyError(str(exc)) from None
        try:
            with quiet_progress():
                # A local directory only: never reach for a model hub.
                tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
                model = AutoModelForCausalLM.from_pretrained(
                    path, dtype=self.dtype, local_files_only=True
                )
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
        """Whether to use shared-prefix attention: when asked, or by default on CPU.

        The attention kernel it needs is the CPU one; elsewhere the default stays plain `sdpa`.
        The model is switched to it only inside this policy's own calls.
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
        return wanted and able

    def _context_length(self) -> int:
        config = self.model.config
        return int(getattr(config, "max_position_embeddings", 0) or 2048)

    def describe(self) -> PolicyInfo:
        """What was built; computed once (the fingerprint reads the checkpoint's files)."""
        if self._info is None:
            path = Path(self.checkpoint)
            fingerprint = None
            if (path / "config.json").is_file():
                try:
                    fingerprint = fingerprint_checkpoint(path)
                except OSError:
                    fingerprint = None
            self._info = PolicyInfo(
                name="hf",
                model_class=type(self.model).__name__,
                parameters=sum(p.numel() for p in self.model.parameters()),
                dtype=str(self.dtype).removeprefix("torch."),
                device=str(self.device),
                fingerprint=fingerprint,
                extra={"checkpoint": self.checkpoint, "shared_prefix": self.shared_prefix},
            )
        return self._info

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
        if self.encoder is not None:
            encoded = self.encoder(requests)
        else:
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

    @contextmanager
    def _model_call(self) -> Iterator[None]:
        """The caller's model, threads and attention setting, borrowed for one call."""
        if self.shared_prefix:
            register()
        attention = ATTENTION_NAME if self.shared_prefix else None
        with borrowed(self.model, threads=self.threads, attention=attention):
            yield

    def generate(self, requests: Sequence[PolicyRequest]) -> list[Completion]:
        if not requests:
            return []
        rows = self._encode(requests)
        keys = [r.episode if self.prefix_cache else None for r in requests]
        with self._model_call():
            batch = self._prefix.assemble(
                keys,
                rows,
                self.pad_id,
                self.device,
                config=self.model.config if self.static_cache else None,
                new_tokens=self.max_new_tokens,
                compute_prefix=self._compute_prefix if self.shared_prefix else None,
            )
            width = batch.input_ids.shape[1]
            # Each row samples from its own seeds, so an episode's tokens never depend on the
            # other rows of the batch (see sampling); `generate` itself stays greedy.
            seeds = [(r.seed, r.step_no) for r in requests] if self.temperature > 0 else None
            chooser = TokenChooser(
                width, temperature=self.temperature, top_p=self.top_p, seeds=seeds
            )
            kwargs: dict[str, Any] = {
                "do_sample": False,
                "max_new_tokens": self.max_new_tokens,
                "logits_processor": LogitsProcessorList([chooser]),
            }
            if batch.cache is not None:
                kwargs["cache"] = batch.cache
            t0 = time.perf_counter()
            try:
                with torch.inference_mode(), shared_prefix_active(batch.prefix):
                    out = self.model.generate(
                        input_ids=batch.input_ids,
                        attention_mask=batch.attention_mask,
                        pad_token_id=self.pad_id,
                        return_dict_in_generate=True,
                        **kwargs,
                    )
            except torch.cuda.OutOfMemoryError as exc:
                torch.cuda.empty_cache()
                raise PolicyOutOfMemory(f"out of GPU memory at batch {len(requests)}") from exc
            self.generate_seconds += time.perf_counter() - t0
        self.reused_tokens += batch.reused
        self.shared_prefix_calls += bool(batch.shared)
        generated = out.sequences[:, width:].tolist()
        outputs = [ids[: _generated_length(ids, self.eos_ids)] for ids in generated]
        texts = [str(t) for t in self.tokenizer.batch_decode(outputs, skip_special_tokens=True)]
        pieces = self._pieces(outputs, texts)
        logprobs, entropies = chooser.traces(len(rows), len(generated[0]))
        completions, sequences = [], []
        for i, (row, ids, text) in enumerate(zip(rows, outputs, texts, strict=True)):
            n_out = len(ids)
            trace = TokenTrace(
                text=trim_pieces(pieces[i], text),
                logprobs=tuple(logprobs[i][:n_out]),
                entropies=tuple(entropies[i][:n_out]),
                ids=tuple(ids),
            )
            completions.append(
                Completion(
                    text=text.strip(),
                    tokens_in=len(row),
                    tokens_out=n_out,
                    tokens=trace,
                    truncated=not any(t in self.eos_ids for t in generated[i]),
                    cached_tokens=batch.cached[i],
                )
            )
            sequences.append(row + ids)
        if self.prefix_cache and not self._prefix.store(keys, sequences, batch, out.cache):
            self.prefix_cache = False  # this architecture's cache cannot be reused this way
        return completions


def _eos_ids(tokenizer: PreTrainedTokenizerBase, model: Any) -> frozenset[int]:
    """Every id that ends generation: the tokenizer's eos and the model's generation config's."""
    ids: set[int] = set()
    config = getattr(model, "generation_config", None)
    for value in (tokenizer.eos_token_id, getattr(config, "eos_token_id", None)):
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, list | tuple):
            ids.update(int(v) for v in value)
    if not ids:
        raise PolicyError("the tokenizer has no end-of-sequence token; set tokenizer.eos_token")
    return frozenset(ids)


def _generated_length(ids: list[int], eos: frozenset[int]) -> int:
    """Tokens up to and including the first end-of-sequence: `generate` pads a row only after
    it ended, so a padding token before that is one the model wrote."""
    for i, tok in enumerate(ids):
        if tok in eos:
            return i + 1
    return len(ids)


def hf_policy(arg: str | None, settings: GenerationSettings) -> HFPolicy:
    """Registry factory of `hf:CHECKPOINT_DIR`."""
    if not arg:
        raise PolicyError("the hf policy needs a checkpoint: --policy hf:/path/to/checkpoint")
    return HFPolicy(arg, settings)
