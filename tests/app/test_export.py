"""Exports of runs: a schema from the read models, late nulls, nested steps, several runs in one
file, atomic files, one-line errors, memory that does not grow with the run."""

from __future__ import annotations

import dataclasses
import io
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import app.export
from app.export import default_output, export_episodes
from app.export_schema import ExportSchemaError, arrow_type, converter, episode_schema, shape_of
from app.plural import counted
from app.recorder import Recorder
from storage.read_models import EpisodeDetail, EpisodeFilter, EpisodeSummary, StoredStep
from storage.store import Store
from tests.support.benchmark import make_benchmark
from tests.support.cli import in_process, rollscope
from tests.support.export_memory import measure_export
from tests.support.stores import late_answer, sized_run

LATE = 2_100
SET_FROM = 1_100  # past the 1,000 rows the old writer guessed its schema from
SMALL = 30


@dataclasses.dataclass(frozen=True)
class Runs:
    store: Store
    url: str
    small: int
    late: int
    empty: int


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    path = tmp_path_factory.mktemp("export") / "store.db"
    store = Store(f"sqlite:///{path}")
    small = sized_run(store, "small", SMALL)
    late = sized_run(store, "late-nulls", LATE, set_from=SET_FROM)
    empty = sized_run(store, "empty", 0)
    yield Runs(store, f"sqlite:///{path}", small, late, empty)
    store.close()


def _jsonl(path: Path | bytes) -> list[dict[str, Any]]:
    text = path.decode() if isinstance(path, bytes) else path.read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines()]


# -- Parquet: explicit schema, late values, nested steps --------------------------------------


def test_parquet_with_late_nulls_reads_back_whole(runs: Runs, tmp_path: Path) -> None:
    out = tmp_path / "late.parquet"
    assert export_episodes(runs.store, [runs.late], out, "parquet") == LATE
    table = pq.read_table(out)
    assert table.num_rows == LATE
    assert table.schema.equals(episode_schema(), check_metadata=False)
    assert table["question_id"].to_pylist() == [f"q{i:05d}" for i in range(LATE)]
    answers = table["answer"].to_pylist()
    assert answers[:SET_FROM] == [None] * SET_FROM
    assert answers[SET_FROM:] == [late_answer(i) for i in range(SET_FROM, LATE)]
    errors = table["error"].to_pylist()
    assert errors[:SET_FROM] == [None] * SET_FROM
    assert errors[SET_FROM:] == [
        f"grader failed on q{i:05d}" if i % 3 == 2 else None for i in range(SET_FROM, LATE)
    ]
    assert set(table["run_name"].to_pylist()) == {"late-nulls"}
    assert set(table["run_checkpoint"].to_pylist()) == {"/checkpoints/late-nulls"}


def test_parquet_steps_are_nested_and_queryable(runs: Runs, tmp_path: Path) -> None:
    out = tmp_path / "late.parquet"
    export_episodes(runs.store, [runs.late], out, "parquet")
    table = pq.read_table(out)
    assert pa.types.is_list(table["steps"].type)
    assert pc.list_value_length(table["steps"]).to_pylist() == [3] * LATE
    steps = pc.list_flatten(table["steps"])
    assert [f.name for f in steps.type] == [f.name for f in dataclasses.fields(StoredStep)]
    # Step errors and token counts are null in the first 1,100 episodes' steps, set later.
    errors = pc.struct_field(steps, "error")
    failed = pc.filter(errors, pc.is_valid(errors)).to_pylist()
    assert failed == [f"no such table: t{i}" for i in range(SET_FROM, LATE)]
    assert pc.struct_field(steps, "tokens_in").null_count == SET_FROM * 3
    actions = pc.value_counts(pc.struct_field(steps, "action")).to_pylist()
    assert {a["values"]: a["counts"] for a in actions} == {"QUERY": 2 * LATE, "ANSWER": LATE}
    # A row's steps are the store's steps, field for field.
    row = table.slice(LATE - 1, 1).to_pylist()[0]
    detail = runs.store.get_episode(row["id"])
    assert detail is not None
    # (A prompt's messages are (role, content, other keys as JSON) structs.)
    assert row["steps"] == [
        dataclasses.asdict(s)
        | {
            "prompt": [
                {"role": m["role"], "content": m["content"], "other": None} for m in s.prompt
            ]
        }
        for s in detail.steps
    ]


