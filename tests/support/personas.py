"""The analysis store's players: a policy that plays each (run, question, sample) by one
behaviour, so groups with and without reward variance, every failure class and flips between
runs all occur, with token traces (a hostile output among them).
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence

from rollout_core.policies.base import Completion, PolicyRequest
from rollout_core.policies.scripted import OraclePolicy
from rollout_core.records import EpisodeKey, PolicyInfo, TokenTrace

HOSTILE_OUTPUT = "<script>alert('x')</script> <img src=x onerror=\"alert('y')\"> **hi**"
HOSTILE_ALTERNATIVE = "<b onmouseover=alert(1)>"
SAMPLES = 4
STEP_BUDGET = 4

# behaviour of samples 0..3, per run, per question (questions in tests.support.benchmark order)
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
