"""The demo's tiny models: tokenizer, checkpoints, fingerprints, training, batched generate."""

from __future__ import annotations

import json
import os
import random
import shutil
import stat
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
)

from app.demo.tiny_model import (
    build_model,
    checkpoint_fingerprint,
    make_random_checkpoint,
)
from app.demo.tokenizer import IM_END, conversation_texts, train_tokenizer
from app.demo.train import (
    IGNORE,
    conversation_loss,
    encode_conversation,
    train_on_conversations,
)
from rollout_core import checkpoints

SMALL = {"hidden": 64, "layers": 2, "heads": 2, "ffn": 128, "max_positions": 512}
SYSTEM = (
    "You answer questions about a SQLite database. Reply with one action per turn: "
    "DESCRIBE table, SAMPLE table, QUERY sql or ANSWER value."
)
COUNTRIES = ["Canada", "France", "Japan", "Brazil", "Kenya", "Norway", "Chile", "Egypt"]
TABLES = ["singer", "concert", "stadium", "album", "player", "team"]


def synthetic_conversations(count: int, seed: int = 0) -> list[list[dict[str, str]]]:
    """Chats in the environment's shape: DESCRIBE, QUERY copying a value, ANSWER the count."""
    rng = random.Random(seed)
    chats = []
    for _ in range(count):
        table, country, rows = rng.choice(TABLES), rng.choice(COUNTRIES), rng.randint(0, 99)
        others = ", ".join(t for t in TABLES if t != table)
        sql = f"SELECT count(*) FROM {table} WHERE country = '{country}'"
        chats.append(
            [
                {"role": "system", "content": SYSTEM},
                {
                    "role": "user",
                    "content": f"Question: How many {table} rows are from {country}?\n"
                    f"Tables: {table}, {others}",
                },
                {"role": "assistant", "content": f"DESCRIBE {table}"},
                {"role": "user", "content": f"{table}(id INTEGER, name TEXT, country TEXT)"},
                {"role": "assistant", "content": f"QUERY {sql}"},
                {"role": "user", "content": f"count(*)\n{rows}"},
                {"role": "assistant", "content": f"ANSWER {rows}"},
            ]
        )
    return chats


CHATS = synthetic_conversations(200)


def render(
    tokenizer: PreTrainedTokenizerBase, chat: list[dict[str, str]], prompt: bool = False
) -> str:
    """The chat template's text for `chat`, with the assistant prompt when `prompt`."""
    text = tokenizer.apply_chat_template(chat, add_generation_prompt=prompt, tokenize=False)
    assert isinstance(text, str)
    return text


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerFast:
    return train_tokenizer(conversation_texts(CHATS), vocab_size=512)


@dataclass(frozen=True)
class Trained:
    """What the shared 60-step training run produced."""

    before: float
    after: float
    paths: list[Path]
    log: list[str]


@pytest.fixture(scope="module")
def trained(
    tmp_path_factory: pytest.TempPathFactory, tokenizer: PreTrainedTokenizerFast
) -> Trained:
    """A small model before and after 60 steps, with the checkpoints the run saved."""
    model = build_model(tokenizer, **SMALL)
    before = conversation_loss(model, tokenizer, CHATS[:32])
    lines: list[str] = []
    paths = train_on_conversations(
        model,
        tokenizer,
        CHATS,
        steps=60,
        save_at=[0, 60],
        out_dir=tmp_path_factory.mktemp("run"),
        batch_size=8,
        threads=1,  # one thread degrades least when the shared CPU is busy
        log=lines.append,
    )
    after = conversation_loss(model, tokenizer, CHATS[:32])
    return Trained(before=before, after=after, paths=paths, log=lines)


ROUND_TRIP = [
    "SELECT name FROM singer WHERE country = 'Canada' AND age > 42;",
    'SELECT "T1"."Name", count(*) FROM t1 AS T1\nGROUP BY 1\n\n  ORDER BY 2 DESC LIMIT 10',
    "Ünïcödé: São Paulo, Zürich, 東京, Ελλάδα, emoji 🎉\ttab\r\nwindows line",
    "  leading and trailing spaces  ",
    "0.5e-3 -17 1,234,567 3.14159",
    "",
]


@pytest.mark.parametrize("text", ROUND_TRIP)
def test_decode_round_trips_exactly(tokenizer: PreTrainedTokenizerFast, text: str) -> None:
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == text


@settings(max_examples=150, deadline=None)
@given(text=st.text(max_size=60))
def test_decode_round_trips_any_text(tokenizer: PreTrainedTokenizerFast, text: str) -> None:
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == text


def test_words_share_tokens_with_and_without_space_or_quotes(
    tokenizer: PreTrainedTokenizerFast,
) -> None:
    in_question = tokenizer.tokenize("rows are from Canada?")
    in_sql = tokenizer.tokenize("country = 'Canada'")
    assert "Canada" in in_question
    assert "Canada" in in_sql


