"""The environment's wire models, named as the original training code's `sql_env.models`:
what a client sends (`SQLAction`), what it reads back (`SQLObservation`) and the session's
`SQLState`. OpenEnv serves their JSON schemas at `/schema`."""

from __future__ import annotations

import json
from typing import Annotated, Any

from openenv.core.env_server.types import Action, Observation, State
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema

from rollout_core.keys import key_problem
from rollout_core.records import ActionKind


class SQLAction(Action):  # type: ignore[misc]  # openenv ships no type hints
    """One action: `action_type` and `argument`, or the model's `raw_output` alone to have the
    server parse it as `rollscope run` parses a model's text."""

    action_type: ActionKind | None = Field(
        default=None,
        description="DESCRIBE, SAMPLE, QUERY or ANSWER (any case); leave it out to parse "
        "raw_output instead",
    )
    argument: str = Field(default="", description="Table name, SQL text or answer text")
    raw_output: str | None = Field(
        default=None,
        description="The model's text as generated, kept in the step's record (without it, "
        "the record keeps the action sent, as JSON)",
    )
    malformed: SkipJsonSchema[str | None] = Field(default=None, exclude=True)
    """Why the message was not a valid action: the session answers with an error observation
    instead of dropping the message."""

    @field_validator("action_type", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.strip().upper() if isinstance(value, str) else value

    @model_validator(mode="wrap")
    @classmethod
    def _keep_malformed(cls, data: Any, handler: Any) -> Any:
        try:
            return handler(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "action"
            return cls.model_construct(malformed=f"{where}: {first['msg']}")


def typed_action_text(action_type: ActionKind, argument: str) -> str:
    """A step's raw output where the client sent the action and not the model's text: the
    action, as JSON."""
    return json.dumps({"action_type": action_type, "argument": argument}, ensure_ascii=False)


class SQLObservation(Observation):  # type: ignore[misc]
    """What the environment answers: the question and its tables, then each action's result."""

    question: str = Field(default="", description="The question to answer")
    question_id: str = Field(default="", description="The question's id in the dataset")
    db_id: str = Field(default="", description="The database the question is about")
    tables: list[str] = Field(default_factory=list, description="The database's tables")
    evidence: str | None = Field(default=None, description="BIRD's hint, when the question has one")
    result: str = Field(default="", description="The last action's result (empty after reset)")
    error: str | None = Field(default=None, description="Why the last action failed, if it did")
    step: int = Field(default=0, description="Steps taken in this episode (0 after reset)")
    steps_left: int = Field(default=0, description="Steps left before the budget ends the episode")


class SQLState(State):  # type: ignore[misc]
    """The session's episode: which question and sample, how far it got."""

    question_id: str | None = None
    sample_index: int | None = None
    done: bool = True
    """True when no episode is in play (none begun, or the last one ended)."""
    total_reward: float = 0.0


SCORES_PATH = "/trainer-scores"
"""rollscope's own route beside OpenEnv's: a trainer's scores of the episodes it trained on
(`app.env_client.send_trainer_scores` posts them)."""
MOST_SCORES = 100_000
"""Episodes one `/trainer-scores` request may score: a generation batch is far fewer."""


RESUMED_PATH = "/trainer-resumed"
"""rollscope's own route: a trainer resumed from a checkpoint says the step it begins at, and
the run's episodes of that step and later, which it plays again, are marked replaced
(`app.env_client.send_trainer_resumed` posts it)."""


class TrainerResumed(BaseModel):
    """The body of `POST /trainer-resumed`: the training step a resumed trainer begins at."""

    model_config = ConfigDict(extra="forbid")

    step: int = Field(ge=0, lt=2**31)


class EpisodeScore(BaseModel):
    """How a trainer scored one episode of the server's run, named by its question and sample
    index (a reset's `metadata`)."""

    model_config = ConfigDict(extra="forbid")

    question_id: str
    sample_index: int = Field(ge=0, lt=2**31)
    advantage: float = Field(allow_inf_nan=False)
    rewards: dict[str, Annotated[float, Field(allow_inf_nan=False)]] = Field(
        default_factory=dict, description="Each reward function's value by its name"
    )

    @field_validator("question_id")
    @classmethod
    def _storable_id(cls, value: str) -> str:
        if (problem := key_problem(value)) is not None:
            raise ValueError(f"the question id {problem}")
        return value

    @field_validator("rewards")
    @classmethod
    def _storable_names(cls, value: dict[str, float]) -> dict[str, float]:
        # The store keys each value by its name, as an import's or a Recorder's.
        for name in value:
            if not name.strip():
                raise ValueError("a reward's name is empty")
            if (problem := key_problem(name)) is not None:
                raise ValueError(f"the reward name {name[:40]!r} {problem}")
        return value


class TrainerScores(BaseModel):
    """The body of `POST /trainer-scores`: a trainer's advantages and reward functions' values
    of episodes it trained on, recorded on them beside the environment's reward."""

    model_config = ConfigDict(extra="forbid")

    scores: list[EpisodeScore] = Field(max_length=MOST_SCORES)
