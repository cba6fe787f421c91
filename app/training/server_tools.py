"""The SQL environment server as tools, for `GRPOTrainer(environment_factory=...)`.

The in-process tools (`app.training.tool_env`) record into a store the trainer opens; these
are a client of `rollscope env-server`, which records instead, so the trainer needs no store
(and may generate with vLLM). Each rollout is one session's episode; the trainer's global step
goes with each reset, through `callback()`.

```python
tools = ServerTools("http://127.0.0.1:8000")
trainer = GRPOTrainer(..., environment_factory=tools, callbacks=[tools.callback()])
```
"""

from __future__ import annotations

import threading
from typing import Any

from app.env_client import SQLAction, SQLEnvClient
from app.training.tools import SQLTools
from rollout_core.records import ActionKind


class ServerTools:
    """Makes `ServerToolEnvironment`s, each a session of the server at `base_url`."""

    def __init__(self, base_url: str, *, token: str | None = None) -> None:
        self.base_url = base_url
        self.token = token
        self.train_step = 0
        self._made: list[ServerToolEnvironment] = []
        self._lock = threading.Lock()

    def __call__(self) -> ServerToolEnvironment:
        env = ServerToolEnvironment(self)
        with self._lock:
            self._made.append(env)
        return env

    def callback(self) -> Any:
        """A TrainerCallback that follows the trainer's global step and, when training ends,
        closes the sessions (an episode the model left unanswered ends `abandoned`)."""
        from transformers import TrainerCallback

        tools = self

        class _Follow(TrainerCallback):
            def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                tools.train_step = int(state.global_step)

            def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                tools.close()

        return _Follow()

    def close(self) -> None:
        """Close every session made so far."""
        with self._lock:
            made, self._made = self._made, []
        for env in made:
            env._close_session()


class ServerToolEnvironment(SQLTools):
    """One rollout at a time of the server's environment, played through tool calls."""

    def __init__(self, tools: ServerTools) -> None:
        self._tools = tools
        self._client = SQLEnvClient(tools.base_url, token=tools.token).sync()
        self._reward = 0.0
        self._done = True

    def reset(self, **row: Any) -> str | None:
        """Open the row's question (`question_id`); returns the tables to add to the prompt."""
        result = self._client.reset(
            question_id=str(row["question_id"]), train_step=self._tools.train_step
        )
        self._reward, self._done = 0.0, False
        return "\n\nTables: " + ", ".join(result.observation.tables)

    def get_reward(self) -> float:
        """The episode's total reward so far."""
        return self._reward

    def _close_session(self) -> None:
        # Not public: TRL makes a tool of every public method.
        self._client.close()

    def _act(self, kind: ActionKind, argument: str, call: str) -> str:
        if self._done:
            raise RuntimeError("the episode is over; no more tool calls")
        result = self._client.step(SQLAction(action_type=kind, argument=argument, raw_output=call))
        obs = result.observation
        self._reward += float(result.reward or 0.0)
        self._done = obs.done
        return f"Error: {obs.error}" if obs.error is not None else obs.result
