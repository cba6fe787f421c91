"""The typed client of `rollscope env-server`, as OpenEnv environments ship one.

```python
from app.env_client import SQLAction, SQLEnvClient

with SQLEnvClient("http://127.0.0.1:8000").sync() as env:
    result = env.reset(question_id="demo-library-01")
    result = env.step(SQLAction(action_type="DESCRIBE", argument="books"))
    print(result.observation.result, result.reward, result.done)
```

Any OpenEnv client plays the server too (`GenericEnvClient` with plain dicts); this one reads
and writes the environment's own models. `send_trainer_scores` gives the server a trainer's
advantages and reward functions' values of the episodes it played, from any training loop.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from typing import Any

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient

from app.env_server.models import (
    MOST_SCORES,
    RESUMED_PATH,
    SCORES_PATH,
    EpisodeScore,
    SQLAction,
    SQLObservation,
    SQLState,
)

__all__ = [
    "EpisodeScore",
    "NotRecorded",
    "SQLAction",
    "SQLEnvClient",
    "SQLObservation",
    "SQLState",
    "ScoresNotRecorded",
    "send_trainer_resumed",
    "send_trainer_scores",
]


class NotRecorded(Exception):
    """The server did not record what a trainer sent: unreachable, or it refused it."""


class ScoresNotRecorded(NotRecorded):
    """The server did not take a trainer's scores: unreachable, or it refused them."""


def send_trainer_scores(
    base_url: str,
    scores: Iterable[EpisodeScore | Mapping[str, Any]],
    *,
    token: str | None = None,
    timeout: float = 30.0,
) -> dict[str, int]:
    """Record how a trainer scored episodes the server played, each named by its question and
    its sample index (a reset's `metadata["sample_index"]`): `{"question_id": ...,
    "sample_index": ..., "advantage": ..., "rewards": {reward function: value}}`. Returns
    `{"scored": N, "unknown": M}`, M the scores that named no episode of the server's run.

    A score that is not one (a missing field, a number that is not finite) raises pydantic's
    `ValidationError` before anything is sent; a server that cannot be reached or refuses the
    request raises `ScoresNotRecorded`. Any number of scores: they go in requests of at most
    `MOST_SCORES`, each recorded whole or not at all."""
    checked = [EpisodeScore.model_validate(s) for s in scores]
    total = {"scored": 0, "unknown": 0}
    for start in range(0, len(checked), MOST_SCORES):
        part = checked[start : start + MOST_SCORES]
        body = {"scores": [s.model_dump() for s in part]}
        answer = _post(base_url, SCORES_PATH, body, "the scores", token, timeout, ScoresNotRecorded)
        total["scored"] += int(answer["scored"])
        total["unknown"] += int(answer["unknown"])
    return total


def send_trainer_resumed(
    base_url: str, step: int, *, token: str | None = None, timeout: float = 30.0
) -> int:
    """Tell the server a trainer resumed from a checkpoint begins at training step `step`:
    the run's episodes of that step and later, which it plays again, are marked replaced, so
    the Training page reads each step as its latest play. Returns how many were marked; a
    server that cannot be reached or refuses raises `NotRecorded`."""
    body = {"step": step}
    answer = _post(base_url, RESUMED_PATH, body, "the resumed step", token, timeout, NotRecorded)
    return int(answer["marked"])


def _post(
    base_url: str,
    path: str,
    body: object,
    what: str,
    token: str | None,
    timeout: float,
    error: type[NotRecorded],
) -> dict[str, Any]:
    """POST `body` as JSON to one of rollscope's routes; its JSON answer, or `error`."""
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    url = base_url.rstrip("/") + path
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers=headers, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return dict(json.load(response))
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:500]
        raise error(f"{url} refused {what}: HTTP {exc.code} {detail}".rstrip()) from exc
    except (OSError, ValueError) as exc:
        raise error(f"no answer from {url}: {exc}") from exc


class SQLEnvClient(EnvClient[SQLAction, SQLObservation, SQLState]):  # type: ignore[misc]
    """A session of the SQL environment server: `reset(question_id=..., seed=...,
    train_step=..., group_index=...)`, `step(SQLAction(...))`, `state()`."""

    def __init__(self, base_url: str, *, token: str | None = None, **kwargs: Any) -> None:
        """`token`: the server's `--token`, sent as `Authorization: Bearer <token>`."""
        if token:
            kwargs["headers"] = {**kwargs.get("headers", {}), "Authorization": f"Bearer {token}"}
        super().__init__(base_url, **kwargs)

    def _step_payload(self, action: SQLAction) -> dict[str, Any]:
        dumped: dict[str, Any] = action.model_dump(exclude_none=True)
        return dumped

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[SQLObservation]:
        observation = SQLObservation(
            **payload.get("observation", {}),
            reward=payload.get("reward"),
            done=bool(payload.get("done", False)),
        )
        return StepResult(
            observation=observation,
            reward=payload.get("reward"),
            done=observation.done,
            metadata=payload.get("metadata"),
        )

    def _parse_state(self, payload: dict[str, Any]) -> SQLState:
        return SQLState(**payload)
