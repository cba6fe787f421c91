"""Several writers into one PostgreSQL store at once, as when a trainer's machines share it: a
`rollscope import --follow` beside two processes recording with a Recorder. Each run gets
every episode once, and importing the files again adds nothing."""

from __future__ import annotations

import multiprocessing
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.app.importers.writers import sql_prompt, sql_response, verl_dump
from tests.support.plain_sql import sql_rows
from tests.support.postgres import PgServer

pytestmark = pytest.mark.postgres

ROLLSCOPE = [sys.executable, "-m", "app.cli"]
EPISODES_A_FILE = 24
RECORDED = 300

# A rank of a trainer's loop: its own run, episodes in groups of 4 over 5 steps.
RECORDING = """
import sys
from app.recorder import Recorder

url, run, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
with Recorder(url, run=run, kind="training", flush_every=32) as rec:
    for i in range(n):
        rec.episode(
            question=f"How many rows does table t{i // 4 % 15} hold?",
            turns=[
                {"role": "assistant", "content": f"<sql>SELECT count(*) FROM t{i}</sql>"},
                {"role": "user", "content": f"<observation>{i}</observation>"},
                {"role": "assistant", "content": f"<solution>{i}</solution>"},
            ],
            reward=float(i % 2),
            rewards={"format": 0.5, "correct": float(i % 2)},
            step=i // 60,
        )
"""


