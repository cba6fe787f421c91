"""The episode text search through its index (`storage.text_search`) finds exactly what the
LIKE scan finds, on SQLite and PostgreSQL, in new stores and in stores migrated to it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from alembic import command
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session

from rollout_core.records import EpisodeRecord, EpisodeStart, IterationBatch, StepRecord
from storage import text_search
from storage.migrations import alembic_config
from storage.read_models import EpisodeFilter
from storage.store import Store
from storage.writes import merged
from tests.support.records import spec
from tests.support.stores import write_run

# (question, gold SQL, outputs, finished)
EPISODES = [
    ("How many singers are from France?", "SELECT count(*) FROM singer WHERE country = 'France'",
     ["DESCRIBE singer", "QUERY SELECT name FROM Singer"], True),
    ("Quel est l'âge moyen des chanteurs ÉTRANGERS ?", "SELECT avg(age) FROM singer",
     ["ANSWER 35,5 % de l'école"], True),
    ("Which 50% of stadiums hold a_b?", "SELECT * FROM t WHERE name LIKE 'a_b%'",
     ["QUERY SELECT 100 % 7", "snake_case_name"], True),
    ("下雨了吗？ 😀", "SELECT 1", ['He said "quoted" \\ back\\slash'], True),
    ("Two outputs", "SELECT 2", ["it ends with ab", "cd starts this one"], True),
    ("Still being played", "SELECT 3", ["QUERY SELECT zebra FROM zoo"], False),
    ("Straße or STRASSE", "SELECT 4", ["İstanbul ıi Ünïcödé", "a nul\x00here"], True),
]  # fmt: skip

NEEDLES = [
    # one and two characters: no trigram, the scan alone
    "a", "É", "é", "%", "_", "\\", "😀", "ab", "Ab", "%_", "下雨",
    # three and more
    "singer", "SINGER", "sInGeR", "école", "ÉCOLE", "étrangers", "ÉTRANGERS", "chanteurs é",
    "50%", "a_b", "_b%", "100 % 7", "snake_case", "snake%case", "snake_", '"quoted"',
    '"q', "\\ back\\", "下雨了", "了吗？ 😀", "abcd", "ab\ncd", "zebra", "zq-no-such-text",
    "straße", "STRASSE", "ıi", "İst", "ist", "ünïcödé", "ÜNÏCÖDÉ", "France'", "count(*)",
    "how many", "select", "\x00ab", "ab\x00cd", "nul\x00h", "\x00", "l\x00",
]  # fmt: skip


def _batches(episodes: list[tuple[str, str, list[str], bool]]) -> list[IterationBatch]:
    batches = []
    for n, (question, gold, outputs, done) in enumerate(episodes):
        q = f"q{n}"
        steps = [
            StepRecord(
                question_id=q, sample_index=0, step_no=i, prompt=(), raw_output=raw,
                action="QUERY", argument="", parsed=True, observation="o", error=None,
                reward=0.0, done=done and i == len(outputs), tokens_in=1, tokens_out=1,
                policy_seconds=0.0, env_seconds=0.0,
            )
            for i, raw in enumerate(outputs, start=1)
        ]  # fmt: skip
        finished = [
            EpisodeRecord(q, 0, "wrong", 0.0, 0.0, 1.0, len(outputs), "x", 1.0,
                          failure_class="wrong_answer")
        ] if done else []  # fmt: skip
        start = EpisodeStart(q, 0, n, "db", question, gold)
        batches.append(IterationBatch(started=[start], steps=steps, finished=finished))
    return batches


@pytest.fixture
def filled(store: Store) -> Store:
    write_run(store, spec("texts"), _batches(EPISODES), status=None)
    return store


def _found(store: Store, needle: str, *, finished_only: bool = False) -> list[int]:
    flt = EpisodeFilter(text=needle, finished_only=finished_only)
    return [e.id for e in store.list_episodes(flt, limit=100).items]


def _scanned(
    store: Store, needle: str, monkeypatch: pytest.MonkeyPatch, *, finished_only: bool = False
) -> list[int]:
    """What the LIKE scan alone finds: the search with the index never consulted."""
    with monkeypatch.context() as m:
        m.setattr(text_search, "candidates", lambda *_: None)
        return _found(store, needle, finished_only=finished_only)


def _ids(store: Store) -> dict[str, int]:
    """Question text -> episode id."""
    items = store.list_episodes(EpisodeFilter(finished_only=False), limit=100).items
    return {e.question: e.id for e in items}


@pytest.mark.parametrize("finished_only", [False, True])
def test_the_index_finds_what_the_scan_finds(
    filled: Store, monkeypatch: pytest.MonkeyPatch, finished_only: bool
) -> None:
    for needle in NEEDLES:
        assert _narrowed(filled, needle) == (len(needle) >= text_search.MIN_CHARS), needle
        found = _found(filled, needle, finished_only=finished_only)
        assert found == _scanned(filled, needle, monkeypatch, finished_only=finished_only), needle


def test_what_a_search_finds_by_hand(filled: Store) -> None:
    ids = _ids(filled)
    first, french, percent, cjk, _, playing, unicode = (ids[e[0]] for e in EPISODES)
    assert _found(filled, "sInGeR") == [first, french]  # in the gold SQL of the French one
    assert _found(filled, "50%") == [percent] and _found(filled, "snake%case") == []
    assert _found(filled, "了吗？ 😀") == [cjk] and _found(filled, '"quoted" \\') == [cjk]
    assert _found(filled, "abcd") == [] and _found(filled, "ab\ncd") == []  # two outputs
    assert _found(filled, "zebra") == [playing]  # not finished, so not in the index yet
    assert _found(filled, "zebra", finished_only=True) == []
    assert _found(filled, "ÜNïcödé") == [unicode] and _found(filled, "zq-no-such-text") == []
    assert _found(filled, "nul\x00here") == [unicode]  # stored, as searched, with U+FFFD
    assert all(i not in (french, unicode) for i in _found(filled, "ÉCOLE"))


def _narrowed(store: Store, needle: str) -> bool:
    """Whether the index narrows the search for `needle`."""
    with Session(store._engine) as session:
        return text_search.candidates(session, needle) is not None


def test_a_rare_text_is_looked_up_and_a_common_or_short_one_is_not(
    filled: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _narrowed(filled, "zq-no-such-text") and not _narrowed(filled, "ab")
    monkeypatch.setattr(text_search, "CANDIDATE_CAP", 1)
    assert not _narrowed(filled, "singer")  # in two episodes
    assert _narrowed(filled, "zebra")
    # Past the cap the scan decides, and finds the same.
    assert _found(filled, "singer") == _scanned(filled, "singer", monkeypatch)


def test_a_window_below_one_is_refused_for_a_text_the_index_narrows(filled: Store) -> None:
    assert _narrowed(filled, "zebra")
    with pytest.raises(ValueError, match="text_newest must be at least 1"):
        filled.list_episodes(EpisodeFilter(text="zebra", text_newest=0))


def test_an_episode_is_indexed_when_it_finishes(store: Store) -> None:
    if store.dialect != "sqlite":
        pytest.skip("PostgreSQL indexes the columns themselves")
    playing = _batches([("Q", "SELECT 1", ["QUERY SELECT walrus"], False)])
    run_id = write_run(store, spec("later"), playing, status=None)
    assert _index_hits(store, "walrus") == []
    (episode,) = store.list_episodes(EpisodeFilter(finished_only=False)).items
    done = EpisodeRecord("q0", 0, "wrong", 0.0, 0.0, 1.0, 1, "x", 1.0, failure_class="wrong_answer")
    store.sink(run_id).write(IterationBatch(started=[], steps=[], finished=[done]))
    assert _index_hits(store, "walrus") == [episode.id]
    assert _found(store, "walrus", finished_only=True) == [episode.id]


def test_a_deleted_runs_episode_id_taken_again_finds_only_the_new_text(store: Store) -> None:
    narwhal, okapi = (
        _batches([("Q", "SELECT 1", [f"QUERY SELECT {w}"], True)]) for w in ("narwhal", "okapi")
    )
    old = write_run(store, spec("old"), narwhal, status=None)
    (gone,) = store.list_episodes(EpisodeFilter()).items
    store.delete_run(old)
    write_run(store, spec("new"), okapi, status=None)
    (now,) = store.list_episodes(EpisodeFilter()).items
    if store.dialect == "sqlite":
        assert now.id == gone.id  # SQLite gives the freed id out again
    assert _found(store, "narwhal") == [] and _found(store, "okapi") == [now.id]


def _index_hits(store: Store, needle: str) -> list[int]:
    query = text_search.fts_query(needle)
    with store._engine.connect() as conn:
        rows = conn.execute(
            text(f"SELECT rowid FROM {text_search.INDEX_TABLE} WHERE "
                 f"{text_search.INDEX_TABLE} MATCH :q ORDER BY rowid"),
            {"q": query},
        )  # fmt: skip
        return [r[0] for r in rows]


def _index_objects(url: str) -> set[str]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            if conn.dialect.name == "sqlite":
                sql = "SELECT name FROM sqlite_master"
            else:
                sql = "SELECT indexname FROM pg_indexes"
            return {r[0] for r in conn.execute(text(sql))} & text_search.search_objects()
    finally:
        engine.dispose()


def _previous_revision() -> str:
    script = ScriptDirectory.from_config(alembic_config())
    revision = script.get_revision("0012")
    assert revision is not None and isinstance(revision.down_revision, str)
    return revision.down_revision


@pytest.fixture
def before_the_index(store_url: str) -> Iterator[str]:
    """A store with the test episodes at the revision before the index: written at head,
    then taken back down (which drops the index and keeps every row)."""
    store = Store(store_url)
    write_run(store, spec("texts"), _batches(EPISODES), status=None)
    store.close()
    engine = create_engine(store_url)
    with engine.begin() as conn:
        cfg = alembic_config()
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, _previous_revision())
    engine.dispose()
    yield store_url


def _automerge(url: str) -> int:
    """How many segments of a level the SQLite index merges at a time (FTS5's default: 4)."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            found = conn.exec_driver_sql(
                "SELECT v FROM episode_text_config WHERE k = 'automerge'"
            ).scalar()
            return 4 if found is None else int(found)
    finally:
        engine.dispose()


