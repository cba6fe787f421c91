"""`--questions/--db-dir`: an imported episode's SQL run again in rollscope's environment.

Each imported episode is matched to a question of the file (by its id, else by its text:
the same text, normalised, or the question's text inside the prompt's), and its actions are
played through the step player (`LiveEpisode`) with the actions given, as a trainer's tool
calls are: the environment runs each SQL statement in its sandbox, read-only. What comes back
fills the observations the file lacks, gives each step's error, and grades the final answer
against the gold SQL's result: the re-grade, kept apart from the file's own score. A final
answer that is a SQL statement (SkyRL-SQL's `<solution>`) is graded by the rows it returns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from app.importers.rollouts import Checked, Rollout, final_sql
from rollout_core.actions import SQLAction
from rollout_core.datasets import Dataset, load_named_dataset
from rollout_core.environment import SQLEnvironment
from rollout_core.episode import LiveEpisode, start_record
from rollout_core.gold import GoldQueryError
from rollout_core.grading import format_answer
from rollout_core.records import Question, Regrade
from rollout_core.sandbox import run_select
from rollout_core.settings import EnvironmentSettings

_MOST_STEPS = 10_000
"""The environment's step budget here: an imported episode ends where its file says."""
_PROMPTS_KEPT = 4096


def normal(text: str) -> str:
    return " ".join(text.split()).casefold()


class Checker:
    """Matches imported episodes to a question file's questions and runs their SQL again."""

    def __init__(self, questions: str, db_dir: str | None) -> None:
        self.dataset: Dataset = load_named_dataset(questions, db_dir=db_dir)
        self.env = SQLEnvironment(
            dataset=self.dataset, settings=EnvironmentSettings(step_budget=_MOST_STEPS)
        )
        self._by_text = {normal(q.question): q for q in self.dataset.questions}
        self._by_id = {q.id: q for q in self.dataset.questions}
        # Longest first: a prompt holding "How many singers are there in France?" is that
        # question, not "How many singers are there?".
        self._texts = sorted(self._by_text.items(), key=lambda kv: -len(kv[0]))
        self._found: dict[str, Question | None] = {}
        self.unmatched = 0

    def close(self) -> None:
        self.env.close()

    def question(self, rollout: Rollout) -> Question | None:
        """The file's question this rollout played, by id or by text (the same, or inside
        the rollout's); None when none is."""
        if rollout.question_id is not None and rollout.question_id in self._by_id:
            return self._by_id[rollout.question_id]
        key = normal(rollout.question)
        if key in self._found:
            return self._found[key]
        found = self._by_text.get(key)
        if found is None:
            found = next((q for text, q in self._texts if text and text in key), None)
        if len(self._found) >= _PROMPTS_KEPT:
            self._found.clear()
        self._found[key] = found
        return found

    def check(self, question: Question, rollout: Rollout, actions: Sequence[SQLAction]) -> Checked:
        """Play the episode's actions again; what the file lacked, each step's error and the
        re-grade."""
        try:
            episode = LiveEpisode(self.env, start_record(question, 0, 0), conversation=False)
        except (GoldQueryError, OSError, KeyError) as exc:
            del exc  # the question cannot be played here: nothing checked but the verdict
            return Checked({}, {}, None, None, "error")
        observations: dict[int, str] = {}
        errors: dict[int, str | None] = {}
        answered = False
        for n, (turn, action) in enumerate(zip(rollout.turns, actions, strict=True), start=1):
            if not action.parsed or episode.done:
                continue
            played = action
            if action.action_type == "ANSWER" and final_sql(action):
                played = replace(action, argument=self._rows_of(question, action.argument))
            step = episode.play(turn.output, action=played)
            errors[n] = step.error
            if action.action_type == "ANSWER":
                answered = True
            elif turn.reply is None and step.observation is not None:
                observations[n] = step.observation
        record = episode.finish()
        regraded: Regrade | None = None
        if answered:
            regraded = "correct" if record.outcome == "correct" else "wrong"
            if record.outcome not in ("correct", "wrong"):
                regraded = "error"
        return Checked(observations, errors, record.progress, record.operational, regraded)

    def _rows_of(self, question: Question, sql: str) -> str:
        """A SQL answer as the answer its rows make (`format_answer`), run in the
        environment's sandbox; an answer that fails to run stays its text (graded wrong)."""
        with self.env.sandbox.connection(self.dataset.db_path(question.db_id)) as conn:
            result = run_select(conn, sql, self.env.limits)
        if result.error is not None:
            return sql
        return format_answer(result.rows, len(result.columns))
