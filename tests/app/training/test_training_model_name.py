"""What a training run records as its model: a local checkpoint by its absolute path (as
`rollscope run` records one), a hub id as given."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from app.training.settings import model_name


def test_a_local_checkpoint_is_recorded_by_its_absolute_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "ckpts" / "checkpoint-500").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    # As a trainer started in that folder loaded it: from_pretrained("ckpts/checkpoint-500").
    model = SimpleNamespace(name_or_path="ckpts/checkpoint-500")
    assert model_name(model) == str(tmp_path / "ckpts" / "checkpoint-500")


def test_a_hub_id_is_kept_and_a_model_without_a_name_gets_the_fallback() -> None:
    assert model_name(SimpleNamespace(name_or_path="Qwen/Qwen2.5-0.5B-Instruct")) == (
        "Qwen/Qwen2.5-0.5B-Instruct"
    )
    assert model_name(SimpleNamespace(name_or_path=""), "LlamaForCausalLM") == "LlamaForCausalLM"
    assert model_name(object()) == ""
