"""An OpenAI-compatible chat server as a policy: each runner iteration's requests sent at once.

Requests go out concurrently on an event loop of the policy's own, at most `concurrency` in
flight, so a server's continuous batching stays full. Each request is cut after
`timeout_seconds` and retried with backoff on 429, 5xx, dropped connections and timeouts for
up to `retry_seconds`; then `generate` raises PolicyError and the run fails in one line, to be
continued with `rollscope run --resume` once the server answers again.
"""

from __future__ import annotations

import asyncio
import os
import random
import threading
import time
from collections.abc import Coroutine, Sequence
from contextlib import suppress
from typing import Any, TypeVar

import openai

from rollout_core.policies.base import Completion, Messages, PolicyError, PolicyRequest
from rollout_core.policies.openai.replies import completion_from_reply
from rollout_core.policies.openai.retry import Backoff, GaveUp, call_with_retries
from rollout_core.records import EpisodeKey, PolicyInfo
from rollout_core.settings import EndpointSettings, GenerationSettings

T = TypeVar("T")

NO_KEY = "EMPTY"
"""Sent when no key is configured: keyless servers (vLLM, transformers serve) ignore it."""
CONNECT_SECONDS = 30.0
"""How long building the policy keeps trying to reach the server (e.g. while it loads)."""
FEATURES = ("token_ids", "top_logprobs", "logprobs", "seed")
"""Optional request fields, dropped in this order while the server refuses a request with
HTTP 400/422: vLLM's `return_token_ids` is an extension others reject (transformers serve
does), and some hosted models refuse log-probabilities or seeds."""
_PROBE: Messages = [{"role": "user", "content": "Reply with one word."}]


