"""TRL's completion logs, written by a real GRPOTrainer(log_completions=True) on a tiny model."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("trl")

from app.trl import checkpointing_off
from storage.read_models import GroupKey
from storage.store import Store
from tests.app.importers.conftest import rows, run_import
from tests.support.benchmark import QUESTIONS

pytestmark = pytest.mark.slow
GROUP = 2
STEPS = 3


def looks_like_sql(completions: list[list[dict[str, str]]], **_: Any) -> list[float]:
    return [float("SELECT" in c[0]["content"].upper()) for c in completions]


def brevity(completions: list[list[dict[str, str]]], **_: Any) -> list[float]:
    return [1.0 / (1 + len(c[0]["content"])) for c in completions]


@pytest.fixture(scope="module")
def output_dir(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    os.environ["TRL_EXPERIMENTAL_SILENCE"] = "1"
    out = tmp_path_factory.mktemp("trl") / "out"
    prompts = [{"prompt": [{"role": "user", "content": q}]} for _, q, _ in QUESTIONS[:4]]
    args = GRPOConfig(
        output_dir=str(out),
        per_device_train_batch_size=2 * GROUP,
        num_generations=GROUP,
        max_steps=STEPS,
        max_completion_length=12,
        learning_rate=1e-2,
        log_completions=True,
        logging_steps=1,
        report_to=[],
        use_cpu=True,
        bf16=False,
        save_strategy="no",
        beta=0.0,
        seed=1,
        disable_tqdm=True,
        **checkpointing_off(GRPOConfig),
    )
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(tiny_checkpoint),
        processing_class=AutoTokenizer.from_pretrained(tiny_checkpoint),
        reward_funcs=[looks_like_sql, brevity],
        args=args,
        train_dataset=Dataset.from_list(prompts),
    )
    trainer.train()
    return out


def test_each_row_is_an_episode_with_its_step_rewards_and_completion_byte_for_byte(
    store: Store, output_dir: Path
) -> None:
    import pandas as pd

    files = sorted((output_dir / "completions").glob("completions_*.parquet"))
    assert len(files) == STEPS
    run_id, results = run_import(store, output_dir, "trl-tiny")
    assert [(r.path, r.skipped) for r in results] == [(f"completions/{f.name}", 0) for f in files]
    run = store.get_run(run_id)
    assert run is not None and (run.kind, run.source_format) == ("import", "trl")
    for file, result in zip(files, results, strict=True):
        frame = pd.read_parquet(file)
        step = int(file.stem.removeprefix("completions_"))
        assert result.episodes == len(frame)
        stored = rows(
            store,
            "SELECT e.reward, e.trainer_advantage, st.raw_output, src.line FROM episodes e "
            "JOIN steps st ON st.episode_id = e.id "
            "JOIN episode_sources src ON src.episode_id = e.id "
            "WHERE e.run_id = ? AND e.train_step = ? ORDER BY src.line",
            run_id,
            step,
        )
        assert [line for *_, line in stored] == list(range(1, len(frame) + 1))
        for (reward, advantage, raw, _), (_, row) in zip(stored, frame.iterrows(), strict=True):
            assert raw == row["completion"][0]["content"]  # byte for byte
            assert reward == pytest.approx(row["looks_like_sql"] + row["brevity"])
            assert advantage == row["advantage"]  # the trainer's own, as the file holds it
        named = rows(
            store,
            "SELECT r.name, r.value FROM episode_rewards r JOIN episodes e ON e.id = r.episode_id"
            " JOIN episode_sources src ON src.episode_id = e.id"
            " WHERE e.run_id = ? AND e.train_step = ? ORDER BY src.line, r.name",
            run_id,
            step,
        )
        expected = [
            (name, pytest.approx(row[name]))
            for _, row in frame.iterrows()
            for name in ("brevity", "looks_like_sql")
        ]
        assert named == expected
    # Each file's groups: the GROUP completions of each prompt.
    sizes = rows(
        store,
        "SELECT count(*) FROM episodes WHERE run_id = ? GROUP BY train_step, group_index",
        run_id,
    )
    assert {n for (n,) in sizes} == {GROUP}
    # On TRL's default settings (rewards summed, scaled by the group's std) the advantage GRPO
    # groups computes is the one the trainer trained on.
    keys = rows(store, "SELECT DISTINCT question_id, group_index FROM episodes WHERE run_id = ?",
                run_id)  # fmt: skip
    for question_id, group_index in keys:
        group = store.get_group(run_id, GroupKey(question_id, group_index))
        assert group is not None
        for member in group.members:
            assert member.advantage == pytest.approx(member.detail.trainer_advantage, abs=1e-4)


def test_importing_the_output_dir_twice_adds_nothing(store: Store, output_dir: Path) -> None:
    run_id, _ = run_import(store, output_dir, "trl-twice")
    before = rows(store, "SELECT count(*) FROM steps")
    _, again = run_import(store, output_dir, "trl-twice")
    assert all(r.already and r.episodes == 0 for r in again)
    assert rows(store, "SELECT count(*) FROM steps") == before
    run = store.get_run(run_id)
    assert run is not None and run.episodes_finished == run.episodes_planned
