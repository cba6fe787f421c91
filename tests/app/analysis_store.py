"""A real store for the analysis views: three checkpoints, four samples per question, played
by the real runner and environment, with token traces (a hostile output among them).

Each (run, question, sample) follows one behaviour, so groups with and without reward
variance, every failure class and flips between the runs all occur.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rollout_core.datasets import load_dataset
from rollout_core.policies.base import Completion, PolicyRequest
from rollout_core.policies.scripted import OraclePolicy
from rollout_core.records import EpisodeKey, PolicyInfo, RunSpec, TokenTrace
from rollout_core.runner import plan_episodes, run_episodes
from rollout_core.settings import EnvironmentSettings
from storage.read_models import EpisodeFilter
from storage.store import Store
from tests.fixtures import make_benchmark

HOSTILE_OUTPUT = "<script>alert('x')</script> <img src=x onerror=\"alert('y')\"> **hi**"
HOSTILE_ALTERNATIVE = "<b onmouseover=alert(1)>"
SAMPLES = 4
STEP_BUDGET = 4

# behaviour of samples 0..3, per run, per question (questions in tests.fixtures order)
_PLAN: dict[str, dict[str, tuple[str, str, str, str]]] = {
    "ckpt-100": {
        "q-count": ("solve", "solve", "solve", "solve"),  # no signal: all right
        "q-france": ("solve", "seen_wrong", "loop", "hostile"),
        "q-oldest": ("loop", "loop", "loop", "loop"),  # no signal: all wrong
        "q-avg": ("solve", "solve", "sql_errors", "seen_wrong"),
        "q-join": ("seen_wrong", "seen_wrong", "solve", "wander"),
        "q-empty": ("solve", "hostile", "solve", "wrong"),
    },
    "ckpt-200": {
        "q-count": ("sql_errors", "sql_errors", "solve", "loop"),  # lost: 4/4 -> 1/4
        "q-france": ("solve", "solve", "solve", "hostile"),
        "q-oldest": ("solve", "solve", "solve", "loop"),  # gained: 0/4 -> 3/4
        "q-avg": ("solve", "solve", "solve", "solve"),
        "q-join": ("seen_wrong", "solve", "solve", "wander"),
        "q-empty": ("solve", "solve", "wrong", "solve"),
    },
    "ckpt-300": {
        "q-count": ("solve", "solve", "solve", "solve"),  # gained back
        "q-france": ("solve", "solve", "solve", "solve"),
        "q-oldest": ("solve", "wrong", "wrong", "wrong"),  # lost again: 3/4 -> 1/4
        "q-avg": ("solve", "solve", "solve", "solve"),
        "q-join": ("solve", "solve", "solve", "solve"),
        "q-empty": ("solve", "solve", "solve", "solve"),
    },
}
RUN_NAMES = tuple(_PLAN)
_PIECE = re.compile(r"\s*\S+|\s+")


@dataclass(frozen=True)
class AnalysisStore:
    """Where the store lives and the ids the tests navigate to."""

    url: str
    runs: dict[str, int]
    hostile_episode: int
    """ckpt-100, q-france, sample 3: every output is HOSTILE_OUTPUT, with tokens."""
    solved_episode: int
    """ckpt-100, q-count, sample 0: DESCRIBE, QUERY, ANSWER, with tokens."""
    db_dir: Path


def trace_of(text: str, salt: str) -> TokenTrace:
    """Word pieces of `text` with log-probs and entropies that vary by piece; the first token
    records alternatives, a hostile one among them."""
    pieces = tuple(_PIECE.findall(text))
    logprobs, entropies = [], []
    for i, piece in enumerate(pieces):
        h = zlib.crc32(f"{salt}:{i}:{piece}".encode())
        logprobs.append(-((h % 1000) / 1000.0) * 3.0)  # p from 1 down to ~0.05
        entropies.append((h >> 10) % 300 / 100.0)
    top = tuple(
        (((piece.strip() or "_"), logprobs[0]), (HOSTILE_ALTERNATIVE, -2.5)) if i == 0 else ()
        for i, piece in enumerate(pieces)
    )
    return TokenTrace(text=pieces, logprobs=tuple(logprobs), entropies=tuple(entropies), top=top)


class Persona:
    """Plays each episode by the behaviour the plan gives its question and sample."""

    name = "persona"
    tokenizer = None

    def __init__(self, run: str) -> None:
        self.run = run
        self.oracle = OraclePolicy()

    def describe(self) -> PolicyInfo:
        return PolicyInfo(name=self.name)

    def release(self, episodes: Sequence[EpisodeKey]) -> None:
        pass

    def generate(self, requests: Sequence[PolicyRequest]) -> list[Completion]:
        out = []
        for r in requests:
            assert r.episode is not None
            behaviour = _PLAN[self.run][r.question.id][r.episode.sample_index]
            text = self._act(behaviour, r)
            salt = f"{self.run}:{r.episode}:{r.step_no}"
            out.append(
                Completion(text=text, tokens_out=len(text.split()), tokens=trace_of(text, salt))
            )
        return out

    def _act(self, behaviour: str, r: PolicyRequest) -> str:
        step = r.step_no
        gold = " ".join(r.question.gold_sql.split())
        if behaviour == "solve":
            return self.oracle.generate([r])[0].text
        if behaviour == "seen_wrong":
            return f"QUERY {gold}" if step == 1 else "ANSWER: not sure"
        if behaviour == "wrong":
            return "ANSWER: 12345"
        if behaviour == "loop":
            return "DESCRIBE singer"
        if behaviour == "hostile":
            return HOSTILE_OUTPUT
        if behaviour == "sql_errors":
            return f"QUERY SELECT nme{step} FROM singer"
        # wander: different valid actions, no answer
        return ("DESCRIBE singer", "SAMPLE singer", "DESCRIBE concert", "SAMPLE concert")[
            (step - 1) % 4
        ]


def build_analysis_store(root: Path) -> AnalysisStore:
    """Three completed runs of SAMPLES samples on the fixture benchmark."""
    questions, db_dir = make_benchmark(root / "bench")
    dataset = load_dataset(questions, db_dir)
    url = str(root / "analysis.db")
    store = Store(url)
    runs: dict[str, int] = {}
    for name in RUN_NAMES:
        spec = RunSpec(
            name=name,
            policy=f"hf:/models/{name}",
            dataset="concerts",
            questions_path=str(questions),
            db_dir=str(db_dir),
            checkpoint=f"/models/{name}",
            samples=SAMPLES,
            environment=EnvironmentSettings(step_budget=STEP_BUDGET),
        )
        tasks = plan_episodes(dataset.questions, SAMPLES, 0)
        run_id = store.create_run(spec, episodes_planned=len(tasks))
        run_episodes(
            dataset, tasks, Persona(name), store.sink(run_id), batch_size=8, step_budget=STEP_BUDGET
        )
        store.set_run_status(run_id, "completed")
        runs[name] = run_id

    def episode(run: str, qid: str, sample: int) -> int:
        page = store.list_episodes(EpisodeFilter(run_ids=(runs[run],), question_id=qid))
        return next(e.id for e in page.items if e.sample_index == sample)

    fixture = AnalysisStore(
        url=url,
        runs=runs,
        hostile_episode=episode("ckpt-100", "q-france", 3),
        solved_episode=episode("ckpt-100", "q-count", 0),
        db_dir=db_dir,
    )
    store.close()
    return fixture
