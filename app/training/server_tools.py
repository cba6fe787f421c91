"""The SQL environment server as tools, for `GRPOTrainer(environment_factory=...)`.

The in-process tools (`app.training.tool_env`) record into a store the trainer opens; these
are a client of `rollscope env-server`, which records instead, so the trainer needs no store
(and may generate with vLLM). Each rollout is one session's episode; the trainer's global step
goes with each reset, through `callback()`. Given the trainer, the callback also sends the
server how the trainer scored each batch (`POST /trainer-scores`: its advantages and reward
functions' values, `app.training.trainer_scores`), which the server records on the episodes.

```python
tools = ServerTools("http://127.0.0.1:8000")
trainer = GRPOTrainer(..., environment_factory=tools)
trainer.add_callback(tools.callback(trainer))
```

The trainer's evaluation rollouts (`eval_strategy`) go to the server at `eval_url`, a second
`rollscope env-server` recording a run of its own, each at the step it evaluated; without one
they are recorded on the training server with no training step, so that the training curves
count training alone.
"""

from __future__ import annotations

import threading
import warnings
from typing import Any

from app.env_client import (
    EpisodeScore,
    NotRecorded,
    ScoresNotRecorded,
    SQLAction,
    SQLEnvClient,
    send_trainer_resumed,
    send_trainer_scores,
)
from app.training.tools import SQLTools
from app.training.trainer_scores import ScoredAs, batch_scores, last_batch, logged_prompt
from rollout_core.records import ActionKind, EpisodeKey


