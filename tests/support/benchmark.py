"""A small real benchmark in the Spider layout (`questions.json` and a real SQLite database),
for tests that play episodes and for the stores built on it."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

SCHEMA = """
CREATE TABLE singer (
    singer_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    country TEXT NOT NULL,
    age INTEGER NOT NULL
);
CREATE TABLE concert (
    concert_id INTEGER PRIMARY KEY,
    singer_id INTEGER NOT NULL REFERENCES singer(singer_id),
    venue TEXT NOT NULL,
    year INTEGER NOT NULL,
    tickets REAL NOT NULL
);
INSERT INTO singer VALUES
    (1, 'Ada', 'France', 31), (2, 'Bo', 'Canada', 45), (3, 'Cy', 'France', 27),
    (4, 'Di', 'Japan', 52), (5, 'Ed', 'Canada', 38);
INSERT INTO concert VALUES
    (1, 1, 'Arena', 2019, 1200.5), (2, 1, 'Hall', 2020, 800), (3, 2, 'Arena', 2020, 1500),
    (4, 3, 'Club', 2021, 300.25), (5, 4, 'Hall', 2019, 950), (6, 5, 'Arena', 2021, 1100);
"""

QUESTIONS = [
    ("q-count", "How many singers are there?", "SELECT COUNT(*) FROM singer"),
    (
        "q-france",
        "What are the names of the singers from France?",
        "SELECT name FROM singer WHERE country = 'France'",
    ),
    (
        "q-oldest",
        "Name and age of the two oldest singers, oldest first.",
        "SELECT name, age FROM singer ORDER BY age DESC LIMIT 2",
    ),
    (
        "q-avg",
        "Average tickets sold per concert in 2020?",
        "SELECT AVG(tickets) FROM concert WHERE year = 2020",
    ),
    (
        "q-join",
        "Which singers played at the Arena?",
        "SELECT DISTINCT s.name FROM singer s JOIN concert c ON s.singer_id = c.singer_id"
        " WHERE c.venue = 'Arena'",
    ),
    ("q-empty", "Which singers are from Peru?", "SELECT name FROM singer WHERE country = 'Peru'"),
]


def make_benchmark(root: Path) -> tuple[Path, Path]:
    """Write `questions.json` and `database/concerts/concerts.sqlite` under root."""
    db_dir = root / "database"
    (db_dir / "concerts").mkdir(parents=True, exist_ok=True)
    db = db_dir / "concerts" / "concerts.sqlite"
    if not db.exists():
        conn = sqlite3.connect(db)
        conn.executescript(SCHEMA)
        conn.commit()
        conn.close()
    questions = root / "questions.json"
    questions.write_text(
        json.dumps(
            [{"id": i, "db_id": "concerts", "question": q, "query": s} for i, q, s in QUESTIONS],
            indent=1,
        )
    )
    return questions, db_dir


def held_out(questions: Path, ids: list[str], to: Path) -> Path:
    """A questions file `to` of the benchmark's questions `ids` alone (an evaluation set
    over the same databases)."""
    to.write_text(json.dumps([q for q in json.loads(questions.read_text()) if q["id"] in ids]))
    return to