def test_a_new_store_has_the_index(store: Store) -> None:
    names = _index_objects(store.url)
    if store.dialect == "sqlite":
        assert {text_search.INDEX_TABLE, text_search.UNFINISHED_INDEX} <= names
        # Sixteen segments merged at a time, not four: a segment is rewritten at fewer levels.
        assert _automerge(store.url) == 16
    else:
        assert set(text_search.PG_INDEXES) == names


def test_migrating_indexes_the_text_already_there(
    before_the_index: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _index_objects(before_the_index) == set()
    store = Store(before_the_index)  # a writer: migrates on open
    try:
        ids = _ids(store)
        if store.dialect == "sqlite":
            assert _automerge(before_the_index) == 16
            finished = sorted(ids[q] for q, _, _, done in EPISODES if done)
            assert _index_hits(store, "SELECT") == finished  # in every gold SQL
            assert _index_hits(store, "singer") == [ids[EPISODES[0][0]], ids[EPISODES[1][0]]]
        else:
            assert set(text_search.PG_INDEXES) == _index_objects(before_the_index)
        for needle in NEEDLES:
            assert _found(store, needle) == _scanned(store, needle, monkeypatch), needle
    finally:
        store.close()


def _sample(
    sample: int, question: str, output: str, *, start: bool = True, finish: bool = True
) -> IterationBatch:
    """Records of sample `sample` of question q-okapi: its start, one step, its finish."""
    step = StepRecord(
        question_id="q-okapi", sample_index=sample, step_no=1, prompt=(), raw_output=output,
        action="QUERY", argument="", parsed=True, observation="o", error=None, reward=0.0,
        done=finish, tokens_in=1, tokens_out=1, policy_seconds=0.0, env_seconds=0.0,
    )  # fmt: skip
    done = EpisodeRecord(
        "q-okapi", sample, "wrong", 0.0, 0.0, 1.0, 1, "x", 1.0, failure_class="wrong_answer"
    )
    starts = [
        EpisodeStart("q-okapi", sample, sample, "zoo", question, "SELECT count(*) FROM okapi")
    ]
    return IterationBatch(
        started=starts if start else [], steps=[step] if start else [],
        finished=[done] if finish else [],
    )  # fmt: skip


def test_samples_of_one_question_share_its_indexed_texts(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    zoos, parks = "How many okapis live in zoos?", "How many okapis live in parks?"
    batches = [
        merged(
            [_sample(0, zoos, "QUERY ant", finish=False), _sample(1, zoos, "QUERY bee"),
             _sample(2, parks, "QUERY cat")]
        ),  # sample 1 finishes before the first sample does
        merged(
            [_sample(0, zoos, "", start=False), _sample(3, zoos, "QUERY dog")]
        ),
    ]  # fmt: skip
    write_run(store, spec("okapis"), batches, status=None)
    write_run(store, spec("again"), [_sample(0, zoos, "QUERY eel")], status=None)
    items = store.list_episodes(EpisodeFilter(), limit=100).items
    first, bee, cat, dog = sorted(e.id for e in items if e.run_name == "okapis")
    (again,) = (e.id for e in items if e.run_name == "again")
    if store.dialect == "sqlite":
        # Indexed by the first sample, by one that finished before it, and where it differs.
        assert _index_hits(store, "live in zoos") == [first, bee, again]
        assert _index_hits(store, "live in parks") == [cat]
        assert _index_hits(store, "dog") == [dog]
    assert _found(store, "live in zoos") == [first, bee, dog, again]
    assert _found(store, "FROM okapi") == [first, bee, cat, dog, again]
    for needle in ("okapis live", "in parks", "dog", "QUERY", "zoos?", "count(*)"):
        assert _found(store, needle) == _scanned(store, needle, monkeypatch), needle


def test_an_episode_without_gold_sql_is_found_by_its_question_and_outputs(store: Store) -> None:
    """An import's episode holds NULL gold SQL: its question and outputs are indexed all the
    same, and its later samples share the first one's question text."""
    batches = [
        IterationBatch(
            started=[EpisodeStart("q-gnu", n, None, "", "How many gnus graze?", "")],
            steps=[
                StepRecord(
                    question_id="q-gnu",
                    sample_index=n,
                    step_no=1,
                    prompt=(),
                    raw_output=f"<sql>SELECT {word} FROM herd</sql>",
                    action="QUERY",
                    argument="",
                    parsed=True,
                    observation="",
                    error=None,
                    reward=0.0,
                    done=True,
                )
            ],
            finished=[
                EpisodeRecord(
                    "q-gnu",
                    n,
                    "wrong",
                    0.0,
                    None,
                    None,
                    1,
                    None,
                    None,
                    failure_class="wrong_answer",
                )
            ],
        )
        for n, word in enumerate(("ibex", "yak"))
    ]
    write_run(store, spec("imported", kind="import", dataset=""), batches, status=None)
    first, second = sorted(_ids_of(store))
    assert _found(store, "gnus graze") == [first, second]
    assert _found(store, "SELECT yak") == [second]
    if store.dialect == "sqlite":
        assert _index_hits(store, "gnus graze") == [first]  # the second shares its text
        assert _index_hits(store, "ibex") == [first]
    with store._engine.connect() as conn:
        held = [tuple(r) for r in conn.execute(text("SELECT db_id, gold_sql FROM episodes"))]
    assert held == [(None, None), (None, None)]  # nothing names them: NULL


def _ids_of(store: Store) -> list[int]:
    return [e.id for e in store.list_episodes(EpisodeFilter(), limit=100).items]