def recording(url: str, run: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", RECORDING, url, run, str(RECORDED)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def write_step(dump: Path, step: int) -> Path:
    n = EPISODES_A_FILE
    inputs = [sql_prompt(f"Question {i // 8} of step {step}?") for i in range(n)]
    outputs = [
        sql_response([(f"<sql>SELECT {i}</sql>", f"{i}"), (f"<solution>{i}</solution>", None)])
        for i in range(n)
    ]
    scores = [float(i % 3 == 0) for i in range(n)]
    return verl_dump(dump, step, inputs, outputs, [""] * n, scores, {"acc": scores})


def wait_for(url: str, sql: str, expected: object, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while (found := sql_rows(url, sql)[0][0]) != expected:
        assert time.monotonic() < deadline, f"{sql} gave {found}, waited for {expected}"
        time.sleep(0.2)


def test_a_follower_and_two_recorders_write_one_postgres_store_at_once(
    postgres_server: PgServer, tmp_path: Path
) -> None:
    dump = tmp_path / "rollouts"
    write_step(dump, 1)
    with postgres_server.store_database("rollscope_writers") as url:
        follower = subprocess.Popen(
            [*ROLLSCOPE, "import", str(dump), "--name", "verl-live", "--store", url,
             "--follow", "--poll", "0.1", "--quiet"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            wait_for(url, "SELECT count(*) FROM episodes", EPISODES_A_FILE)
            ranks = [recording(url, f"rank-{rank}") for rank in range(2)]
            # The trainer writes two more steps while the ranks record.
            write_step(dump, 2)
            write_step(dump, 3)
            for proc in ranks:
                _, err = proc.communicate(timeout=120)
                assert proc.returncode == 0, err
            wait_for(
                url,
                "SELECT count(*) FROM episodes e JOIN runs r ON r.id = e.run_id "
                "WHERE r.name = 'verl-live'",
                3 * EPISODES_A_FILE,
            )
            running = sql_rows(url, "SELECT status FROM runs WHERE name = 'verl-live'")
            assert running == [("running",)]
        finally:
            follower.send_signal(signal.SIGINT)
            _, err = follower.communicate(timeout=60)
        # Ctrl-C is how a follow ends: exit 130, the run completed with what it read.
        assert follower.returncode == 130, err
        assert "Traceback" not in err

        runs = sql_rows(
            url,
            "SELECT name, kind, status, source_format, finished_episodes, reward_sum "
            "FROM runs ORDER BY name",
        )
        recorded_reward = float(RECORDED // 2)
        assert runs == [
            ("rank-0", "training", "completed", "recorder", RECORDED, recorded_reward),
            ("rank-1", "training", "completed", "recorder", RECORDED, recorded_reward),
            ("verl-live", "import", "completed", "verl", 3 * EPISODES_A_FILE, 24.0),
        ]
        # Each run's episodes are whole: every episode holds its two steps (a query, an
        # answer), each rank's samples are numbered once, and a group holds one question's
        # four samples.
        per_run = sql_rows(
            url,
            "SELECT r.name, count(DISTINCT e.id), count(s.id), "
            "count(DISTINCT (e.question_id, e.sample_index)), count(DISTINCT e.group_index), "
            "count(DISTINCT e.train_step) "
            "FROM runs r JOIN episodes e ON e.run_id = r.id JOIN steps s ON s.episode_id = e.id "
            "GROUP BY r.name ORDER BY r.name",
        )
        assert per_run == [
            ("rank-0", RECORDED, 2 * RECORDED, RECORDED, RECORDED // 4, 5),
            ("rank-1", RECORDED, 2 * RECORDED, RECORDED, RECORDED // 4, 5),
            ("verl-live", 72, 144, 72, 9, 3),
        ]
        named = sql_rows(
            url,
            "SELECT r.name, w.name, count(*), sum(w.value) FROM episode_rewards w "
            "JOIN episodes e ON e.id = w.episode_id JOIN runs r ON r.id = e.run_id "
            "GROUP BY r.name, w.name ORDER BY r.name, w.name",
        )
        assert named == [
            ("rank-0", "correct", RECORDED, recorded_reward),
            ("rank-0", "format", RECORDED, RECORDED * 0.5),
            ("rank-1", "correct", RECORDED, recorded_reward),
            ("rank-1", "format", RECORDED, RECORDED * 0.5),
            ("verl-live", "acc", 72, 24.0),
            ("verl-live", "score", 72, 24.0),
        ]

        again = subprocess.run(
            [*ROLLSCOPE, "import", str(dump), "--name", "verl-live", "--store", url],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert again.returncode == 0, again.stderr
        assert "nothing new (3 files imported before)" in again.stdout + again.stderr
        assert sql_rows(url, "SELECT count(*) FROM episodes") == [(72 + 2 * RECORDED,)]


def _import_in_a_child(args: tuple[str | Path, ...], said: Path) -> int:
    """`rollscope ARGS` in a forked process (this one's patches and all), its stderr to `said`;
    its exit code. A process of its own: a run it leaves `running` is not this one's."""

    def child() -> None:
        from app import cli

        sys.stderr = said.open("w")
        sys.argv = ["rollscope", *map(str, args)]
        cli.main()

    process = multiprocessing.get_context("fork").Process(target=child)
    process.start()
    process.join(120)
    assert process.exitcode is not None, "the import did not end in 120 s"
    return process.exitcode


def test_a_server_that_drops_the_import_is_told_in_one_line_and_importing_again_reads_on(
    tmp_path: Path, postgres_server: PgServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The server ends the import's connection in its second batch and takes no new one (as in
    # a shutdown), so the run's status cannot be written either. The command says why in one
    # line and exits 1, with no partial episode; once the server takes connections again,
    # importing again reads on to every episode.
    from app.importers import importer as importer_module
    from storage.sink import StoreSink

    dump = tmp_path / "dump"
    for step in (1, 2, 3):
        write_step(dump, step)
    monkeypatch.setattr(importer_module, "BATCH_EPISODES", EPISODES_A_FILE)
    write, writes = StoreSink._write, []
    with postgres_server.database("dropped") as url:
        name = url.rsplit("/", 1)[1]

        def dropped(self: StoreSink, batch: Any) -> None:
            writes.append(batch)
            if len(writes) == 2:
                postgres_server.admin(f"ALTER DATABASE {name} ALLOW_CONNECTIONS false")
                postgres_server.admin(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    f"WHERE datname = '{name}'"
                )
            write(self, batch)

        monkeypatch.setattr(StoreSink, "_write", dropped)
        args = ("import", dump, "--name", "v", "--store", url)
        said = tmp_path / "said"
        assert _import_in_a_child(args, said) == 1, said.read_text()
        told = said.read_text()
        assert "Traceback" not in told and told.count("error:") == 1, told
        # Its pooled connection found dead, the write could not connect again.
        assert "error: the store server could not be reached (connection failed" in told, told
        postgres_server.admin(f"ALTER DATABASE {name} ALLOW_CONNECTIONS true")
        assert sql_rows(url, "SELECT count(*), count(outcome) FROM episodes") == [
            (EPISODES_A_FILE, EPISODES_A_FILE)
        ]
        assert sql_rows(url, "SELECT status FROM runs") == [("running",)]
        monkeypatch.setattr(StoreSink, "_write", write)
        assert _import_in_a_child(args, said) == 0, said.read_text()
        assert sql_rows(url, "SELECT count(*), count(outcome) FROM episodes") == [
            (3 * EPISODES_A_FILE, 3 * EPISODES_A_FILE)
        ]
        assert sql_rows(url, "SELECT status FROM runs") == [("completed",)]
