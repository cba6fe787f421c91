"""The training code's entry points, `play_episode` and `rollout_func`, on the batched runner.

Training scripts written against the original loop keep working: same names, same result
shape (`prompt, completion, content, metadata{...}, correct, progress, operational`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rollout_core.environment import SQLEnvironment
from rollout_core.policies.base import Policy
from rollout_core.records import EpisodeKey, EpisodeRecord, ListSink, Question, StepRecord
from rollout_core.runner import EpisodeTask, episode_seed, run_episodes
from rollout_core.settings import DEFAULT_MAX_NEW_TOKENS, DEFAULT_STEP_BUDGET, GenerationSettings

Config = Mapping[str, Any] | Any
"""A mapping, or an attribute object (dataclass, argparse.Namespace, SimpleNamespace) as the
original training code passes it."""


def _setting(config: Config, name: str, default: Any = None) -> Any:
    """`config[name]` or `config.name`; `default` when absent or None."""
    value = config.get(name) if isinstance(config, Mapping) else getattr(config, name, None)
    return default if value is None else value


def _as_policy(model: Any, tokenizer: Any, config: Config) -> Policy:
    """A Policy as given, or a transformers model and tokenizer wrapped in one."""
    if tokenizer is None:
        return model  # type: ignore[no-any-return]
    from rollout_core.policies.hf.policy import HFPolicy  # torch only when a model is given

    settings = GenerationSettings(
        max_new_tokens=int(_setting(config, "max_new_tokens", DEFAULT_MAX_NEW_TOKENS)),
        temperature=float(_setting(config, "temperature", 0.0)),
        top_p=float(_setting(config, "top_p", 1.0)),
        seed=int(_setting(config, "seed", 0)),
        threads=_setting(config, "threads"),
    )
    return HFPolicy.from_model(model, tokenizer, settings)


def _result(key: EpisodeKey, steps: list[StepRecord], episode: EpisodeRecord) -> dict[str, Any]:
    first_prompt = [dict(m) for m in steps[0].prompt] if steps else []
    last = steps[-1] if steps else None
    conversation = [dict(m) for m in last.prompt] if last else first_prompt
    if last is not None:
        conversation.append({"role": "assistant", "content": last.raw_output})
        conversation.append({"role": "user", "content": last.observation})
    successful = sum(1 for s in steps if s.error is None)
    return {
        "prompt": _render(first_prompt),
        "completion": "\n".join(s.raw_output for s in steps),
        "content": _render(conversation),
        "metadata": {
            "episode_id": str(key),
            "question_id": key.question_id,
            "step_count": episode.steps,
            "done": True,
            "answer_correct": episode.outcome == "correct"
            if episode.outcome in ("correct", "wrong")
            else None,
            "cumulative_progress": episode.progress,
            "operational_signals": {
                "successful_steps": successful,
                "repeated_actions": None
                if episode.operational is None
                else successful - int(episode.operational),
                "errors": len(steps) - successful,
                "unparsed": sum(1 for s in steps if not s.parsed),
            },
        },
        "correct": episode.outcome == "correct",
        "progress": episode.progress,
        "operational": episode.operational,
    }


def _render(messages: Sequence[Mapping[str, str]]) -> str:
    return "\n\n".join(f"[{m['role']}]\n{m['content']}" for m in messages)


def _play(
    env: SQLEnvironment, tasks: list[EpisodeTask], policy: Policy, batch_size: int
) -> list[dict[str, Any]]:
    sink = ListSink()
    run_episodes(
        env.dataset,
        tasks,
        policy,
        sink,
        batch_size=batch_size,
        environment=env.settings,
        tokenizer=env.tokenizer,
    )
    episodes = {(e.question_id, e.sample_index): e for e in sink.episodes}
    results = []
    for task in tasks:
        key = (task.question.id, task.sample_index)
        steps = [s for s in sink.steps if (s.question_id, s.sample_index) == key]
        results.append(_result(task.key, steps, episodes[key]))
    return results


def play_episode(
    env: SQLEnvironment,
    model: Any,
    tokenizer: Any = None,
    *,
    question_id: str | None = None,
    seed: int | None = None,
    config: Config | None = None,
) -> dict[str, Any]:
    """Play one episode (a question by id, or one drawn with `seed`) and return its result."""
    config = config if config is not None else {}
    if question_id is None:
        env.reset(seed=seed)
        question_id = env.state.question.id
    question = next(q for q in env.questions if q.id == question_id)
    task = EpisodeTask(question, 0, seed if seed is not None else episode_seed(0, question.id, 0))
    return _play(env, [task], _as_policy(model, tokenizer, config), batch_size=1)[0]


def rollout_func(
    prompts: Sequence[str], model: Any, tokenizer: Any, config: Config
) -> list[dict[str, Any]]:
    """Roll out one episode per prompt (a question id or a question's exact text), batched.

    `config` (a mapping or an attribute object such as an argparse Namespace) holds
    `questions_path`, `db_dir` (or `env`, a ready SQLEnvironment), and optionally `step_budget`,
    `batch_size`, `max_new_tokens`, `temperature`, `top_p`, `seed`, `threads`.

    With `env_url` (and `env_token` when the server wants one) the episodes are played on that
    environment server (`rollscope env-server`), which records them; prompts are then question
    ids, and the step budget is the server's.
    """
    env_url = _setting(config, "env_url")
    if env_url is not None:
        return _play_on_server(str(env_url), prompts, model, tokenizer, config)
    env = _setting(config, "env")
    if env is None:
        questions_path = _setting(config, "questions_path")
        if questions_path is None:
            raise KeyError("config has no questions_path (or env); set config.questions_path")
        env = SQLEnvironment(
            questions_path,
            _setting(config, "db_dir"),
            tokenizer=tokenizer,
            step_budget=int(_setting(config, "step_budget", DEFAULT_STEP_BUDGET)),
        )
    by_id = {q.id: q for q in env.questions}
    by_text = {q.question: q for q in env.questions}
    seed = int(_setting(config, "seed", 0))
    tasks: list[EpisodeTask] = []
    counts: dict[str, int] = {}
    for prompt in prompts:
        question: Question | None = by_id.get(prompt) or by_text.get(prompt)
        if question is None:
            raise KeyError(f"prompt matches no question id or text: {prompt[:80]!r}")
        sample = counts.get(question.id, 0)  # repeated prompts are a GRPO group: new samples
        counts[question.id] = sample + 1
        tasks.append(EpisodeTask(question, sample, episode_seed(seed, question.id, sample)))
    policy = _as_policy(model, tokenizer, config)
    return _play(env, tasks, policy, batch_size=int(_setting(config, "batch_size", 32)))


def _play_on_server(
    url: str, prompts: Sequence[str], model: Any, tokenizer: Any, config: Config
) -> list[dict[str, Any]]:
    from rollout_core.remote import RemoteTask, play_remote

    seed = int(_setting(config, "seed", 0))
    counts: dict[str, int] = {}
    tasks = []
    for prompt in prompts:
        sample = counts.get(prompt, 0)  # repeated prompts are a GRPO group: new samples
        counts[prompt] = sample + 1
        tasks.append(RemoteTask(prompt, episode_seed(seed, prompt, sample)))
    played = play_remote(
        url,
        tasks,
        _as_policy(model, tokenizer, config),
        batch_size=int(_setting(config, "batch_size", 32)),
        token=_setting(config, "env_token"),
    )
    return [_result(e.key, e.steps, e.record) for e in played if e.record is not None]