def test_row_groups_hold_late_values_across_groups(
    runs: Runs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(app.export, "_ROW_GROUP_ROWS", 500)
    out = tmp_path / "groups.parquet"
    export_episodes(runs.store, [runs.late], out, "parquet")
    meta = pq.ParquetFile(out).metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [500] * 4 + [100]
    table = pq.read_table(out)
    no_answer = [i for i in range(LATE) if i < SET_FROM or late_answer(i) is None]
    assert table["answer"].null_count == len(no_answer)


# -- JSONL, several runs, filters, streams -----------------------------------------------------


def test_jsonl_holds_the_same_rows_as_parquet(runs: Runs, tmp_path: Path) -> None:
    jsonl, parquet = tmp_path / "late.jsonl", tmp_path / "late.parquet"
    assert export_episodes(runs.store, [runs.late], jsonl, "jsonl") == LATE
    export_episodes(runs.store, [runs.late], parquet, "parquet")
    rows = _jsonl(jsonl)
    assert rows == pq.read_table(parquet).to_pylist()
    assert list(rows[0]) == episode_schema().names
    assert rows[0]["answer"] is None and rows[-1]["answer"] == late_answer(LATE - 1)
    assert [s["step_no"] for s in rows[-1]["steps"]] == [1, 2, 3]


def test_several_runs_go_one_after_another(runs: Runs, tmp_path: Path) -> None:
    out = tmp_path / "two.parquet"
    ids = [runs.small, runs.late, runs.empty]
    assert export_episodes(runs.store, ids, out, "parquet") == SMALL + LATE
    table = pq.read_table(out)
    assert table["run_name"].to_pylist() == ["small"] * SMALL + ["late-nulls"] * LATE
    assert table["run_id"].to_pylist() == [runs.small] * SMALL + [runs.late] * LATE


def test_a_filter_narrows_the_episodes_of_each_run(runs: Runs, tmp_path: Path) -> None:
    out = tmp_path / "correct.jsonl"
    correct = EpisodeFilter(outcomes=("correct",))
    n = export_episodes(runs.store, [runs.small, runs.late], out, "jsonl", correct)
    rows = _jsonl(out)
    assert n == len(rows)
    correct_small = [f"q{i:05d}" for i in range(SMALL) if i % 3 == 0]
    correct_late = [f"q{i:05d}" for i in range(SET_FROM, LATE) if i % 3 == 0]
    assert [r["question_id"] for r in rows] == correct_small + correct_late
    assert {r["outcome"] for r in rows} == {"correct"}
    # The filter's own runs and the asked runs combine with AND.
    only_small = EpisodeFilter(run_ids=(runs.small,))
    assert export_episodes(runs.store, [runs.small, runs.late], out, "jsonl", only_small) == SMALL
    assert {r["run_name"] for r in _jsonl(out)} == {"small"}
    assert export_episodes(runs.store, [runs.late], out, "jsonl", only_small) == 0


def test_tags_and_notes_are_exported_with_each_episode(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    run = sized_run(store, "tagged", 4)
    first, second, third, _ = [d.summary.id for d in store.iter_episode_details(run)]
    store.annotate(first, "wrong-join", note="joined on name\n<b>not html</b>", author="ana")
    store.annotate(first, "look-again", step=2)
    store.annotate(second, "look-again", note="ünïcode ✓")
    jsonl, parquet = tmp_path / "t.jsonl", tmp_path / "t.parquet"
    export_episodes(store, [run], jsonl, "jsonl")
    export_episodes(store, [run], parquet, "parquet")
    rows = _jsonl(jsonl)
    table = pq.read_table(parquet).to_pylist()
    for row in table:  # JSON has no time type: JSONL writes ISO 8601 text
        for a in row["annotations"]:
            a["created_at"] = a["created_at"].replace(tzinfo=None).isoformat()
    for row in rows:
        for a in row["annotations"]:
            a["created_at"] = (
                datetime.fromisoformat(a["created_at"]).replace(tzinfo=None).isoformat()
            )
    assert rows == table
    by_id = {r["id"]: r for r in rows}
    assert by_id[first]["tags"] == ["look-again", "wrong-join"]
    notes = [(a["tag"], a["step"], a["note"], a["author"]) for a in by_id[first]["annotations"]]
    assert notes == [
        ("wrong-join", None, "joined on name\n<b>not html</b>", "ana"),
        ("look-again", 2, None, None),
    ]
    assert [a["note"] for a in by_id[second]["annotations"]] == ["ünïcode ✓"]
    assert by_id[third]["tags"] == [] and by_id[third]["annotations"] == []
    # The Episodes page's tag filter narrows the export as it narrows the list.
    n = export_episodes(store, [run], jsonl, "jsonl", EpisodeFilter(tags=("look-again",)))
    assert n == 2 and sorted(r["id"] for r in _jsonl(jsonl)) == sorted([first, second])
    store.close()


def test_a_stream_target_gets_the_file(runs: Runs) -> None:
    buf = io.BytesIO()
    assert export_episodes(runs.store, [runs.small], buf, "parquet") == SMALL
    assert pq.read_table(pa.BufferReader(buf.getvalue())).num_rows == SMALL
    buf = io.BytesIO()
    export_episodes(runs.store, [runs.small], buf, "jsonl")
    assert len(_jsonl(buf.getvalue())) == SMALL


def test_a_run_without_episodes_gives_a_file_with_the_schema(runs: Runs, tmp_path: Path) -> None:
    out = tmp_path / "empty.parquet"
    assert export_episodes(runs.store, [runs.empty], out, "parquet") == 0
    table = pq.read_table(out)
    assert table.num_rows == 0 and table.schema.equals(episode_schema(), check_metadata=False)


# -- failures write nothing --------------------------------------------------------------------


class _DiskFullAfter(Store):
    """The store, but the export's disk fills up after 150 episodes (an unreachable boundary)."""

    def iter_episode_details(
        self, run_id: int, *, flt: EpisodeFilter | None = None, batch: int = 200
    ) -> Iterator[EpisodeDetail]:
        for n, detail in enumerate(super().iter_episode_details(run_id, flt=flt, batch=batch)):
            if n == 150:
                raise OSError(28, "No space left on device")
            yield detail


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_a_failed_export_leaves_the_old_file_and_no_temporary(
    runs: Runs, tmp_path: Path, fmt: Literal["jsonl", "parquet"]
) -> None:
    out = tmp_path / f"out.{fmt}"
    out.write_text("earlier export")
    with pytest.raises(OSError, match="No space left"):
        export_episodes(_DiskFullAfter(runs.url), [runs.late], out, fmt)
    assert [p.name for p in tmp_path.iterdir()] == [out.name]
    assert out.read_text() == "earlier export"


def test_bad_arguments_write_nothing(runs: Runs, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no run with id 999"):
        export_episodes(runs.store, [runs.small, 999], tmp_path / "x.jsonl", "jsonl")
    with pytest.raises(ValueError, match="unknown export format 'csv'"):
        export_episodes(runs.store, [runs.small], tmp_path / "x.csv", "csv")  # type: ignore[arg-type]
    folder = tmp_path / "folder"
    folder.mkdir()
    with pytest.raises(IsADirectoryError):
        export_episodes(runs.store, [runs.small], folder, "jsonl")
    assert [p.name for p in tmp_path.iterdir()] == ["folder"]
    assert list(folder.iterdir()) == []


def test_default_output_names() -> None:
    assert default_output(["ckpt-1000"], "parquet") == Path("ckpt-1000.parquet")
    assert default_output(["hf:/models/ckpt 2"], "jsonl") == Path("hf__models_ckpt_2.jsonl")
    assert default_output(["..."], "jsonl") == Path("run.jsonl")
    assert default_output(["a", "b"], "jsonl") == Path("rollscope-export.jsonl")


# -- the schema comes from the read models -----------------------------------------------------


def test_every_read_model_field_has_a_column() -> None:
    schema = episode_schema()
    summary = [f.name for f in dataclasses.fields(EpisodeSummary) if f.name != "steps"]
    detail = [f.name for f in dataclasses.fields(EpisodeDetail) if f.name not in ("summary", "run")]
    run = ["run_policy", "run_checkpoint", "run_checkpoint_fingerprint", "run_dataset"]
    origin = [
        "rewards_by_name", "source_file", "source_line", "source_agent", "source_gone", "regraded",
    ]  # fmt: skip
    assert schema.names == [*summary, *run, *detail, "tags", "replaced", *origin, "filled_steps"]
    step = schema.field("steps").type.value_type
    assert [f.name for f in step] == [f.name for f in dataclasses.fields(StoredStep)]
    assert not schema.field("id").nullable and schema.field("answer").nullable


@dataclasses.dataclass(frozen=True)
class _Note:
    tag: str
    step_no: int | None
    at: datetime


@dataclasses.dataclass(frozen=True)
class _Future:
    """Fields the read models may grow (annotations, token traces), in every supported form."""

    text: str
    count: int
    score: float | None
    flag: bool
    kind: Literal["a", "b"]
    notes: list[_Note]
    logprobs: tuple[float, ...] | None
    top: tuple[tuple[str, float], ...]


def test_types_map_from_hints_and_values_convert() -> None:
    shape = shape_of(_Future)
    note = pa.struct(
        [
            pa.field("tag", pa.string(), False),
            pa.field("step_no", pa.int64(), True),
            pa.field("at", pa.timestamp("us", tz="UTC"), False),
        ]
    )
    pair = pa.struct([pa.field("f0", pa.string(), False), pa.field("f1", pa.float64(), False)])
    expected = pa.struct(
        [
            pa.field("text", pa.string(), False),
            pa.field("count", pa.int64(), False),
            pa.field("score", pa.float64(), True),
            pa.field("flag", pa.bool_(), False),
            pa.field("kind", pa.string(), False),
            pa.field("notes", pa.list_(pa.field("item", note, False)), False),
            pa.field("logprobs", pa.list_(pa.field("item", pa.float64(), False)), True),
            pa.field("top", pa.list_(pa.field("item", pair, False)), False),
        ]
    )
    assert arrow_type(shape) == expected
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    value = _Future("t", 1, None, True, "b", [_Note("wrong-table", 2, at)], (-0.5,), (("a", -1.0),))
    convert = converter(shape)
    assert convert is not None
    plain = convert(value)
    assert pa.array([plain], expected).to_pylist() == [
        {
            "text": "t",
            "count": 1,
            "score": None,
            "flag": True,
            "kind": "b",
            "notes": [{"tag": "wrong-table", "step_no": 2, "at": at}],
            "logprobs": [-0.5],
            "top": [{"f0": "a", "f1": -1.0}],
        }
    ]
    json.loads(json.dumps(plain, default=app.export._json_default))  # JSONL takes it as well


@dataclasses.dataclass(frozen=True)
class _Unexportable:
    extra: dict[str, Any]


@pytest.mark.parametrize("hint", [dict[str, Any], set[int], Any, int | str, bytes, Literal[True]])
def test_a_type_without_a_column_type_fails_loudly(hint: Any) -> None:
    with pytest.raises(ExportSchemaError, match="has no column type"):
        shape_of(hint)


def test_the_error_names_the_field() -> None:
    with pytest.raises(ExportSchemaError, match=r"cannot export _Unexportable\.extra"):
        shape_of(_Unexportable, "_Unexportable")


# -- the command line ---------------------------------------------------------------------------


def test_cli_exports_several_runs_or_all(runs: Runs, tmp_path: Path) -> None:
    out = tmp_path / "two.parquet"
    res = rollscope(
        "export", "--run", "late-nulls", "--run", "small", "--run", "late-nulls",
        "--format", "parquet", "--output", out, "--store", runs.url, cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert f"wrote {SMALL + LATE:,} episodes of 2 runs to {out}" in res.stdout
    names = pq.read_table(out)["run_name"].to_pylist()
    assert names == ["late-nulls"] * LATE + ["small"] * SMALL

    res = rollscope("export", "--all", "--store", runs.url, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    rows = _jsonl(tmp_path / "rollscope-export.jsonl")  # the default name for several runs
    assert [r["run_name"] for r in rows] == ["small"] * SMALL + ["late-nulls"] * LATE

    res = rollscope("export", "--run", "small", "--store", runs.url, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert len(_jsonl(tmp_path / "small.jsonl")) == SMALL


def test_cli_exports_a_played_run(tmp_path: Path) -> None:
    questions, db_dir = make_benchmark(tmp_path / "bench")
    store = f"sqlite:///{tmp_path / 'store.db'}"
    played = rollscope(
        "run", "--policy", "oracle", "--questions", questions, "--db-dir", db_dir,
        "--samples", "2", "--name", "oracle-1", "--store", store, "--quiet", cwd=tmp_path,
    )  # fmt: skip
    assert played.returncode == 0, played.stderr
    out = tmp_path / "out.jsonl"
    res = rollscope("export", "--run", "oracle-1", "--store", store, "--output", out, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    rows = _jsonl(out)
    assert len(rows) == 12 and all(len(r["steps"]) == 3 for r in rows)
    assert {r["outcome"] for r in rows} == {"correct"}
    res = rollscope("export", "--run", "1", "--format", "parquet", "--store", store, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    table = pq.read_table(tmp_path / "oracle-1.parquet")
    assert table.to_pylist() == rows
    actions = pc.struct_field(pc.list_flatten(table["steps"]), "action").to_pylist()
    assert actions == ["DESCRIBE", "QUERY", "ANSWER"] * 12


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A Recorder's training run: two questions, two samples each, at steps 0 to 4."""
    url = f"sqlite:///{tmp_path_factory.mktemp('trained') / 'store.db'}"
    with Recorder(url, run="grpo", kind="training") as rec:
        for step in range(5):
            for question in ("How many singers?", "How many concerts?"):
                for _ in range(2):
                    turns = [{"role": "assistant", "content": "ANSWER 6"}]
                    rec.episode(question=question, turns=turns, reward=1.0, step=step)
    return url


@pytest.mark.parametrize(
    ("steps", "want"), [("1-2", [1, 2]), ("3", [3]), ("3-", [3, 4]), ("-1", [0, 1]), ("7-9", [])]
)
def test_cli_exports_a_range_of_training_steps(
    trained: str, tmp_path: Path, steps: str, want: list[int]
) -> None:
    out = tmp_path / "steps.jsonl"
    res = rollscope(
        "export", "--run", "grpo", "--training-steps", steps, "--output", out, "--store", trained,
        cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert sorted({r["train_step"] for r in _jsonl(out)}) == want
    assert len(_jsonl(out)) == 4 * len(want)
    said = f"wrote {counted(4 * len(want), 'episode')} of 1 run to {out} (training steps {steps})"
    assert said in res.stdout
    assert ("no finished episode of these runs" in res.stdout) == (not want)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--run", "small", "--training-steps", "x"], "'x' is not a range of training steps"),
        (["--run", "small", "--training-steps", "-"], "'-' is not a range of training steps"),
        (["--run", "small", "--training-steps", "2--1"], "'2--1' is not a range"),
        (["--run", "small", "--training-steps", "5-2"], "'5-2' runs backwards"),
        (["--run", "nope"], "no run 'nope' in the store"),
        (["--run", "small", "--format", "csv"], "unknown format 'csv'"),
        (["--run", "small", "--output", "missing/out.jsonl"], "folder missing does not exist"),
        (["--run", "small", "--output", "."], "is a folder"),
        ([], "--run NAME (repeatable), or --all"),
        (["--all", "--run", "small"], "--run and --all both given"),
    ],
)
def test_cli_bad_input_is_one_line_and_writes_nothing(
    runs: Runs,
    tmp_path: Path,
    args: list[str],
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    code, err = in_process(monkeypatch, capsys, "export", *args, "--store", runs.url)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and message in err, err
    assert list(tmp_path.iterdir()) == []


# -- memory ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_export_memory_stays_below_holding_the_run(tmp_path: Path) -> None:
    """2,000 episodes of 4 steps with 24 kB prompts (~190 MB of text): holding the run costs
    about that much; both exports allocate far less at their peak (their buffers do not grow
    with the run). Bytes are traced (tracemalloc and Arrow's pool): RSS moves with the load of
    the machine; tests/benchmarks/bench_export.py reports it."""
    url = f"sqlite:///{tmp_path / 'fat.db'}"
    store = Store(url)
    run_id = sized_run(store, "fat", 2_000, steps=4, prompt_chars=24_000, set_from=1_000)
    store.close()
    held = measure_export(url, [run_id], "whole", tmp_path / "none", trace=True)["traced"]
    assert held > 190e6  # the run is big enough to tell the two apart
    for fmt in ("parquet", "jsonl"):
        figures = measure_export(url, [run_id], fmt, tmp_path / f"fat.{fmt}", trace=True)
        assert figures["episodes"] == 2_000
        assert figures["traced"] < held / 3, (fmt, figures["traced"], held)


def test_an_imported_episode_carries_its_source_agent_and_rewards_by_name(tmp_path: Path) -> None:
    # A self-play line of two trained agents, imported: each episode says its file, line and
    # agent, and its rewards by name; a played run's episodes have none of them.
    from tests.app.importers.conftest import run_import
    from tests.app.importers.test_verifiers_traces import _episode, _solver
    from tests.app.importers.writers import verifiers_write_episode

    critic = _solver(agent={"name": "critic", "trainable": True})
    critic["rewards"] = {"correct": {"score": 0.0, "weight": 1.0}, "style": {"score": 0.5}}
    verifiers_write_episode(tmp_path / "run", _episode([_solver(), critic]))
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    imported, _ = run_import(store, tmp_path / "run", "self-play")
    played = sized_run(store, "played", 1)
    jsonl, parquet = tmp_path / "o.jsonl", tmp_path / "o.parquet"
    assert export_episodes(store, [imported, played], jsonl, "jsonl") == 3
    export_episodes(store, [imported, played], parquet, "parquet")
    columns = ("source_file", "source_line", "source_agent", "source_gone", "rewards_by_name",
               "regraded", "filled_steps")  # fmt: skip
    rows = [tuple(r[c] for c in columns) for r in _jsonl(jsonl)]
    assert rows == [tuple(r[c] for c in columns) for r in pq.read_table(parquet).to_pylist()]

    def named(**values: float) -> list[dict[str, Any]]:
        return [{"name": n, "value": v} for n, v in values.items()]

    # Each reward function's weighted score, the total and the trace's metrics, by name.
    assert rows == [
        ("traces.jsonl", 1, "agent", False, named(correct=1.0, format=0.1, reward=1.1, turns=2.0),
         None, []),
        ("traces.jsonl", 1, "critic", False, named(correct=0.0, reward=0.5, style=0.5, turns=2.0),
         None, []),
        (None, None, None, None, [], None, []),
    ]  # fmt: skip
    store.close()


def test_an_episode_a_rewrite_of_its_file_dropped_says_so(tmp_path: Path) -> None:
    # A resumed trainer wrote step 2's file anew: pandas can keep the play the file holds now.
    from tests.app.importers.conftest import run_import
    from tests.app.importers.writers import sql_prompt, sql_response, verl_dump

    def write(scores: list[float]) -> None:
        turns = [("<solution>SELECT 1</solution>", None)]
        n = len(scores)
        verl_dump(tmp_path / "dump", 2, [sql_prompt("How many?")] * n,
                  [sql_response(turns)] * n, ["SELECT 1"] * n, scores, {})  # fmt: skip

    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    write([0.0, 1.0])
    run_id, _ = run_import(store, tmp_path / "dump")
    write([1.0, 0.5])
    run_import(store, tmp_path / "dump")
    out = tmp_path / "o.parquet"
    # The 1.0 of the new play has the bytes of the first's: one row, in the file still.
    assert export_episodes(store, [run_id], out, "parquet") == 3
    store.close()
    rows = pq.read_table(out, columns=["reward", "source_gone", "replaced"]).to_pylist()
    assert sorted((r["reward"], r["source_gone"], r["replaced"]) for r in rows) == [
        (0.0, True, True), (0.5, False, False), (1.0, False, False),
    ]  # fmt: skip


def test_a_resumed_trainers_earlier_plays_are_marked_replaced(tmp_path: Path) -> None:
    # Training reads a step as its latest play; an export holds both, and says which is which.
    from rollout_core.records import IterationBatch
    from tests.support.records import finish, spec, start

    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    run_id = store.create_run(spec("grpo", kind="training"), episodes_planned=None)
    sink = store.sink(run_id)
    for sample, (step, reward) in enumerate([(0, 0.0), (1, 0.0), (1, 1.0)]):
        if sample == 2:
            store.mark_replayed(run_id, 1)  # the trainer resumed at step 1
        sink.write(IterationBatch(started=[start("q1", sample, train_step=step)]))
        sink.write(IterationBatch(finished=[finish("q1", sample, "wrong", reward, 1)]))
    out = tmp_path / "o.jsonl"
    assert export_episodes(store, [run_id], out, "jsonl") == 3
    store.close()
    rows = [(r["train_step"], r["reward"], r["replaced"], r["source_gone"]) for r in _jsonl(out)]
    assert rows == [(0, 0.0, False, None), (1, 0.0, True, None), (1, 1.0, False, None)]


def test_a_training_episode_carries_its_step_group_and_tokens(tmp_path: Path) -> None:
    # Reward by training step, or a GRPO group's spread, from the file alone: the columns the
    # Training and GRPO groups pages read.
    from app.recorder import Recorder

    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    turns = [{"role": "assistant", "content": "ANSWER 5"}]
    with Recorder(store, run="grpo", kind="training") as rec:
        rec.episode(question="Q?", turns=turns, reward=1.0, step=7, tokens_out=12,
                    mean_logprob=-0.5)  # fmt: skip
        rec.episode(question="Q?", turns=turns, reward=0.0, step=7)
        rec.episode(question="R?", turns=turns, reward=0.0, step=8)
    played = sized_run(store, "played", 1)
    jsonl, parquet = tmp_path / "o.jsonl", tmp_path / "o.parquet"
    export_episodes(store, [rec.run_id, played], jsonl, "jsonl")
    export_episodes(store, [rec.run_id, played], parquet, "parquet")
    columns = ("train_step", "group_index", "sample_index", "tokens_out", "mean_logprob")
    rows = [tuple(r[c] for c in columns) for r in _jsonl(jsonl)]
    assert rows == [tuple(r[c] for c in columns) for r in pq.read_table(parquet).to_pylist()]
    assert rows == [
        (7, 0, 0, 12, -0.5),
        (7, 0, 1, None, None),
        (8, 1, 0, None, None),
        (None, None, 0, None, None),  # a batch run: no step, its question's samples a group
    ]
    store.close()


def test_prompt_messages_export_as_recorded(tmp_path: Path) -> None:
    """An assistant turn that only calls a tool has no content (OpenAI writes null): not the
    text "null", which a model may write."""
    from rollout_core.records import IterationBatch
    from tests.support.records import finish, spec, start, step

    call = {"id": "c1", "type": "function", "function": {"name": "run_sql", "arguments": "{}"}}
    asked = {"role": "user", "content": "How many?"}
    prompts = {
        "none": (asked, {"role": "assistant", "content": None, "tool_calls": [call]}),
        "null": (asked, {"role": "assistant", "content": "null"}),
        "parts": ({"role": "user", "content": [{"type": "text", "text": "How many?"}]},),
    }
    store = Store(f"sqlite:///{tmp_path / 'm.db'}")
    run = store.create_run(spec("messages"), episodes_planned=None)
    for q, prompt in prompts.items():
        store.sink(run).write(
            IterationBatch(
                [start(q)], [step(q, 0, 1, prompt=prompt)], [finish(q, 0, "wrong", 0, 1)]
            )
        )
    jsonl, parquet = tmp_path / "m.jsonl", tmp_path / "m.parquet"
    export_episodes(store, [run], jsonl, "jsonl")
    export_episodes(store, [run], parquet, "parquet")
    rows = _jsonl(jsonl)
    assert rows == pq.read_table(parquet).to_pylist()
    shown = {r["question_id"]: r["steps"][0]["prompt"] for r in rows}
    assert shown["none"][1] == {
        "role": "assistant",
        "content": None,
        "other": json.dumps({"tool_calls": [call]}),
    }
    assert shown["null"][1] == {"role": "assistant", "content": "null", "other": None}
    assert shown["parts"][0]["content"] == json.dumps([{"type": "text", "text": "How many?"}])
    store.close()