class OpenAIPolicy:
    """Chat completions from an OpenAI-compatible server, `concurrency` requests in flight."""

    name = "openai"
    tokenizer = None

    def __init__(
        self,
        base_url: str,
        endpoint: EndpointSettings,
        settings: GenerationSettings | None = None,
        *,
        backoff: Backoff | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.endpoint = endpoint
        self.settings = settings or GenerationSettings(endpoint=endpoint)
        self.backoff = backoff or Backoff()
        self._rng = random.Random()  # retry jitter only: sampled tokens never depend on it
        self.features: tuple[str, ...] = FEATURES
        """The optional fields this server accepts (settled when the policy is built)."""
        self.served_model: str | None = None
        """The model name the server answered with (it may differ from the one asked)."""
        self.owned_by: str | None = None
        self.requests = 0
        self.retries = 0
        self.request_seconds = 0.0
        """Summed wall time of the requests (sending to reply), retries included."""
        self.generate_seconds = 0.0
        """Wall time spent inside `generate`."""
        self._loop = _LoopThread()
        self._slots: asyncio.Semaphore | None = None
        self._client = openai.AsyncOpenAI(
            base_url=self.base_url,
            api_key=_api_key(endpoint),
            timeout=endpoint.timeout_seconds,
            max_retries=0,  # retried here, up to a total deadline the client does not have
        )
        try:
            self._loop.run(self._connect())
        except BaseException:
            self.close()
            raise

    def describe(self) -> PolicyInfo:
        return PolicyInfo(
            name="openai",
            extra={
                "base_url": self.base_url,
                "model": self.endpoint.model,
                "served_model": self.served_model,
                "owned_by": self.owned_by,
                "features": self._sent(self.features),
                "concurrency": self.endpoint.concurrency,
            },
        )

    def release(self, episodes: Sequence[EpisodeKey]) -> None:
        """The server keeps no state of ours: nothing to forget."""

    def generate(self, requests: Sequence[PolicyRequest]) -> list[Completion]:
        if not requests:
            return []
        t0 = time.perf_counter()
        try:
            return self._loop.run(self._batch(requests))
        finally:
            self.generate_seconds += time.perf_counter() - t0

    def close(self) -> None:
        """Close the connections and stop the policy's event loop."""
        if self._loop.alive:
            with suppress(Exception):
                self._loop.run(self._client.close())
        self._loop.close()

    # -- on the policy's event loop ----------------------------------------------------------

    async def _connect(self) -> None:
        """Check the model is served and settle which optional fields the server accepts."""
        self._slots = asyncio.Semaphore(self.endpoint.concurrency)
        deadline = min(self.endpoint.retry_seconds, CONNECT_SECONDS)
        try:
            page = await self._attempts(self._client.models.list, deadline)
        except (openai.NotFoundError, openai.UnprocessableEntityError):
            page = None  # a server without /models: the probe below finds out the rest
        except (GaveUp, openai.APIError) as exc:
            raise self._error(exc, building=True) from exc
        if page is not None:
            served = {m.id: m for m in page.data}
            if self.endpoint.model not in served:
                listed = ", ".join(sorted(served)[:10]) or "none"
                raise PolicyError(
                    f"{self.base_url} does not serve model {self.endpoint.model!r} "
                    f"(it serves: {listed}); pass one of them with --model"
                )
            self.owned_by = getattr(served[self.endpoint.model], "owned_by", None)
        features = list(FEATURES)
        while True:
            body = self._body(_PROBE, seed=0, features=features, max_tokens=1)
            try:
                reply = await self._attempts(
                    lambda body=body: self._client.chat.completions.create(**body), deadline
                )
                break
            except (openai.BadRequestError, openai.UnprocessableEntityError) as exc:
                sent = [f for f in features if f in self._sent(features)]
                if not sent:
                    raise self._error(exc, building=True) from exc
                features.remove(sent[0])
            except (GaveUp, openai.APIError) as exc:
                raise self._error(exc, building=True) from exc
        self.features = tuple(features)
        self.served_model = getattr(reply, "model", None)

    async def _batch(self, requests: Sequence[PolicyRequest]) -> list[Completion]:
        tasks = [asyncio.ensure_future(self._one(r)) for r in requests]
        try:
            return list(await asyncio.gather(*tasks))
        except BaseException:
            # One request failed for good (or the caller gave up): the rest are dropped now
            # rather than left to finish their own retries.
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise

    async def _one(self, request: PolicyRequest) -> Completion:
        assert self._slots is not None
        body = self._body(
            request.messages,
            seed=request.step_seed,
            features=self.features,
            max_tokens=self.settings.max_new_tokens,
        )
        async with self._slots:
            t0 = time.perf_counter()
            try:
                reply = await self._attempts(
                    lambda: self._client.chat.completions.create(**body),
                    self.endpoint.retry_seconds,
                )
            except (GaveUp, openai.APIError) as exc:
                raise self._error(exc) from exc
            finally:
                self.request_seconds += time.perf_counter() - t0
        self.requests += 1
        try:
            return completion_from_reply(reply)
        except ValueError as exc:
            raise PolicyError(f"{self.base_url} sent an unusable reply: {exc}") from exc

    async def _attempts(self, call: Any, deadline: float) -> Any:
        return await call_with_retries(
            call,
            timeout_seconds=self.endpoint.timeout_seconds,
            deadline_seconds=deadline,
            classify=_classify,
            backoff=self.backoff,
            rng=self._rng,
            on_retry=self._count_retry,
        )

    def _count_retry(self, exc: BaseException) -> None:
        self.retries += 1

    def _sent(self, features: Sequence[str]) -> list[str]:
        """Of `features`, those a request actually carries with these settings."""
        return [f for f in features if f != "top_logprobs" or self.endpoint.top_logprobs > 0]

    def _body(
        self, messages: Messages, *, seed: int, features: Sequence[str], max_tokens: int
    ) -> dict[str, Any]:
        sent = self._sent(features)
        body: dict[str, Any] = {
            "model": self.endpoint.model,
            "messages": messages,
            "max_tokens": max_tokens,
            "temperature": self.settings.temperature,
            "top_p": self.settings.top_p,
        }
        if "seed" in sent:
            body["seed"] = seed
        if "logprobs" in sent:
            body["logprobs"] = True
        if "top_logprobs" in sent and "logprobs" in sent:
            body["top_logprobs"] = self.endpoint.top_logprobs
        if "token_ids" in sent:
            body["extra_body"] = {"return_token_ids": True}
        return body

    def _error(self, exc: BaseException, *, building: bool = False) -> PolicyError:
        """One line for the user: what failed, and what to do."""
        if isinstance(exc, GaveUp):
            then = (
                "is the server up at that URL?"
                if building
                else "continue the run with --resume once it answers"
            )
            return PolicyError(
                f"{self.base_url} did not answer: {_describe(exc.last)} ({exc.attempts} "
                f"attempts in {exc.seconds:.0f} s); {then}"
            )
        if isinstance(exc, openai.APIStatusError):
            hint = ""
            if exc.status_code in (401, 403):
                name = self.endpoint.api_key_env
                hint = (
                    f" (check the key in ${name})"
                    if name
                    else " (the server wants a key: name its variable with --api-key-env VAR)"
                )
            return PolicyError(
                f"{self.base_url} refused the request: HTTP {exc.status_code} "
                f"{_server_message(exc)}{hint}"
            )
        return PolicyError(f"{self.base_url}: {_describe(exc)}")


class _LoopThread:
    """An event loop on a daemon thread; the runner's (synchronous) thread waits on it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, daemon=True, name="rollscope-openai"
        )
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()  # interrupted while waiting (Ctrl-C): drop the requests in flight
            raise

    def close(self) -> None:
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=5)
        if not self._thread.is_alive() and not self.loop.is_closed():
            self.loop.close()


def _classify(exc: BaseException) -> float | None:
    """None for a final error; else the least wait before retrying (the server's Retry-After)."""
    if isinstance(exc, TimeoutError | openai.APIConnectionError):
        return 0.0
    if isinstance(exc, openai.APIStatusError):
        code = exc.status_code
        if code in (408, 409, 429) or code >= 500:
            return _retry_after(exc.response.headers)
    return None


def _retry_after(headers: Any) -> float:
    """Seconds the server asked to wait (`retry-after-ms` or `retry-after`), else 0."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        with suppress(ValueError):
            return max(0.0, float(value) * scale)  # an HTTP date is not honoured: backoff only
    return 0.0


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError | openai.APITimeoutError):
        return "timed out"
    if isinstance(exc, openai.APIStatusError):
        return f"HTTP {exc.status_code} {_server_message(exc)}"
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__
        return f"connection failed ({type(cause).__name__ if cause else 'no reply'})"
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _server_message(exc: openai.APIStatusError) -> str:
    """The server's own words from its error body (OpenAI, FastAPI and plain shapes), one line."""
    body = exc.body
    message: Any = None
    if isinstance(body, dict):
        error = body.get("error")
        message = error.get("message") if isinstance(error, dict) else error
        message = message or body.get("message") or body.get("detail")
    text = " ".join(str(message or exc.message).split())
    return text[:300]


def _api_key(endpoint: EndpointSettings) -> str:
    """The key from the variable the settings name; the key itself is never stored."""
    name = endpoint.api_key_env
    if name is None:
        return NO_KEY
    value = os.environ.get(name, "").strip()
    if not value:
        raise PolicyError(f"the environment variable {name} (--api-key-env) is not set or empty")
    return value


def openai_policy(arg: str | None, settings: GenerationSettings) -> OpenAIPolicy:
    """Registry factory of `openai:BASE_URL` (the model and limits are `settings.endpoint`)."""
    if not arg:
        raise PolicyError("the openai policy needs the server's URL: --policy openai:BASE_URL")
    if settings.endpoint is None:
        raise PolicyError("the openai policy needs the model's name: --model NAME")
    return OpenAIPolicy(arg, settings.endpoint, settings)