class ServerTools:
    """Makes `ServerToolEnvironment`s, each a session of the server at `base_url`."""

    def __init__(
        self, base_url: str, *, token: str | None = None, eval_url: str | None = None
    ) -> None:
        self.base_url = base_url
        self.token = token
        self.eval_url = eval_url
        self.train_step = 0
        self.model: Any = None
        """The trained model (from the callback): evaluating while it is not in training mode."""
        self.resumed = False
        """Whether the trainer began at a checkpoint's step (its evaluations after it are
        played again)."""
        self._evaluated = False
        self._made: list[ServerToolEnvironment] = []
        self._lock = threading.Lock()
        self._scored: tuple[str | None, tuple[EpisodeKey, ...]] = (None, ())
        """The server and episodes of the last batch whose scores were sent (a batch the
        trainer trains several optimizer steps on is sent once)."""
        self._warned = False
        self._warned_evaluation = False

    def __call__(self) -> ServerToolEnvironment:
        env = ServerToolEnvironment(self)
        with self._lock:
            self._made.append(env)
        return env

    def callback(self, trainer: Any = None) -> Any:
        """A TrainerCallback that follows the trainer's global step and, when training ends,
        closes the sessions (an episode the model left unanswered ends `abandoned`). Given
        the trainer (`trainer.add_callback(tools.callback(trainer))`), it sends the server the
        trainer's scores of each batch after the step or evaluation that scored it."""
        from transformers import TrainerCallback

        tools = self

        def scored() -> None:
            if trainer is not None:
                tools.send_scores(trainer)

        class _Follow(TrainerCallback):
            def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                tools.model = kw.get("model")
                tools.train_step = int(state.global_step)
                if int(state.global_step) > 0:  # resumed from a checkpoint: its step is back
                    tools.resumed = True
                    tools.send_resumed(int(state.global_step))

            def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                tools.train_step = int(state.global_step)

            def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                # The step is counted by now: an evaluation after it is of its weights.
                tools.train_step = int(state.global_step)
                scored()

            def on_evaluate(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                scored()

            def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                scored()
                tools.close()

        return _Follow()

    @property
    def evaluating(self) -> bool:
        """Whether the trainer is evaluating (its model out of training mode)."""
        return self.model is not None and not bool(self.model.training)

    def reset_to(self) -> tuple[str, int | None]:
        """The server the episode about to begin goes to, and the training step it is
        recorded at: an evaluation's at its own server's run, or at none on the training's.
        The first evaluation of a resumed trainer replaces, on its server, the evaluations of
        that step and later."""
        if not self.evaluating:
            return self.base_url, self.train_step
        if self.eval_url is None:
            if not self._warned_evaluation:
                self._warned_evaluation = True
                warnings.warn(
                    f"the trainer evaluates: its evaluation rollouts are recorded on "
                    f"{self.base_url} without a training step, apart from the training "
                    "curves; give ServerTools eval_url= a second `rollscope env-server` to "
                    "record each evaluation at its step",
                    stacklevel=2,
                )
            return self.base_url, None
        with self._lock:
            first, self._evaluated = not self._evaluated, True
        if first and self.resumed:
            self.send_resumed(self.train_step, self.eval_url)
        return self.eval_url, self.train_step

    def send_scores(self, trainer: Any) -> int | None:
        """Send the server the trainer's scores of its last batch, played by its
        `environments` in the order of its log; the episodes the server scored, or None where
        nothing was sent (the batch is not all this factory's sessions, was sent already, or
        the log does not hold it). A server that cannot take them is warned of, not raised:
        training goes on without them."""
        played = last_batch(
            trainer,
            lambda env: (
                env.scored_as
                if isinstance(env, ServerToolEnvironment) and env._tools is self
                else None
            ),
        )
        if played is None:
            return None
        # A batch is the trainer's training or its evaluation: one server's sessions.
        urls = {env.url for env in trainer.environments}
        if len(urls) != 1 or None in urls:
            return None
        (url,) = urls
        keys = tuple(key for key, _ in played)
        if (url, keys) == self._scored:
            return None
        scored = batch_scores(trainer, [prompt for _, prompt in played])
        if scored is None:
            return None
        try:
            answer = send_trainer_scores(
                url,
                (
                    EpisodeScore(
                        question_id=key.question_id,
                        sample_index=key.sample_index,
                        advantage=s.advantage,
                        rewards=s.rewards,
                    )
                    for key, s in zip(keys, scored, strict=True)
                ),
                token=self.token,
            )
        except (ScoresNotRecorded, ValueError) as exc:
            if not self._warned:
                warnings.warn(
                    f"the environment server at {url} did not record the trainer's "
                    f"scores ({exc}); training goes on, and GRPO groups counts this run's "
                    "groups by the environment's reward",
                    stacklevel=2,
                )
                self._warned = True
            return None
        self._scored = (url, keys)
        return answer["scored"]

    def send_resumed(self, step: int, url: str | None = None) -> int | None:
        """Tell the server (`url`, default the training's) the trainer resumed from a
        checkpoint at `step`, which marks the episodes of the steps it plays again; how many
        were marked, or None where the server could not take it (warned of: training goes
        on, and Training counts both plays)."""
        url = url or self.base_url
        try:
            return send_trainer_resumed(url, step, token=self.token)
        except NotRecorded as exc:
            warnings.warn(
                f"the environment server at {url} did not mark the steps this resumed "
                f"trainer plays again ({exc}); training goes on, and the Training page counts "
                "both plays of them",
                stacklevel=2,
            )
            return None

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
        self._clients: dict[str, Any] = {}
        """A session of each server it played on (the training's, the evaluation's)."""
        self._client: Any = None
        self.url: str | None = None
        """The server of the last episode begun."""
        self._reward = 0.0
        self._done = True
        self.key: EpisodeKey | None = None
        """The last episode begun, as the server numbered it."""
        self.trainer_prompt: list[dict[str, Any]] | None = None
        """Its prompt as the trainer logs it: the row's, the tables added."""

    @property
    def scored_as(self) -> ScoredAs | None:
        """The last episode begun and its prompt as the trainer logs it, once both are known."""
        if self.key is None or self.trainer_prompt is None:
            return None
        return self.key, self.trainer_prompt

    def reset(self, **row: Any) -> str | None:
        """Open the row's question (`question_id`); returns the tables to add to the prompt."""
        url, train_step = self._tools.reset_to()
        if url not in self._clients:
            self._clients[url] = SQLEnvClient(url, token=self._tools.token).sync()
        self._client, self.url = self._clients[url], url
        result = self._client.reset(question_id=str(row["question_id"]), train_step=train_step)
        self._reward, self._done = 0.0, False
        obs = result.observation
        index = (obs.metadata or {}).get("sample_index")
        self.key = EpisodeKey(obs.question_id, index) if isinstance(index, int) else None
        tables = "\n\nTables: " + ", ".join(obs.tables)
        self.trainer_prompt = logged_prompt(row.get("prompt"), tables)
        return tables

    def get_reward(self) -> float:
        """The episode's total reward so far."""
        return self._reward

    def _close_session(self) -> None:
        # Not public: TRL makes a tool of every public method.
        for client in self._clients.values():
            client.close()

    def _act(self, kind: ActionKind, argument: str, call: str) -> str:
        if self._done:
            raise RuntimeError("the episode is over; no more tool calls")
        result = self._client.step(SQLAction(action_type=kind, argument=argument, raw_output=call))
        obs = result.observation
        self._reward += float(result.reward or 0.0)
        self._done = obs.done
        return f"Error: {obs.error}" if obs.error is not None else obs.result
