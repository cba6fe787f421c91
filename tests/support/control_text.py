"""A store of one episode whose text holds terminal control characters and a long output
with token confidence, for Replay's checks of untrusted text (tests/app/dashboard/replay,
tests/browser)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from rollout_core.records import IterationBatch, TokenTrace
from storage.read_models import EpisodeFilter
from storage.store import Store
from tests.support import records
from tests.support.stores import write_run

ESC_SQL = "SELECT name FROM singer -- \x1b[31mred\x1b[0m\x07"
"""A query with ANSI colour codes and a bell, as a model trained on terminal logs writes."""
LONG_OUTPUT = "\n".join(
    [f"<think>step {i}: the singer table may hold what is asked\x7f</think>" for i in range(60)]
    + [f"QUERY: {ESC_SQL}"]
)
"""61 lines: taller than Replay's box (`render.BOX_PX`), with DEL on each and ESC at the end."""
ERROR = 'near "\x1b": syntax error'
PROMPT_TEXT = "Question \x1b[1mq-ctl\x1b[0m: which singers?"


@dataclass(frozen=True)
class ControlStore:
    url: str
    episode: int


def _trace(text: str) -> TokenTrace:
    """Word-and-space pieces of `text` (they concatenate to it), shaded in a repeating ramp."""
    pieces = tuple(re.findall(r"\s+|[^\s]+", text))
    return TokenTrace(
        text=pieces,
        logprobs=tuple(-0.1 * (i % 12) for i in range(len(pieces))),
        entropies=tuple(0.2 * (i % 12) for i in range(len(pieces))),
    )


def build_control_store(root: Path) -> ControlStore:
    """One run of one episode: a QUERY step whose output, argument, error and prompt carry ESC,
    BEL and DEL, then an ANSWER."""
    url = str(root / "control.db")
    store = Store(url)
    query = records.step(
        "q-ctl",
        0,
        1,
        raw=LONG_OUTPUT,
        argument=ESC_SQL,
        error=ERROR,
        observation=f"Error: {ERROR}",
        prompt=({"role": "user", "content": PROMPT_TEXT},),
        tokens=_trace(LONG_OUTPUT),
    )
    answer = records.step("q-ctl", 0, 2, action="ANSWER", done=True)
    batch = IterationBatch(
        started=[records.start("q-ctl", 0, text="Which singers?")],
        steps=[query, answer],
        finished=[records.finish("q-ctl", 0, "wrong", 0.0, 2)],
    )
    run_id = write_run(store, records.spec("control-characters"), [batch])
    episode = store.list_episodes(EpisodeFilter(run_ids=(run_id,))).items[0].id
    store.close()
    return ControlStore(url, episode)
