"""The function TRL's GRPOTrainer calls for rollouts: every prompt played as a multi-turn
episode by the batched runner with the trainer's own model, recorded in the store, and handed
back as token ids, log-probabilities and an environment mask."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from app.training.run import TrainingRun, evaluation_spec
from app.training.settings import model_name, training_settings
from app.training.tokens import EpisodeTokens, TurnTokens
from app.training.trainer_scores import PlayedBatch, read_scores
from rollout_core.datasets import Dataset
from rollout_core.environment import SQLEnvironment
from rollout_core.prompts import initial_messages
from rollout_core.records import (
    EpisodeKey,
    EpisodeRecord,
    IterationBatch,
    Question,
    RunSpec,
)
from rollout_core.runner import EpisodeTask, episode_seed, run_episodes
from rollout_core.settings import EnvironmentSettings, GenerationSettings
from storage.sink import StoreSink
from storage.store import Store
from storage.training import Counters

Messages = list[dict[str, str]]


def opening_messages(
    dataset: Dataset, questions: Sequence[Question], environment: EnvironmentSettings
) -> list[Messages]:
    """The chat messages each question's episode opens with (system prompt, question, tables)."""
    with SQLEnvironment(dataset=dataset, settings=environment) as env:
        return [
            initial_messages(env.reset(question_id=q.id), environment.step_budget)
            for q in questions
        ]


def prompt_key(messages: Sequence[dict[str, Any]]) -> str:
    """What identifies a question in a prompt: its user messages (the system prompt may differ)."""
    return json.dumps([m.get("content") for m in messages if m.get("role") == "user"])


@dataclass(frozen=True, slots=True)
class Played:
    """One episode as the trainer gets it back."""

    record: EpisodeRecord
    tokens: EpisodeTokens | None
    episode_id: int


class _Recorder:
    """The runner's sink: the store first, then each step's tokens for the next turn."""

    def __init__(self, sink: StoreSink, tokens: TurnTokens) -> None:
        self.sink = sink
        self.tokens = tokens
        self.finished: dict[EpisodeKey, EpisodeRecord] = {}
        self.sequences: dict[EpisodeKey, EpisodeTokens] = {}

    def write(self, batch: IterationBatch) -> None:
        self.sink.write(batch)
        for step in batch.steps:
            self.tokens.record(step)
        for episode in batch.finished:
            self.finished[episode.key] = episode
            if episode.key in self.tokens.episodes:
                self.sequences[episode.key] = self.tokens.pop(episode.key)


@dataclass(slots=True)
class _Recording:
    """Where one mode's rollouts go: training's, or evaluation's, each a run of its own."""

    run: TrainingRun
    dataset: Dataset
    questions: list[Question]
    numbering: Counters = field(default_factory=Counters)
    by_prompt: dict[str, Question] | None = None

    @property
    def run_id(self) -> int:
        assert self.run.run_id is not None
        return self.run.run_id


