"""Typed run settings: how a policy generates and what the environment enforces.

Every default lives here, once. A run records these settings as given (not what a policy
reports about itself: that is `PolicyInfo`, stored apart and never fed back as input).
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from rollout_core.errors import RollscopeError
from rollout_core.sandbox import SandboxLimits

DEFAULT_STEP_BUDGET = 10
DEFAULT_MAX_NEW_TOKENS = 64
DEFAULT_BATCH_SIZE = 16
DEFAULT_CONCURRENCY = 32
DEFAULT_REQUEST_TIMEOUT = 60.0
DEFAULT_RETRY_SECONDS = 300.0

Device = str
"""`auto`, `cpu`, `cuda`, `cuda:1`, ..."""
DType = Literal["auto", "bf16", "fp16", "fp32"]
DTYPES: tuple[DType, ...] = ("auto", "bf16", "fp16", "fp32")


class SettingsError(RollscopeError, ValueError):
    """A setting out of range; the message names the setting, the value and what is allowed."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field} {problem}")
        self.field = field
        """The setting's name, so a face can name its own flag or form field instead."""
        self.problem = problem


MAX_WHOLE = 2**31 - 1
"""The largest count or budget a setting may be: the store's integer columns are 32 bits on
PostgreSQL (`storage.models.INTEGER_RANGE`), so every face keeps to them. A seed is no count:
it is hashed with each episode's key (`runner.episode_seed`), whatever its size."""


def check_numbers(settings: Any, *, whole: bool = True) -> None:
    """SettingsError for the first number field of a settings dataclass that is NaN or
    infinite (NaN passes every range check, turns a timeout off and is no JSON) or, with
    `whole`, a count past 32 bits; each class checks its own lower bounds."""
    for f in dataclasses.fields(settings):
        value = getattr(settings, f.name)
        if isinstance(value, float) and not math.isfinite(value):
            raise SettingsError(f.name, f"must be a finite number, got {value}")
        counted = whole and f.name != "seed"
        if counted and isinstance(value, int) and not isinstance(value, bool) and value > MAX_WHOLE:
            raise SettingsError(f.name, f"must be at most {MAX_WHOLE:,} (32 bits), got {value:,}")


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True, slots=True)
class EndpointSettings:
    """How to talk to an OpenAI-compatible server (the `openai:BASE_URL` policy).

    The API key itself is never part of a run: only the name of the variable that holds it.
    """

    model: str
    """Model name sent with every request (the server lists its own at BASE_URL/models)."""
    api_key_env: str | None = None
    """Environment variable holding the API key; None: send no key (local servers)."""
    concurrency: int = DEFAULT_CONCURRENCY
    """Requests in flight at once, so a server's continuous batching stays full."""
    timeout_seconds: float = DEFAULT_REQUEST_TIMEOUT
    """Longest wait for one reply before the request is retried."""
    retry_seconds: float = DEFAULT_RETRY_SECONDS
    """How long one request keeps being retried (429, 5xx, connection errors, timeouts)
    before the run fails; long enough to ride out a server restart."""
    top_logprobs: int = 0
    """Alternatives per token recorded with the log-probabilities (0: the sampled one only)."""

    def __post_init__(self) -> None:
        check_numbers(self)
        if not self.model.strip():
            raise SettingsError("model", "is empty (give the name the server serves)")
        if self.api_key_env is not None and not _ENV_NAME.fullmatch(self.api_key_env):
            raise SettingsError(
                "api_key_env", f"must be an environment variable name, got {self.api_key_env!r}"
            )
        if not 1 <= self.concurrency <= 1024:
            raise SettingsError(
                "concurrency", f"must be between 1 and 1024, got {self.concurrency}"
            )
        if self.timeout_seconds <= 0:
            raise SettingsError(
                "timeout_seconds", f"must be more than 0, got {self.timeout_seconds}"
            )
        if self.retry_seconds < 0:
            raise SettingsError("retry_seconds", f"must be 0 or more, got {self.retry_seconds}")
        if not 0 <= self.top_logprobs <= 20:
            raise SettingsError(
                "top_logprobs", f"must be between 0 and 20, got {self.top_logprobs}"
            )


