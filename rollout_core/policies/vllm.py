"""A checkpoint played in-process by vLLM on a GPU: one `LLM.chat` call per runner iteration.

Prefix caching is on, so an episode's earlier turns are not computed again at each step; each
request carries its own seed (from the episode's seed and the step), so sampled outputs do not
depend on the batch. vLLM is an optional extra (`rollscope[vllm]`), imported when the policy
is built; without a GPU the policy refuses in one line.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any

from rollout_core.checkpoints import fingerprint_checkpoint
from rollout_core.policies.base import Completion, PolicyError, PolicyOutOfMemory, PolicyRequest
from rollout_core.policies.token_text import fit_pieces
from rollout_core.records import EpisodeKey, PolicyInfo, TokenTrace
from rollout_core.settings import GenerationSettings

_DTYPES = {"auto": "auto", "bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
LOGPROBS_MODE = "processed_logprobs"
"""Log-probabilities after temperature (and top-p), i.e. of the distribution sampled from;
vLLM's default, `raw_logprobs`, is before temperature."""


class VLLMPolicy:
    """Batched chat generation with an in-process `vllm.LLM`."""

    name = "vllm"

    def __init__(
        self, checkpoint: str, settings: GenerationSettings | None = None, **engine: Any
    ) -> None:
        """`engine` goes to `vllm.LLM` as is (e.g. `gpu_memory_utilization=0.5`)."""
        self.checkpoint = checkpoint
        self.settings = settings or GenerationSettings()
        _check_device(self.settings.device)
        vllm = _import_vllm()
        self._sampling_params = vllm.SamplingParams
        self.version = str(getattr(vllm, "__version__", "unknown"))
        options: dict[str, Any] = {
            "dtype": _DTYPES[self.settings.dtype],
            "seed": self.settings.seed,
            "enable_prefix_caching": True,
            "logprobs_mode": LOGPROBS_MODE,
            **engine,
        }
        try:
            self.llm = vllm.LLM(model=checkpoint, **options)
        except Exception as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise PolicyError(f"vLLM cannot load {checkpoint}: {first}") from exc
        self.tokenizer = self.llm.get_tokenizer()
        self.generate_seconds = 0.0

    def describe(self) -> PolicyInfo:
        config = getattr(getattr(self.llm, "llm_engine", None), "model_config", None)
        architectures = getattr(getattr(config, "hf_config", None), "architectures", None) or []
        fingerprint = None
        path = Path(self.checkpoint)
        if (path / "config.json").is_file():
            with suppress(OSError):
                fingerprint = fingerprint_checkpoint(path)
        return PolicyInfo(
            name="vllm",
            model_class=architectures[0] if architectures else None,
            dtype=str(getattr(config, "dtype", "")).removeprefix("torch.") or None,
            device="cuda",
            fingerprint=fingerprint,
            extra={
                "checkpoint": self.checkpoint,
                "vllm": self.version,
                "prefix_caching": True,
                "logprobs_mode": LOGPROBS_MODE,
            },
        )

    def release(self, episodes: Sequence[EpisodeKey]) -> None:
        """vLLM's prefix cache evicts by itself: nothing to forget."""

    def generate(self, requests: Sequence[PolicyRequest]) -> list[Completion]:
        if not requests:
            return []
        import torch

        s = self.settings
        params = [
            self._sampling_params(
                n=1,
                temperature=s.temperature,
                top_p=s.top_p,
                max_tokens=s.max_new_tokens,
                seed=r.step_seed,
                logprobs=0,  # the sampled token's log-probability only
            )
            for r in requests
        ]
        t0 = time.perf_counter()
        try:
            outputs = self.llm.chat(
                [r.messages for r in requests], sampling_params=params, use_tqdm=False
            )
        except torch.cuda.OutOfMemoryError as exc:
            raise PolicyOutOfMemory(f"out of GPU memory at batch {len(requests)}") from exc
        self.generate_seconds += time.perf_counter() - t0
        return [completion_from_output(out) for out in outputs]


def completion_from_output(output: Any) -> Completion:
    """A vLLM `RequestOutput` (its first completion) as a Completion with its token trace.

    The trace's pieces are the tokens vLLM decoded for the log-probabilities, fitted to the
    output text (an end-of-sequence token the text leaves out gets an empty piece); when they
    do not fit, the step keeps its counts but no trace.
    """
    first = output.outputs[0]
    ids = [int(i) for i in first.token_ids]
    text = str(first.text)
    prompt_ids = output.prompt_token_ids
    return Completion(
        text=text,
        tokens_in=len(prompt_ids) if prompt_ids is not None else None,
        tokens_out=len(ids),
        tokens=_trace(ids, first.logprobs, text),
        truncated=first.finish_reason == "length",
        cached_tokens=getattr(output, "num_cached_tokens", None),
    )


def _trace(ids: list[int], positions: Any, text: str) -> TokenTrace | None:
    """Pieces and log-probabilities of the sampled tokens from vLLM's per-position logprobs
    (a list, or FlatLogprobs, of {token id: Logprob})."""
    if positions is None or len(positions) != len(ids) or not ids:
        return None
    logprobs: list[float] = []
    pieces: list[str] = []
    for token_id, position in zip(ids, positions, strict=True):
        chosen = position.get(token_id) if position is not None else None
        if chosen is None or chosen.decoded_token is None:
            return None
        logprobs.append(float(chosen.logprob))
        pieces.append(str(chosen.decoded_token))
    fitted = fit_pieces(pieces, text)
    if fitted is None:
        return None
    return TokenTrace(text=fitted, logprobs=tuple(logprobs), ids=tuple(ids))


def _check_device(device: str) -> None:
    """vLLM runs on the visible CUDA GPUs; refuse in one line before importing it otherwise."""
    if device not in ("auto", "cuda"):
        raise PolicyError(
            f"the vllm policy runs on the CUDA GPU (--device auto or cuda), not {device!r}; "
            "pick a GPU with CUDA_VISIBLE_DEVICES"
        )
    import torch

    if not torch.cuda.is_available():
        raise PolicyError(
            "the vllm policy needs a CUDA GPU and none is visible; "
            "use --policy hf:CHECKPOINT or openai:URL on this machine"
        )


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError as exc:
        raise PolicyError(
            f"vLLM is not installed ({exc}); install it on a GPU machine: "
            "pip install 'rollscope[vllm]'"
        ) from exc
    return vllm


def vllm_policy(arg: str | None, settings: GenerationSettings) -> VLLMPolicy:
    """Registry factory of `vllm:CHECKPOINT` (a local directory or a model id)."""
    if not arg:
        raise PolicyError("the vllm policy needs a checkpoint: --policy vllm:CHECKPOINT")
    return VLLMPolicy(arg, settings)
