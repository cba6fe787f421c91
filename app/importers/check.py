"""`--questions/--db-dir`: an imported episode's SQL run again in rollscope's environment.

Each imported episode is matched to a question of the file (by its id, else by its text:
the same text, normalised, or the question's text inside the prompt's; on the episode's own
database where its file names one), and its actions are played through the step player
(`LiveEpisode`) with the actions given, as a trainer's tool calls are: the environment runs
each SQL statement in its sandbox, read-only. What comes back fills the observations the file
lacks, gives each step's error, and grades the final answer against the gold SQL's result: the
re-grade, kept apart from the file's own score. A final answer that is a SQL statement
(SkyRL-SQL's `<solution>`) is graded by the rows it returns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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

    def __init__(
        self,
        questions: str,
        db_dir: str | None,
        *,
        on_note: Callable[[str], None] = lambda _: None,
    ) -> None:
        self.dataset: Dataset = load_named_dataset(questions, db_dir=db_dir)
        self.env = SQLEnvironment(
            dataset=self.dataset, settings=EnvironmentSettings(step_budget=_MOST_STEPS)
        )
        self.on_note = on_note
        """Told once a text of a question the file asks on several databases, which an
        episode naming no database leaves unmatched."""
        # A text can be asked on several databases (Spider's and BIRD's training sets repeat
        # some): each is kept, so that an episode is matched on its own database.
        self._by_text: dict[str, list[Question]] = {}
        for q in self.dataset.questions:
            self._by_text.setdefault(normal(q.question), []).append(q)
        self._by_id = {q.id: q for q in self.dataset.questions}
        # Longest first: a prompt holding "How many singers are there in France?" is that
        # question, not "How many singers are there?".
        self._texts = sorted(self._by_text.items(), key=lambda kv: -len(kv[0]))
        self._found: dict[tuple[str, str], Question | None] = {}
        self._told: set[str] = set()
        self.unmatched = 0

    def close(self) -> None:
        self.env.close()

    def question(self, rollout: Rollout) -> Question | None:
        """The file's question this rollout played, by id or by text (the same, or inside
        the rollout's), on the rollout's database where it names one; None when none is, or
        when the text is asked on several databases and the rollout names none."""
        db_id = rollout.db_id
        by_id = self._by_id.get(rollout.question_id) if rollout.question_id is not None else None
        if by_id is not None and db_id in ("", by_id.db_id):
            return by_id
        key = (db_id, normal(rollout.question))
        if key in self._found:
            return self._found[key]
        found = self._one(self._asked(key[1], db_id))
        if len(self._found) >= _PROMPTS_KEPT:
            self._found.clear()
        self._found[key] = found
        return found

    def _asked(self, text: str, db_id: str) -> list[Question]:
        """The questions of the rollout's text: the same text, else the longest inside it;
        only those on its database, where it names one."""
        same = _on(self._by_text.get(text, []), db_id)
        if same:
            return same
        return next((on for t, qs in self._texts if t and t in text and (on := _on(qs, db_id))), [])

    def _one(self, questions: list[Question]) -> Question | None:
        """The question of those a text matched, unless they are on several databases (a
        rollout naming none): a guess would re-grade it on another database."""
        databases = sorted({q.db_id for q in questions})
        if len(databases) <= 1:
            return questions[-1] if questions else None
        text = questions[0].question
        if text not in self._told:
            self._told.add(text)
            self.on_note(
                f"{text[:80]!r} is asked on {len(databases)} databases of --questions "
                f"({', '.join(databases)}), and the episodes asking it name none: left "
                "unmatched, not re-graded"
            )
        return None

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


def _on(questions: list[Question], db_id: str) -> list[Question]:
    """Those on the database, or all of them for no database."""
    return [q for q in questions if q.db_id == db_id] if db_id else questions
