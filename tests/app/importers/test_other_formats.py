"""SkyRL, rLLM, verifiers and chat-log files, each as its writer writes it (tests/app/importers/
writers.py names the writer), imported with their steps, groups, rewards and turns."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from app.cli import cli
from app.importers.detect import detect
from storage.store import Store
from tests.app.importers.conftest import rows, run_import
from tests.app.importers.writers import (
    rllm_log_episode,
    skyrl_dump,
    sql_prompt,
    sql_response,
    verifiers_save,
)
from tests.support.benchmark import QUESTIONS

COUNT_Q, COUNT_SQL = QUESTIONS[0][1], QUESTIONS[0][2]
FRANCE_Q, FRANCE_SQL = QUESTIONS[1][1], QUESTIONS[1][2]


def test_skyrl_eval_dumps_per_step_and_data_source(store: Store, tmp_path: Path) -> None:
    export = tmp_path / "export"
    for step in (10, 20):
        n = 4
        response = sql_response(
            [(f"<think>hm</think><sql>{COUNT_SQL}</sql>", "\n| 5 |\n"),
             (f"<solution>{COUNT_SQL}</solution>", None)],
            special_tokens=True,
        )  # fmt: skip
        skyrl_dump(
            export / "dumped_evals" / f"global_step_{step}_evals",
            input_prompts=[sql_prompt(COUNT_Q, special_tokens=True)] * n,
            output_responses=[response] * n,
            rewards=[1.0, [0.0, 0.0, 1.0], 0.0, [0.0]],  # token-level rewards are summed
            stop_reasons=["stop"] * n,
            env_classes=["text2sql"] * n,
            env_extras=[{"db_id": "concerts", "reward_spec": {"ground_truth": COUNT_SQL}}] * n,
            data_sources=["synsql", "synsql", "spider", "spider"],
            eval_metrics={"eval/all/avg_score": 0.5},
        )
    assert detect(export) is not None and detect(export).name == "skyrl"  # type: ignore[union-attr]
    run_id, results = run_import(store, export, "skyrl")
    assert [(r.path, r.episodes) for r in results] == [
        ("dumped_evals/global_step_10_evals/spider.jsonl", 2),
        ("dumped_evals/global_step_10_evals/synsql.jsonl", 2),
        ("dumped_evals/global_step_20_evals/spider.jsonl", 2),
        ("dumped_evals/global_step_20_evals/synsql.jsonl", 2),
    ]  # aggregated_results.jsonl is the metrics, not rollouts
    assert rows(
        store,
        "SELECT train_step, db_id, gold_sql, sum(reward), count(DISTINCT group_index) "
        "FROM episodes WHERE run_id = ? GROUP BY train_step",
        run_id,
    ) == [(10, "concerts", COUNT_SQL, 2.0, 1), (20, "concerts", COUNT_SQL, 2.0, 1)]
    assert rows(store, "SELECT DISTINCT action, observation FROM steps ORDER BY action") == [
        ("ANSWER", None),  # nothing answered the last turn
        ("QUERY", "| 5 |"),
    ]


def _rllm_episode(task_id: str, sample: int, correct: bool) -> dict[str, Any]:
    system = {"role": "system", "content": "Answer with SQL."}
    user = {"role": "user", "content": COUNT_Q}
    first = f"<sql>{COUNT_SQL}</sql>"
    reply = {"role": "user", "content": "| 5 |"}
    second = f"<answer>{COUNT_SQL if correct else 'SELECT 1'}</answer>"
    return {
        "id": f"{task_id}:{sample}",
        "task": {"question": COUNT_Q, "db_id": "concerts", "gold_sql": COUNT_SQL},
        "is_correct": correct,
        "termination_reason": "env_done",  # a TerminationReason's value
        "metrics": {"accuracy": float(correct)},
        "trajectories": [
            {
                "reward": 1.0 if correct else 0.0,
                "steps": [
                    {
                        "observation": COUNT_Q,
                        "model_response": first,
                        "reward": 0.0,
                        "chat_completions": [system, user, {"role": "assistant", "content": first}],
                    },
                    {
                        "observation": "| 5 |",
                        "model_response": second,
                        "done": True,
                        "reward": 1.0 if correct else 0.0,
                        "chat_completions": [
                            system,
                            user,
                            {"role": "assistant", "content": first},
                            reply,
                            {"role": "assistant", "content": second},
                        ],
                    },
                ],
            }
        ],
    }


def test_rllm_episode_logs_use_the_files_verdict_and_task_groups(
    store: Store, tmp_path: Path
) -> None:
    base = tmp_path / "logs"
    for step in (1, 2):
        for sample in range(3):
            rllm_log_episode(base, _rllm_episode("task-a", sample, sample == 0), step)
        rllm_log_episode(base, _rllm_episode("task-a", 9, False), step, mode="val")
    notes: list[str] = []
    run_id, results = run_import(store, base, "rllm", on_note=notes.append)
    assert len(results) == 6  # the training episodes; val_step_* folders are a run of their own
    assert notes == [
        "read the train_step_* folders only, not 2 folders of val episodes; import one by its "
        "path, under another --name, to read it"
    ]
    assert rows(
        store,
        "SELECT train_step, count(*), sum(outcome = 'correct'), count(DISTINCT group_index) "
        "FROM episodes WHERE run_id = ? GROUP BY train_step",
        run_id,
    ) == [(1, 3, 1, 1), (2, 3, 1, 1)]
    first = rows(store, "SELECT id FROM episodes WHERE run_id = ? ORDER BY id LIMIT 1", run_id)
    detail = store.get_episode(first[0][0])
    assert detail is not None
    assert [(s.action, s.argument, s.observation, s.reward) for s in detail.steps] == [
        ("QUERY", COUNT_SQL, "| 5 |", 0.0),
        ("ANSWER", COUNT_SQL, None, 1.0),
    ]
    assert detail.summary.question == COUNT_Q and detail.gold_sql == COUNT_SQL
    assert [m["role"] for m in detail.steps[1].prompt] == ["system", "user", "assistant", "user"]
    named = rows(store, "SELECT DISTINCT name FROM episode_rewards ORDER BY name")
    assert named == [("accuracy",), ("reward",)]


def test_verifiers_results_take_the_model_from_metadata_and_group_by_example(
    store: Store, tmp_path: Path
) -> None:
    run_dir = tmp_path / "outputs" / "evals" / "sql-env--tiny" / "abc123"
    outputs = []
    for example, (_, question, gold) in enumerate(QUESTIONS[:2]):
        for sample in range(3):
            call = {
                "id": "c1",
                "type": "function",
                "function": {"name": "run_sql", "arguments": json.dumps({"sql": gold})},
            }
            outputs.append(
                {
                    "example_id": example,
                    "prompt": [{"role": "user", "content": question}],
                    "completion": [
                        {"role": "assistant", "content": "", "tool_calls": [call]},
                        {"role": "tool", "content": "| rows |", "tool_call_id": "c1"},
                        {"role": "assistant", "content": f"ANSWER {sample}"},
                    ],
                    "answer": gold,
                    "info": {"db_id": "concerts"},  # the dataset row's, as SQL environments keep it
                    "reward": float(sample == 0),
                    "metrics": {"exact": float(sample == 0), "format": 1.0},
                    "is_truncated": False,
                    "stop_condition": "no_tools",
                }
            )
    verifiers_save(run_dir, outputs, {"env_id": "sql-env", "model": "tiny-sql-1b"})
    run_id, _ = run_import(store, tmp_path / "outputs", "vf")
    run = store.get_run(run_id)
    assert run is not None and run.checkpoint == "tiny-sql-1b"
    assert rows(
        store,
        "SELECT question_id, count(*), sum(reward), min(train_step), min(group_index) "
        "FROM episodes WHERE run_id = ? GROUP BY question_id ORDER BY 1",
        run_id,
    ) == [("0", 3, 1.0, None, None), ("1", 3, 1.0, None, None)]
    assert rows(store, "SELECT DISTINCT db_id FROM episodes") == [("concerts",)]
    steps = rows(
        store, "SELECT step_no, action, argument, observation FROM steps WHERE episode_id = 1"
    )
    assert steps == [(1, "QUERY", QUESTIONS[0][2], "| rows |"), (2, "ANSWER", "0", None)]
    names = rows(store, "SELECT DISTINCT name FROM episode_rewards ORDER BY name")
    assert names == [("exact",), ("format",), ("reward",)]


def test_an_empty_model_name_in_metadata_is_no_model(store: Store, tmp_path: Path) -> None:
    # The run's checkpoint column is NULL where nobody named the model, not an empty text.
    output = {"example_id": 1, "prompt": "Q?", "completion": "ANSWER 1", "reward": 1.0}
    verifiers_save(tmp_path / "outputs" / "evals" / "sql--m" / "r1", [output], {"model": ""})
    run_id, _ = run_import(store, tmp_path / "outputs", "unnamed")
    run = store.get_run(run_id)
    assert run is not None and run.checkpoint is None


def test_metadata_nested_past_pythons_json_stack_names_no_model(
    store: Store, tmp_path: Path
) -> None:
    # Read for the model's name, it raised a RecursionError and ended the import.
    output = {"example_id": 1, "prompt": "Q?", "completion": "ANSWER 1", "reward": 1.0}
    results = verifiers_save(tmp_path / "outputs" / "evals" / "sql--m" / "r1", [output], {})
    (results.parent / "metadata.json").write_text('{"x": ' + "[" * 5_000 + "]" * 5_000 + "}")
    run_id, _ = run_import(store, tmp_path / "outputs", "deep")
    run = store.get_run(run_id)
    assert run is not None and run.checkpoint is None and run.episodes_finished == 1


def test_a_growing_results_file_adds_only_its_new_lines(store: Store, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"

    def output(i: int) -> dict[str, Any]:
        return {
            "example_id": i,
            "prompt": [{"role": "user", "content": f"question {i}"}],
            "completion": [{"role": "assistant", "content": "ANSWER 1"}],
            "reward": 1.0,
        }

    verifiers_save(run_dir, [output(0), output(1)], {"model": "m"})
    run_import(store, run_dir, "growing")
    verifiers_save(run_dir, [output(2)], {"model": "m"}, mode="a")  # verifiers appends
    _, again = run_import(store, run_dir, "growing")
    # Read on from where the last reading ended: the two lines before it are not read again.
    assert [(r.episodes, r.known) for r in again] == [(1, 0)]
    assert rows(store, "SELECT question_id FROM episodes ORDER BY id") == [("0",), ("1",), ("2",)]
    assert rows(store, "SELECT count(*) FROM import_files") == [(2,)]


def test_chat_logs_with_steps_groups_models_and_named_rewards(store: Store, tmp_path: Path) -> None:
    log = tmp_path / "chat.jsonl"
    lines = []
    for step in (0, 1):
        for sample in range(2):
            lines.append(
                {
                    "messages": [
                        {"role": "system", "content": "You answer with SQL."},
                        {"role": "user", "content": FRANCE_Q},
                        {"role": "assistant", "content": f"```sql\n{FRANCE_SQL}\n```"},
                    ],
                    "reward": float(sample),
                    "rewards": {"exec": float(sample), "format": 1.0},
                    "question_id": "q-france",
                    "step": step,
                    "group": f"g{step}",
                    "model": "ckpt-7",
                }
            )
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    run_id, _ = run_import(store, log, "chat")
    assert rows(
        store,
        "SELECT question_id, train_step, group_index, reward, outcome FROM episodes "
        "WHERE run_id = ? ORDER BY id",
        run_id,
    ) == [
        ("q-france", 0, 0, 0.0, "wrong"),
        ("q-france", 0, 0, 1.0, "correct"),
        ("q-france", 1, 1, 0.0, "wrong"),
        ("q-france", 1, 1, 1.0, "correct"),
    ]
    # A fenced SQL block that ends the rollout unanswered is its answer.
    assert rows(store, "SELECT DISTINCT action, argument FROM steps") == [("ANSWER", FRANCE_SQL)]
    run = store.get_run(run_id)
    assert run is not None and run.checkpoint == "ckpt-7"
    assert rows(store, "SELECT DISTINCT name FROM episode_rewards ORDER BY name") == [
        ("exec",),
        ("format",),
        ("reward",),
    ]


def test_a_chat_log_of_two_models_says_a_run_is_one_models(store: Store, tmp_path: Path) -> None:
    # The run records one model: the second model's rollouts would pass for the first's in
    # Compare, so the import says where they begin. Its first lines may name none.
    log = tmp_path / "evals.jsonl"
    lines = [
        {"messages": [{"role": "user", "content": COUNT_Q},
                      {"role": "assistant", "content": f"ANSWER {n}"}],
         "reward": 1.0, **({"model": model} if model else {})}
        for n, model in enumerate((None, "ckpt-1000", "ckpt-2000", "ckpt-2000"))
    ]  # fmt: skip
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    notes: list[str] = []
    run_id, _ = run_import(store, log, "evals", on_note=notes.append)
    run = store.get_run(run_id)
    assert run is not None and run.checkpoint == "ckpt-1000"
    assert notes == [
        "evals.jsonl:3: a rollout of model 'ckpt-2000', in a run of 'ckpt-1000'; a run is one "
        "model's: to compare them, import each model's rollouts under its own --name"
    ]


def test_a_tool_calling_chats_last_message_is_its_answer(store: Store, tmp_path: Path) -> None:
    # OpenAI's tool protocol: the model calls tools, then replies without a call, and that
    # reply ends its turn. A tagged rollout ending on a turn with no reply ran out of turns.
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "run_sql", "arguments": json.dumps({"sql": COUNT_SQL})},
    }
    chat = [
        {"role": "user", "content": COUNT_Q},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "| 5 |"},
        {"role": "assistant", "content": "There are 5 singers."},
    ]
    tagged = [{"role": "user", "content": COUNT_Q},
              {"role": "assistant", "content": f"<sql>{COUNT_SQL}</sql>"},
              {"role": "user", "content": "<observation>| 5 |</observation>"},
              {"role": "assistant", "content": "Let me think about it more."}]  # fmt: skip
    log = tmp_path / "chat.jsonl"
    log.write_text("".join(json.dumps({"messages": m, "reward": 0.0}) + "\n"
                           for m in (chat, tagged)))  # fmt: skip
    run_import(store, log, "chat")
    assert rows(store, "SELECT outcome, answer FROM episodes ORDER BY id") == [
        ("wrong", "There are 5 singers."),
        ("budget_exhausted", None),
    ]
    assert rows(store, "SELECT action, argument, parsed FROM steps WHERE episode_id = 1") == [
        ("QUERY", COUNT_SQL, 1),
        ("ANSWER", "There are 5 singers.", 1),
    ]


def test_truncations_and_errors_the_files_report_are_kept(store: Store, tmp_path: Path) -> None:
    response = sql_response([(f"<sql>{COUNT_SQL}</sql>", "| 5 |"), ("<solution>SELECT", None)])
    skyrl_dump(
        tmp_path / "skyrl" / "dumped_evals" / "global_step_5_evals",
        input_prompts=[sql_prompt(COUNT_Q)] * 2,
        output_responses=[response] * 2,
        rewards=[0.0, 0.0],
        stop_reasons=["length", "stop"],  # vLLM's finish reason: max_tokens, or a stop
        env_classes=["text2sql"] * 2,
        env_extras=[{"db_id": "concerts"}] * 2,
        data_sources=["spider"] * 2,
        eval_metrics={},
    )
    cut = _rllm_episode("task-a", 0, False) | {"termination_reason": "max_response_length_exceeded"}
    failed = _rllm_episode("task-a", 1, False) | {"termination_reason": "error"}
    for episode in (cut, failed):
        rllm_log_episode(tmp_path / "rllm", episode, step=3)
    vf_base = {"prompt": [{"role": "user", "content": COUNT_Q}], "reward": 0.0, "answer": ""}
    verifiers_save(
        tmp_path / "vf",
        [
            vf_base | {"example_id": 0, "completion": "ANSWER 5", "is_truncated": True},
            # `save_outputs` writes the exception as its repr (`make_serializable`).
            vf_base | {"example_id": 1, "completion": "ANS", "error": "ModelError('overloaded')"},
        ],
        {"model": "m"},
    )
    chat = [{"role": "user", "content": COUNT_Q},
            {"role": "assistant", "content": f"<sql>{COUNT_SQL}</sql>"},
            {"role": "tool", "content": "| 5 |"},
            {"role": "assistant", "content": "<solution>SELECT"}]  # fmt: skip
    (tmp_path / "chat").mkdir()
    (tmp_path / "chat" / "log.jsonl").write_text("".join(
        json.dumps({"messages": chat, "reward": 0.0} | finish) + "\n"
        for finish in ({"finish_reason": "length"}, {"finish_reason": "stop"}, {})
    ))  # fmt: skip
    for fmt in ("skyrl", "rllm", "vf", "chat"):
        run_import(store, tmp_path / fmt, fmt)
    found = rows(
        store,
        "SELECT r.name, e.outcome, e.failure_class, e.error, "
        "(SELECT group_concat(coalesce(s.truncated, '-'), '') FROM steps s "
        "WHERE s.episode_id = e.id) "
        "FROM episodes e JOIN runs r ON r.id = e.run_id ORDER BY e.id",
    )
    # Files tell how the last turn ended: an earlier turn's cut, or one a file leaves out
    # (verifiers' `is_truncated` missing), is not known, NULL ('-').
    assert found == [
        # Cut inside its <solution> tag: no answer, its last turn unparsed and truncated.
        ("skyrl", "budget_exhausted", "unparsed", None, "-1"),
        ("skyrl", "budget_exhausted", "unparsed", None, "-0"),
        ("rllm", "wrong", "wrong_answer", None, "-1"),
        ("rllm", "error", "env_error", "rLLM ended the episode: error", "-0"),
        ("vf", "wrong", "wrong_answer", None, "1"),
        ("vf", "error", "env_error", "ModelError('overloaded')", "-"),
        # A chat log's `finish_reason`, as OpenAI's API gives it; none given, not known.
        ("chat", "budget_exhausted", "unparsed", None, "-1"),
        ("chat", "budget_exhausted", "unparsed", None, "-0"),
        ("chat", "budget_exhausted", "unparsed", None, "--"),
    ]
    # The cut turn took no action, and plain SQL reads none: nothing ran its text here.
    assert rows(
        store, "SELECT action, argument FROM steps WHERE episode_id = 1 AND step_no = 2"
    ) == [(None, None)]
    # `rollscope show` tells the same: the cut turn, a turn with no SQL, the file's error.
    url = store.url

    def shown(episode_id: int) -> str:
        args = ["show", str(episode_id), "--store", url]
        return CliRunner().invoke(cli, args, terminal_width=200).output

    cut_skyrl = shown(1)
    assert "step 2  reward +0.000  output cut" in cut_skyrl
    assert "action: no SQL  (recorded unparsed)" in cut_skyrl
    assert "fell back to QUERY" not in cut_skyrl
    assert "error: ModelError('overloaded')" in shown(6)