class RolloutFunction:
    """`rollout_func(prompts, trainer)` for `GRPOTrainer`; build it with
    `app.trl.make_rollout_func`.

    Training rollouts record into run `spec.name`; the trainer's evaluation rollouts into
    run `eval_name`, of the questions of `eval_dataset` (default: the training's), each
    carrying the step it evaluated: the training curves count training alone, and
    Compare sets the evaluation's steps (checkpoints) side by side."""

    def __init__(
        self,
        *,
        store: Store,
        spec: RunSpec,
        dataset: Dataset,
        questions: Sequence[Question],
        resume: bool = False,
        eval_name: str,
        eval_dataset: Dataset | None = None,
        eval_questions: Sequence[Question] | None = None,
    ) -> None:
        self.store = store
        self.spec = spec
        """The run's spec without the trainer's arguments (added at the first call)."""
        self.run = TrainingRun(store, spec.name, resume=resume, evaluation=eval_name)
        self.run.check_name()
        self._training = _Recording(self.run, dataset, list(questions))
        assert self.run.evaluation is not None
        self._evaluation = _Recording(
            self.run.evaluation,
            eval_dataset or dataset,
            list(eval_questions if eval_questions is not None else questions),
        )
        self._callback_added = False
        self._started: RunSpec | None = None
        """The training run's spec, with the trainer's arguments, once started."""
        self._unscored: tuple[int, PlayedBatch] | None = None
        """The last call's run and batch, until the trainer's scores of it are recorded."""

    @property
    def dataset(self) -> Dataset:
        """The training questions' dataset."""
        return self._training.dataset

    @property
    def run_id(self) -> int | None:
        """The run's id in the store, once the trainer has asked for rollouts."""
        return self.run.run_id

    @property
    def eval_run_id(self) -> int | None:
        """The evaluation run's id, once the trainer has evaluated."""
        return self._evaluation.run.run_id

    def recording(self) -> Any:
        """`with rollout_func.recording(): trainer.train()` records a crash as `failed`."""
        return self.run.recording()

    def __call__(self, prompts: Sequence[Messages], trainer: Any) -> dict[str, list[Any]]:
        if getattr(trainer.args, "use_vllm", False):
            raise ValueError(
                "use_vllm=True is not supported yet: rollscope's rollout_func generates with "
                "the trainer's own model in process; set use_vllm=False in GRPOConfig"
            )
        self.record_scores(trainer)
        model = trainer.accelerator.unwrap_model(trainer.model)
        tokenizer = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)
        if self.run.run_id is None:
            self._check_evaluation_prompts(trainer)
        training = bool(trainer.model.training)
        size = trainer.num_generations if training else trainer.num_generations_eval
        into = self._training if training else self._evaluation
        questions = self._questions(prompts, size, into)
        generation = replace(
            self.spec.generation,
            temperature=float(trainer.args.temperature),
            top_p=float(trainer.args.top_p),
        )
        tokens = TurnTokens(tokenizer, (), 0)
        # Under mixed precision accelerate runs the model's forward in autocast: keys and values
        # come out in bf16, which neither a cache preallocated in the weights' dtype nor the CPU
        # shared-prefix kernel accepts; the growing cache takes them as they come.
        mixed = getattr(trainer.accelerator, "mixed_precision", "no") != "no"
        policy = _policy(model, tokenizer, generation, tokens, plain=not mixed)
        step = int(trainer.state.global_step)
        if self.run.run_id is None:
            self._start(trainer, generation, policy.describe(), len(prompts))
        if into.run.run_id is None:
            self._start_evaluation(trainer, policy.describe(), step)
        tasks = self._plan(questions, size, step, into.numbering)
        sink = _Recorder(self.store.sink(into.run_id), tokens)
        try:
            run_episodes(
                into.dataset,
                tasks,
                policy,
                sink,
                batch_size=generation.batch_size,
                environment=self.spec.environment,
            )
        except BaseException as exc:  # Ctrl-C lands here mostly: a step's time is its rollout
            self.run.finish_raised(exc)
            raise
        ids = self.store.episode_ids(into.run_id, [t.key for t in tasks])
        played = [
            Played(sink.finished[t.key], sink.sequences.get(t.key), ids[t.key]) for t in tasks
        ]
        self._unscored = (into.run_id, PlayedBatch(list(prompts), [p.episode_id for p in played]))
        return _output(played, prompts, tokens)

    def record_scores(self, trainer: Any) -> None:
        """Record the trainer's advantages and rewards of the last call's episodes, which it
        has scored by the end of the optimizer step or evaluation it played them for, and by
        the time it asks again or ends (`app.training.trainer_scores`)."""
        if self._unscored is None:
            return
        run_id, batch = self._unscored
        self._unscored = None
        self.store.record_trainer_scores(run_id, read_scores(trainer, batch))

    def _start(self, trainer: Any, generation: GenerationSettings, info: Any, batch: int) -> None:
        model = trainer.accelerator.unwrap_model(trainer.model)
        name = model_name(model, type(model).__name__)
        spec = replace(
            self.spec,
            policy=f"hf:{name}",
            checkpoint=name,
            generation=generation,
            samples=int(trainer.num_generations),
            training=training_settings(trainer),
        )
        at_step = int(trainer.state.global_step)
        self._started = spec
        _, numbering = self.run.start(spec, _planned(trainer, batch), info, at_step=at_step)
        self._training.numbering = numbering
        if not self._callback_added:
            trainer.add_callback(self.run.callback(scored=lambda: self.record_scores(trainer)))
            self._callback_added = True

    def _check_evaluation_prompts(self, trainer: Any) -> None:
        """Refuse, at the first rollout rather than at the first evaluation (hours in, maybe),
        a trainer's eval set with a prompt of no question the evaluation run plays."""
        sets = getattr(trainer, "eval_dataset", None)
        if sets is None:
            return
        for data in sets.values() if isinstance(sets, dict) else [sets]:
            if "prompt" in (getattr(data, "column_names", None) or ()):
                self._questions(list(data["prompt"]), 1, self._evaluation)

    def _start_evaluation(self, trainer: Any, info: Any, step: int) -> None:
        """Open the evaluation run at the trainer's first evaluation. Reopened (resumed), its
        episodes of this step and later are of evaluations this trainer plays again: those
        of the step a checkpoint was saved at came before the save, and are kept unless this
        trainer evaluates at its start."""
        into = self._evaluation
        assert self._started is not None
        size = int(trainer.num_generations_eval)
        spec = evaluation_spec(self._started, into.run.name, into.dataset, size)
        _, into.numbering = into.run.start(spec, None, info, at_step=step)

    def _questions(
        self, prompts: Sequence[Messages], size: int, into: _Recording
    ) -> list[Question]:
        """The question of each group of `size` equal prompts."""
        if size < 1 or len(prompts) % size:
            raise ValueError(f"got {len(prompts)} prompts, not groups of {size} equal prompts")
        if into.by_prompt is None:
            opening = opening_messages(into.dataset, into.questions, self.spec.environment)
            into.by_prompt = {}
            for q, messages in zip(into.questions, opening, strict=True):
                into.by_prompt.setdefault(prompt_key(messages), q)  # the same prompt: the first
        out = []
        for start in range(0, len(prompts), size):
            keys = {prompt_key(p) for p in prompts[start : start + size]}
            if len(keys) != 1:
                raise ValueError(
                    f"prompts {start}..{start + size - 1} differ: the trainer must repeat each "
                    f"prompt num_generations ({size}) times in a row"
                )
            key = keys.pop()
            if key not in into.by_prompt:
                raise ValueError(
                    "a prompt matches no question of this rollout function's "
                    + (
                        "dataset; build the training set with app.trl.training_dataset on the "
                        "same dataset"
                        if into is self._training
                        else "evaluation dataset; give make_rollout_func the trainer's "
                        "eval_dataset as eval_dataset= (or eval_questions=)"
                    )
                )
            out.append(into.by_prompt[key])
        return out

    def _plan(
        self, questions: Sequence[Question], size: int, step: int, numbering: Counters
    ) -> list[EpisodeTask]:
        """One task per prompt: each question's samples numbered on over the run, each group
        of `size` samples of a question one GRPO group of this training step."""
        seed = self.spec.generation.seed
        tasks = []
        for q in questions:
            group = numbering.next_group
            numbering.next_group += 1
            first = numbering.next_sample.get(q.id, 0)
            numbering.next_sample[q.id] = first + size
            tasks += [
                EpisodeTask(
                    q, index, episode_seed(seed, q.id, index), train_step=step, group_index=group
                )
                for index in range(first, first + size)
            ]
        return tasks


