"""Rollouts of a Llama 3 model as verl and TRL write them: decoded with special tokens skipped,
so each turn reads `{role}\\n\\n{text}` glued to the text before it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from transformers import PreTrainedTokenizerFast

from storage.store import Store
from tests.app.importers.conftest import rows, run_import
from tests.app.importers.writers import verl_dump

# Meta-Llama-3-8B-Instruct's `chat_template` (tokenizer_config.json), verbatim.
LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | "
    "trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}"
    "{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
# Llama 3.1's template opens every system message with these dates.
SYSTEM = "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nYou are a SQL agent."
COUNT = "SELECT count(*) FROM singer"
OLD = "SELECT name FROM singer WHERE age > 40"
BY_COUNTRY = "SELECT country, count(*) FROM singer GROUP BY country"

Message = dict[str, str]


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level tokenizer (text decodes back byte for byte) with Llama 3's special tokens
    and chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    backend = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<|begin_of_text|>",
        eos_token="<|eot_id|>",
        additional_special_tokens=["<|start_header_id|>", "<|end_header_id|>"],
        clean_up_tokenization_spaces=False,
    )
    tok.chat_template = LLAMA3_TEMPLATE
    return tok


def _ids(tokenizer: PreTrainedTokenizerFast, messages: list[Message], prompt: bool) -> list[int]:
    """The template's text tokenized, as verl's `RLHFDataset` does (verl/utils/dataset/
    rl_dataset.py): `apply_chat_template(..., tokenize=False)`, then no special tokens added."""
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=prompt, tokenize=False)
    assert isinstance(text, str)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def decoded(
    tokenizer: PreTrainedTokenizerFast, question: str, turns: Sequence[Message]
) -> tuple[str, str]:
    """(prompt, response) as verl's `RayPPOTrainer.fit` (verl/trainer/ppo/ray_trainer.py)
    decodes them for `_dump_generations`: `tokenizer.batch_decode(..., skip_special_tokens=
    True)`. The response's ids are the model's turns and the environment's turns between them,
    as the chat template renders them after the prompt."""
    prompt = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
    prompt_ids = _ids(tokenizer, prompt, True)
    every_id = _ids(tokenizer, [*prompt, *turns], False)
    assert every_id[: len(prompt_ids)] == prompt_ids
    texts = tokenizer.batch_decode(
        [prompt_ids, every_id[len(prompt_ids) :]], skip_special_tokens=True
    )
    return texts[0], texts[1]


def _model(text: str) -> Message:
    return {"role": "assistant", "content": text}


ROLLOUTS: dict[str, list[Message]] = {
    # An interaction's feedback, in a user turn with no tag.
    "How many singers do we have?": [
        _model(f"<sql>{COUNT}</sql>"),
        {"role": "user", "content": "| 6 |"},
        _model(f"<answer>{COUNT}</answer>"),
    ],
    # A tool's reply, in the turn Llama 3.1 renders a tool message as.
    "Who is older than 40?": [
        _model(f"<sql>{OLD}</sql>"),
        {"role": "ipython", "content": "| Joe |"},
        _model(f"<answer>{OLD}</answer>"),
    ],
    # SkyRL-SQL's agent: the observation tagged, in a user turn.
    "How many singers per country?": [
        _model(f"<sql>{BY_COUNTRY}</sql>"),
        {"role": "user", "content": "<observation>| France | 4 |</observation>"},
        _model(f"<solution>{BY_COUNTRY}</solution>"),
    ],
    "Name one singer.": [_model("<answer>SELECT name FROM singer LIMIT 1</answer>")],
}

STEPS = [
    ("How many singers do we have?", 1, "QUERY", COUNT, "| 6 |"),
    ("How many singers do we have?", 2, "ANSWER", COUNT, None),
    ("Who is older than 40?", 1, "QUERY", OLD, "| Joe |"),
    ("Who is older than 40?", 2, "ANSWER", OLD, None),
    ("How many singers per country?", 1, "QUERY", BY_COUNTRY, "| France | 4 |"),
    ("How many singers per country?", 2, "ANSWER", BY_COUNTRY, None),
    ("Name one singer.", 1, "ANSWER", "SELECT name FROM singer LIMIT 1", None),
]

_STEPS_SQL = (
    "SELECT e.question, s.step_no, s.action, s.argument, s.observation FROM steps s "
    "JOIN episodes e ON e.id = s.episode_id WHERE e.run_id = ? ORDER BY e.id, s.step_no"
)


def test_verl_reads_the_question_and_each_turn_of_a_llama3_rollout(
    store: Store, tokenizer: PreTrainedTokenizerFast, tmp_path: Path
) -> None:
    pairs = [decoded(tokenizer, q, turns) for q, turns in ROLLOUTS.items()]
    # What the file holds: the form this test is about, not a line of its own per role.
    assert pairs[0] == (
        f"system\n\n{SYSTEM}user\n\nHow many singers do we have?assistant\n\n",
        f"<sql>{COUNT}</sql>user\n\n| 6 |assistant\n\n<answer>{COUNT}</answer>",
    )
    inputs, outputs = [p for p, _ in pairs], [o for _, o in pairs]
    dump = tmp_path / "rollouts"
    verl_dump(dump, 1, inputs, outputs, [""] * len(pairs), [1.0] * len(pairs), {})
    run_id, _ = run_import(store, dump, "verl-llama3")
    assert rows(store, _STEPS_SQL, run_id) == STEPS
    raw = rows(store, "SELECT raw_output FROM steps WHERE step_no = 1 ORDER BY id LIMIT 1")
    assert raw == [(f"<sql>{COUNT}</sql>",)]


def test_trl_splits_a_llama3_rollout_funcs_completion_into_its_turns(
    store: Store, tokenizer: PreTrainedTokenizerFast, tmp_path: Path
) -> None:
    import pandas as pd

    question = "How many singers do we have?"
    _, completion = decoded(tokenizer, question, ROLLOUTS[question])
    completions = tmp_path / "out" / "completions"
    completions.mkdir(parents=True)
    # As GRPOTrainer.log writes it (trl/trainer/grpo_trainer.py): pandas `to_parquet`, the
    # completion `batch_decode(completion_ids, skip_special_tokens=True)` as one message.
    pd.DataFrame(
        {
            "step": [1],
            "prompt": [
                [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
            ],
            "completion": [[_model(completion)]],
            "exact": [1.0],
            "advantage": [0.0],
        }
    ).to_parquet(completions / "completions_00001.parquet")
    run_id, _ = run_import(store, tmp_path / "out", "trl-llama3")
    assert rows(store, _STEPS_SQL, run_id) == STEPS[:2]


def test_prose_with_a_role_and_a_blank_line_outside_llama3s_form_is_left_whole(
    store: Store, tmp_path: Path
) -> None:
    # A ChatML prompt (special tokens skipped: role lines) whose system text says `user` over a
    # blank line, and outputs that do too, glued to a word, with no assistant turn after it.
    chatml = (
        "system\nYou help the user\n\nRules: one query at a time.\n"
        "user\nHow many singers do we have?\nassistant\n"
    )
    plain = "List each user\n\nwho signed up today."
    glued = f"Checked as superuser\n\nThe count is 6.\n\n<answer>{COUNT}</answer>"
    spaced = f"Ask the user\n\nthen the assistant\n\n<answer>{COUNT}</answer>"
    dump = tmp_path / "rollouts"
    verl_dump(dump, 1, [chatml, plain], [glued, spaced], ["", ""], [1.0, 1.0], {})
    run_id, _ = run_import(store, dump, "prose")
    assert rows(
        store,
        "SELECT e.question, s.step_no, s.action, s.argument, s.observation, s.raw_output "
        "FROM steps s JOIN episodes e ON e.id = s.episode_id WHERE e.run_id = ? ORDER BY e.id",
        run_id,
    ) == [
        ("How many singers do we have?", 1, "ANSWER", COUNT, None, glued),
        (plain, 1, "ANSWER", COUNT, None, spaced),
    ]
