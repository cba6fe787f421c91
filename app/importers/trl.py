"""TRL's completion logs: `GRPOTrainer(args=GRPOConfig(log_completions=True))`.

Written by `GRPOTrainer.log` (trl/trainer/grpo_trainer.py) at each logging step:
`<output_dir>/completions/completions_{global_step:05d}.parquet` (pandas `to_parquet`), with
`step`, `prompt` and `completion` (chat messages for conversational data, text otherwise), one
column per reward function (its name; NaN where it gave None), the `log_extra` columns, and
`advantage`. A file holds the last generation batch, each prompt's `num_generations`
completions in a row: a group is one prompt's completions in one file. The episode's reward is
the sum of its reward columns (the trainer's `reward_weights` are not in the file).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Iterator, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import orjson

from app.importers.rollouts import Rollout, question_key
from app.importers.source import (
    BadRow,
    FileDigest,
    Format,
    Row,
    exact_sum,
    finite,
    json_kind,
    optional_int,
    problem_text,
    step_of,
)
from app.importers.turns import last_user_text, message_turns, split_turns

_NOT_REWARDS = frozenset({"step", "advantage", "prompt", "completion", "image", "images"})
_BATCH_ROWS = 1024
_MAGIC = b"PAR1"
_FOOTER_LENGTH_BYTES = 4


class TRL(Format):
    name = "trl"
    label = "TRL completions"
    layout = "completions/completions_<step>.parquet"

    def files(self, root: Path) -> list[Path]:
        if root.is_file():
            return [root]
        folder = root / "completions" if (root / "completions").is_dir() else root
        return sorted(folder.glob("completions_*.parquet"), key=lambda p: step_of(p.stem))

    def row_count(self, path: Path, digest: FileDigest) -> int:
        import pyarrow.parquet as pq

        try:
            return int(pq.ParquetFile(path).metadata.num_rows)
        except Exception:  # not Parquet: its one row is the bad file
            return 1

    def whole(self, path: Path) -> bool:
        return ends_with_footer(path)

    def rows(self, path: Path) -> Iterator[Row]:
        import pyarrow.parquet as pq

        try:
            parquet = pq.ParquetFile(path)
            names = parquet.schema_arrow.names
            missing = [c for c in ("prompt", "completion") if c not in names]
            if missing:
                raise BadRow(f"no {missing[0]!r} column: not a TRL completions file")
            if twice := sorted({n for n in names if names.count(n) > 1}):
                raise BadRow(f"two columns are named {twice[0]!r}: not a TRL completions file")
            rewards = [
                n
                for n in names
                if n not in _NOT_REWARDS and _numeric(parquet.schema_arrow.field(n).type)
            ]
            batches = parquet.iter_batches(batch_size=_BATCH_ROWS)
            file_step = step_of(path.stem)
            n = 0
            for batch in batches:
                for data in batch.to_pylist():
                    n += 1
                    digest = hashlib.sha256(_row_bytes(data)).digest()
                    earlier = partial(_earlier_digest, data)
                    try:
                        row = rollout(data, rewards, file_step)
                        yield Row(n, digest, row, earlier_sha256=earlier)
                    except (BadRow, KeyError, TypeError, ValueError) as exc:
                        yield Row(n, digest, None, problem_text(exc), earlier_sha256=earlier)
        except (BadRow, OSError, ValueError) as exc:
            # The file itself cannot be read (not Parquet, cut short): one bad row, line 0.
            text = problem_text(exc)
            yield Row(0, hashlib.sha256(text.encode()).digest(), None, text)
        except Exception as exc:  # pyarrow's own errors (ArrowInvalid is a ValueError; others not)
            text = problem_text(exc)
            yield Row(0, hashlib.sha256(text.encode()).digest(), None, text)


def ends_with_footer(path: Path) -> bool:
    """Whether the file ends as a whole Parquet file does: its footer's length, then the
    magic, after the leading magic and a footer of that length. A file written in place
    begins with the magic too, so the magic alone at its end says nothing."""
    tail_size = _FOOTER_LENGTH_BYTES + len(_MAGIC)
    try:
        with path.open("rb") as f:
            size = f.seek(0, os.SEEK_END)
            if size < len(_MAGIC) + tail_size:
                return False
            f.seek(size - tail_size)
            tail = f.read(tail_size)
    except OSError:
        return False
    footer = int.from_bytes(tail[:_FOOTER_LENGTH_BYTES], "little")
    return tail[_FOOTER_LENGTH_BYTES:] == _MAGIC and 0 < footer <= size - len(_MAGIC) - tail_size


def _numeric(kind: Any) -> bool:
    import pyarrow.types as t

    return bool(t.is_floating(kind) or t.is_integer(kind))


def _row_bytes(data: Mapping[str, Any]) -> bytes:
    """A Parquet row's values as JSON, keys sorted: what its digest is taken of."""
    try:
        return orjson.dumps(data, option=orjson.OPT_SORT_KEYS, default=str)
    except TypeError:  # what orjson refuses: a lone surrogate, a whole number past 64 bits
        return _earlier_row_bytes(data)


def _earlier_row_bytes(data: Mapping[str, Any]) -> bytes:
    """The row's JSON as earlier rollscopes took its digest: `json.dumps`, with its spaces."""
    return json.dumps(data, ensure_ascii=False, sort_keys=True, default=str).encode(
        "utf-8", "surrogatepass"
    )


def _earlier_digest(data: Mapping[str, Any]) -> bytes:
    """The digest an earlier rollscope took of the row (`_earlier_row_bytes`), for a file it
    read before: asked for only then (the importer's rows held from that reading)."""
    return hashlib.sha256(_earlier_row_bytes(data)).digest()


def rollout(data: Mapping[str, Any], reward_columns: list[str], file_step: int) -> Rollout:
    prompt_value, completion = data["prompt"], data["completion"]
    if isinstance(prompt_value, str):
        prompt: list[Any] = [{"role": "user", "content": prompt_value}]
    elif isinstance(prompt_value, list):
        prompt = [dict(m) for m in prompt_value if isinstance(m, Mapping)]
    else:
        raise BadRow(f"'prompt' is {json_kind(prompt_value)}, not messages or text")
    if isinstance(completion, str):
        completion = [{"role": "assistant", "content": completion}]
    if isinstance(completion, list):
        lead, turns = message_turns([m for m in completion if isinstance(m, Mapping)])
        prompt += lead
        if len(turns) == 1 and turns[0].reply is None and not turns[0].tool_calls:
            # A rollout_func that plays several turns returns their ids as one completion,
            # which TRL decodes into one text: the turns and the replies are in it.
            split = split_turns(turns[0].output)
            if split[0].reply is not None:
                turns = split
    else:
        raise BadRow(f"'completion' is {json_kind(completion)}, not messages or text")
    if not turns:
        raise BadRow("'completion' holds no assistant message")
    rewards = {
        name: float(v)
        for name in reward_columns
        if (v := data.get(name)) is not None and math.isfinite(v)
    }
    question = last_user_text(prompt)
    step = data.get("step", file_step)
    advantage = data.get("advantage")
    return Rollout(
        prompt=prompt,
        turns=turns,
        question=question,
        question_id=question_key(question),
        reward=exact_sum(list(rewards.values())),
        rewards=rewards,
        train_step=optional_int(step, "step"),
        advantage=finite(advantage),
    )