def _policy(
    model: Any,
    tokenizer: Any,
    settings: GenerationSettings,
    tokens: TurnTokens,
    *,
    plain: bool,
) -> Any:
    """The trainer's model as a policy for one rollout call (no copy; caches start empty)."""
    from rollout_core.policies.hf.policy import HFPolicy

    policy = HFPolicy.from_model(
        model,
        tokenizer,
        settings,
        encoder=tokens,
        shared_prefix=None if plain else False,
        static_cache=plain,
    )
    tokens.eos_ids = policy.eos_ids
    tokens.max_prompt_tokens = policy.max_prompt_tokens
    return policy


def _planned(trainer: Any, batch: int) -> int:
    """Episodes the training will play: rollout calls x prompts per call."""
    args = trainer.args
    steps = int(getattr(trainer.state, "max_steps", 0) or args.max_steps or 0)
    per_call = int(args.steps_per_generation or 1) * int(args.num_iterations or 1)
    return max(batch, -(-steps // per_call) * batch) if steps > 0 else batch


def _output(
    played: Sequence[Played], prompts: Sequence[Messages], tokens: TurnTokens
) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {
        k: []
        for k in (
            "prompt_ids",
            "completion_ids",
            "logprobs",
            "env_mask",
            "correct",
            "reward",
            "progress",
            "operational",
            "steps",
            "outcome",
            "episode_id",
        )
    }
    for p, prompt in zip(played, prompts, strict=True):
        seq = p.tokens
        if seq is None or not seq.completion_ids:  # an episode that could not start
            seq = _unplayed(prompt, tokens)
        out["prompt_ids"].append(seq.prompt_ids)
        out["completion_ids"].append(seq.completion_ids)
        out["logprobs"].append(seq.logprobs)
        out["env_mask"].append(seq.env_mask)
        out["correct"].append(p.record.outcome == "correct")
        out["reward"].append(p.record.reward)
        out["progress"].append(p.record.progress)
        out["operational"].append(p.record.operational)
        out["steps"].append(p.record.steps)
        out["outcome"].append(p.record.outcome)
        out["episode_id"].append(p.episode_id)
    return out


def _unplayed(prompt: Messages, tokens: TurnTokens) -> EpisodeTokens:
    """The prompt and one masked end token, for an episode whose environment failed to open."""
    end = min(tokens.eos_ids)
    ids = tokens.encode(tokens.render(list(prompt), generation=True))
    return EpisodeTokens(ids, [end], [0.0], [0])
