"""The typed client of `rollscope env-server`, as OpenEnv environments ship one.

```python
from app.env_client import SQLAction, SQLEnvClient

with SQLEnvClient("http://127.0.0.1:8000").sync() as env:
    result = env.reset(question_id="demo-library-01")
    result = env.step(SQLAction(action_type="DESCRIBE", argument="books"))
    print(result.observation.result, result.reward, result.done)
```

Any OpenEnv client plays the server too (`GenericEnvClient` with plain dicts); this one reads
and writes the environment's own models.
"""

from __future__ import annotations

from typing import Any

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient

from app.env_server.models import SQLAction, SQLObservation, SQLState

__all__ = ["SQLAction", "SQLEnvClient", "SQLObservation", "SQLState"]


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