@dataclass(frozen=True, slots=True)
class GenerationSettings:
    """How the policy generates: sampling, batching and where the model runs."""

    temperature: float = 0.0
    """0 for greedy decoding."""
    top_p: float = 1.0
    """Nucleus sampling: the smallest set of tokens whose probability reaches top_p."""
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    """Tokens one action may take."""
    seed: int = 0
    """Run seed; each episode derives its own from it, its question and its sample index."""
    batch_size: int = DEFAULT_BATCH_SIZE
    """Episodes advanced together in one policy call."""
    device: Device = "auto"
    """`auto` picks CUDA when present."""
    dtype: DType = "auto"
    """`auto` is bf16 on CUDA, fp32 on CPU."""
    threads: int | None = None
    """CPU threads for torch during generation (restored after each call); None: torch's."""
    endpoint: EndpointSettings | None = None
    """The server to ask, for policies that generate on one (`openai:`); None for the rest."""

    def __post_init__(self) -> None:
        check_numbers(self)
        if not 0.0 <= self.temperature <= 10.0:
            raise SettingsError("temperature", f"must be between 0 and 10, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise SettingsError("top_p", f"must be in (0, 1], got {self.top_p}")
        if self.max_new_tokens < 1:
            raise SettingsError("max_new_tokens", f"must be at least 1, got {self.max_new_tokens}")
        if self.batch_size < 1:
            raise SettingsError("batch_size", f"must be at least 1, got {self.batch_size}")
        if self.seed < 0:
            raise SettingsError("seed", f"must be 0 or more, got {self.seed}")
        if self.dtype not in DTYPES:
            raise SettingsError("dtype", f"{self.dtype!r} is unknown (choose {', '.join(DTYPES)})")
        if self.threads is not None and self.threads < 1:
            raise SettingsError("threads", f"must be at least 1, got {self.threads}")
        if not self.device.strip():
            raise SettingsError("device", "is empty (use auto, cpu, cuda or cuda:N)")


@dataclass(frozen=True, slots=True)
class EnvironmentSettings:
    """What the environment enforces in every episode of a run."""

    step_budget: int = DEFAULT_STEP_BUDGET
    """Actions per episode; the episode ends when they are used up."""
    sample_rows: int = 5
    """Rows SAMPLE shows."""
    max_observation_tokens: int = 256
    """Observations longer than this (in the policy's tokens, when it has a tokenizer) are cut."""
    sandbox: SandboxLimits = field(default_factory=SandboxLimits)
    """Limits of every connection the environment opens (QUERY, SAMPLE, DESCRIBE alike)."""

    def __post_init__(self) -> None:
        check_numbers(self)
        check_numbers(self.sandbox, whole=False)  # byte limits may pass 32 bits: no counts
        if self.step_budget < 1:
            raise SettingsError("step_budget", f"must be at least 1, got {self.step_budget}")
        if self.sample_rows < 1:
            raise SettingsError("sample_rows", f"must be at least 1, got {self.sample_rows}")
        if self.max_observation_tokens < 1:
            raise SettingsError(
                "max_observation_tokens", f"must be at least 1, got {self.max_observation_tokens}"
            )


@dataclass(frozen=True, slots=True)
class TrainingSettings:
    """A trainer's arguments that shape a training run (recorded with it, never replayed)."""

    trainer: str = "GRPOTrainer"
    """The trainer class, with its library's version (`GRPOTrainer (trl 1.16.0)`)."""
    model: str = ""
    """The trained model's name or path."""
    learning_rate: float = 0.0
    num_generations: int = 1
    """Episodes per prompt: the GRPO group size."""
    beta: float = 0.0
    """KL coefficient against the reference model (0: no reference model)."""
    max_steps: int = -1
    """Optimizer steps asked for; -1 when the epochs decide."""
    num_train_epochs: float = 0.0
    per_device_train_batch_size: int = 1
    gradient_accumulation_steps: int = 1
    steps_per_generation: int | None = None
    num_iterations: int = 1
    """Optimisation passes over each generation batch (GRPO's mu)."""
    epsilon: float = 0.2
    loss_type: str = ""
    scale_rewards: str = ""
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0
    reward_funcs: tuple[str, ...] = ()
    """Names of the reward functions, in the trainer's order."""

    def __post_init__(self) -> None:
        check_numbers(self)