def test_digits_are_single_tokens(tokenizer: PreTrainedTokenizerFast) -> None:
    assert tokenizer.tokenize("ANSWER 2024") == ["ANSWER", "Ġ", "2", "0", "2", "4"]


def test_special_tokens_and_chat_template(tokenizer: PreTrainedTokenizerFast) -> None:
    assert tokenizer.eos_token == IM_END
    assert tokenizer.pad_token_id is not None
    assert tokenizer.pad_token_id != tokenizer.eos_token_id
    assert tokenizer.padding_side == "left"
    text = render(tokenizer, CHATS[0][:2], prompt=True)
    assert text.startswith("<|im_start|>system\n" + SYSTEM + "<|im_end|>\n<|im_start|>user\n")
    assert text.endswith("<|im_end|>\n<|im_start|>assistant\n")
    no_prompt = render(tokenizer, CHATS[0][:2])
    assert not no_prompt.endswith("assistant\n")


def test_label_mask_covers_exactly_the_assistant_replies(
    tokenizer: PreTrainedTokenizerFast,
) -> None:
    chat = CHATS[3]
    ids, labels = encode_conversation(tokenizer, chat)
    rendered = render(tokenizer, chat)
    assert ids == tokenizer(rendered, add_special_tokens=False)["input_ids"]
    assert len(labels) == len(ids)
    trained = [label for label in labels if label != IGNORE]
    assert all(labels[i] == ids[i] for i in range(len(ids)) if labels[i] != IGNORE)
    replies = "".join(m["content"] + IM_END for m in chat if m["role"] == "assistant")
    assert tokenizer.decode(trained) == replies
    # Each reply is one contiguous run that starts right after "<|im_start|>assistant\n".
    runs = sum(1 for i, label in enumerate(labels) if label != IGNORE and labels[i - 1] == IGNORE)
    assert runs == 3


@settings(max_examples=50, deadline=None)
@given(contents=st.lists(st.text(max_size=30), min_size=1, max_size=4))
def test_encoded_ids_equal_the_rendered_chat_template(
    tokenizer: PreTrainedTokenizerFast, contents: list[str]
) -> None:
    roles = ["user", "assistant"]
    chat = [{"role": roles[i % 2], "content": text} for i, text in enumerate(contents)]
    ids, _ = encode_conversation(tokenizer, chat)
    rendered = render(tokenizer, chat)
    assert ids == tokenizer(rendered, add_special_tokens=False)["input_ids"]


def test_cutting_a_long_chat_keeps_whole_messages(tokenizer: PreTrainedTokenizerFast) -> None:
    chat = CHATS[5]
    full, _ = encode_conversation(tokenizer, chat)
    first_three, _ = encode_conversation(tokenizer, chat[:3])
    ids, labels = encode_conversation(tokenizer, chat, max_length=len(first_three) + 2)
    assert len(full) > len(ids)
    assert ids == first_three
    assert tokenizer.decode([t for t in labels if t != IGNORE]) == chat[2]["content"] + IM_END


def test_bad_messages_are_rejected_with_the_fix(tokenizer: PreTrainedTokenizerFast) -> None:
    with pytest.raises(ValueError, match="needs string 'role' and 'content'"):
        encode_conversation(tokenizer, [{"role": "user", "text": "hi"}])
    model = build_model(tokenizer, **SMALL)
    only_user = [[{"role": "user", "content": "hi"}]]
    with pytest.raises(ValueError, match="pass chats with an 'assistant' message"):
        train_on_conversations(
            model, tokenizer, only_user, steps=1, save_at=[], out_dir=Path("unused")
        )
    with pytest.raises(ValueError, match="must lie within"):
        train_on_conversations(
            model, tokenizer, CHATS, steps=5, save_at=[10], out_dir=Path("unused")
        )


def test_checkpoint_is_readable_and_loads_offline(tmp_path: Path) -> None:
    path = make_random_checkpoint(
        tmp_path / "ckpt", conversation_texts(CHATS[:50]), vocab_size=400, **SMALL
    )
    assert {"config.json", "model.safetensors", "tokenizer.json", "chat_template.jinja"} <= {
        p.name for p in path.iterdir()
    }
    assert stat.S_IMODE((path / "model.safetensors").stat().st_mode) & 0o044 == 0o044
    script = textwrap.dedent(
        """
        import json, sys
        from transformers import AutoModelForCausalLM, AutoTokenizer
        tok = AutoTokenizer.from_pretrained(sys.argv[1])
        model = AutoModelForCausalLM.from_pretrained(sys.argv[1])
        ids = tok.apply_chat_template(
            [{"role": "user", "content": "How many singer rows?"}],
            add_generation_prompt=True, return_tensors="pt", return_dict=True,
        )
        out = model.generate(**ids, max_new_tokens=3, do_sample=False)
        new = out.shape[1] - ids["input_ids"].shape[1]
        pad = model.generation_config.pad_token_id
        print(json.dumps({"type": type(model).__name__, "new": new, "eos": tok.eos_token,
                          "pad": pad, "pad_tok": tok.pad_token_id}))
        """
    )
    home = tmp_path / "hf_home"
    home.mkdir()
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_HOME": str(home),
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "OMP_NUM_THREADS": "1",
    }
    result = subprocess.run(
        [sys.executable, "-c", script, str(path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert loaded["type"] == "LlamaForCausalLM"
    assert 1 <= loaded["new"] <= 3
    assert loaded["eos"] == IM_END
    assert loaded["pad"] == loaded["pad_tok"]


def test_fingerprint_tells_models_apart_and_ignores_location(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    texts = list(conversation_texts(CHATS[:50]))
    first = make_random_checkpoint(tmp_path / "a", texts, vocab_size=400, seed=1, **SMALL)
    other = make_random_checkpoint(tmp_path / "b", texts, vocab_size=400, seed=2, **SMALL)
    again = make_random_checkpoint(tmp_path / "c", texts, vocab_size=400, seed=1, **SMALL)
    copied = Path(shutil.copytree(first, tmp_path / "copy"))
    fingerprint = checkpoint_fingerprint(first)
    assert len(fingerprint) == 12
    assert fingerprint == checkpoint_fingerprint(first)
    assert fingerprint == checkpoint_fingerprint(again)
    assert fingerprint == checkpoint_fingerprint(copied)
    assert fingerprint != checkpoint_fingerprint(other)
    # Large weight files are hashed by sampled blocks; models must still differ.
    monkeypatch.setattr(checkpoints, "_FULL_HASH_LIMIT", 1024)
    assert checkpoint_fingerprint(first) == checkpoint_fingerprint(copied)
    assert checkpoint_fingerprint(first) != checkpoint_fingerprint(other)
    with pytest.raises(FileNotFoundError, match=r"config\.json"):
        checkpoint_fingerprint(tmp_path)


def test_training_lowers_the_assistant_loss(trained: Trained) -> None:
    assert trained.after < 0.5 * trained.before
    assert any("tokens/s" in line for line in trained.log)


def test_assistant_loss_equals_the_model_loss_on_the_labels(
    tokenizer: PreTrainedTokenizerFast,
) -> None:
    model = build_model(tokenizer, **SMALL)
    ids, labels = encode_conversation(tokenizer, CHATS[9])
    with torch.no_grad():
        expected = model(input_ids=torch.tensor([ids]), labels=torch.tensor([labels])).loss
    assert conversation_loss(model, tokenizer, [CHATS[9]]) == pytest.approx(expected.item())


def test_training_saves_the_requested_checkpoints(
    trained: Trained, tokenizer: PreTrainedTokenizerFast
) -> None:
    start, end = trained.paths
    assert (start.name, end.name) == ("checkpoint-0", "checkpoint-60")
    assert checkpoint_fingerprint(start) != checkpoint_fingerprint(end)
    reloaded = AutoModelForCausalLM.from_pretrained(end)
    assert conversation_loss(reloaded, tokenizer, CHATS[:32]) == pytest.approx(
        trained.after, rel=1e-4
    )
    untrained = AutoModelForCausalLM.from_pretrained(start)
    assert conversation_loss(untrained, tokenizer, CHATS[:32]) == pytest.approx(
        trained.before, rel=1e-4
    )


def test_training_is_deterministic_for_a_seed(
    tmp_path: Path, tokenizer: PreTrainedTokenizerFast
) -> None:
    def run(out: Path) -> Path:
        model = build_model(tokenizer, **SMALL)
        chats = CHATS[:40]
        return train_on_conversations(
            model, tokenizer, chats, steps=3, save_at=[3], out_dir=out, batch_size=4
        )[0]

    assert checkpoint_fingerprint(run(tmp_path / "x")) == checkpoint_fingerprint(
        run(tmp_path / "y")
    )


def test_batched_greedy_generate_matches_one_at_a_time(trained: Trained) -> None:
    path = trained.paths[-1]
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    # Prompts of different lengths, so the batch really is left-padded.
    prompts = [
        render(tok, chat[:turns], prompt=True)
        for chat, turns in zip(
            synthetic_conversations(8, seed=7), [2, 4, 6, 2, 4, 6, 2, 4], strict=True
        )
    ]
    settings_ = {"max_new_tokens": 16, "do_sample": False}

    def decode(out: torch.Tensor, width: int) -> list[str]:
        return tok.batch_decode(out[:, width:], skip_special_tokens=True)

    alone = []
    for prompt in prompts:
        encoded = tok(prompt, return_tensors="pt", add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(**encoded, **settings_)
        alone += decode(out, encoded["input_ids"].shape[1])
    batch = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    assert (batch["attention_mask"] == 0).any()
    with torch.no_grad():
        out = model.generate(**batch, **settings_)
    assert decode(out, batch["input_ids"].shape[1]) == alone
    assert any(text.startswith(("DESCRIBE", "QUERY", "ANSWER")) for text in alone)
