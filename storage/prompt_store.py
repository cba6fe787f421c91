"""Step prompts in and out of the store: layouts and shared texts (`storage.prompt_layout`)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple, Protocol

from sqlalchemy import insert, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from rollout_core.records import IterationBatch
from storage.models import Episode, PromptText, Step
from storage.prompt_layout import (
    Piece,
    ShapeMatcher,
    StepText,
    decode_episode,
    digest_continuing,
    encode_pieces,
    hash_state,
    join_layout,
    layout_text_ids,
    prompt_hash,
    shape_of,
)
from storage.text_clean import clean_text

if TYPE_CHECKING:
    from hashlib import _Hash as Hash


def text_ids(session: Session, texts: Collection[str]) -> dict[str, int]:
    """The ids of these texts in `prompt_texts`, inserting those not there yet."""
    if not texts:
        return {}
    by_hash = {prompt_hash(t): t for t in texts}
    found = _ids_by_hash(session, by_hash)
    absent = {h: t for h, t in by_hash.items() if t not in found}
    missing = [{"sha256": h, "text": t} for h, t in absent.items()]
    if missing:
        # Another writer (PostgreSQL, many machines) may add the same text meanwhile.
        dialect = session.get_bind().dialect.name
        if dialect == "postgresql":
            session.execute(postgresql.insert(PromptText).on_conflict_do_nothing(), missing)
        elif dialect == "sqlite":
            session.execute(sqlite.insert(PromptText).on_conflict_do_nothing(), missing)
        else:
            session.execute(insert(PromptText), missing)
        found.update(_ids_by_hash(session, absent))
    return found


def _ids_by_hash(session: Session, by_hash: dict[bytes, str]) -> dict[str, int]:
    stmt = select(PromptText.sha256, PromptText.id).where(PromptText.sha256.in_(by_hash))
    return {by_hash[bytes(h)]: i for h, i in session.execute(stmt)}


def load_texts(session: Session, ids: Iterable[int]) -> dict[int, str]:
    """`prompt_texts` rows by id."""
    wanted = set(ids)
    if not wanted:
        return {}
    rows = session.execute(select(PromptText.id, PromptText.text).where(PromptText.id.in_(wanted)))
    return {i: t for i, t in rows}


class StepRow(Protocol):
    """The columns of a step row that rebuilding its prompt reads."""

    @property
    def episode_id(self) -> int: ...
    @property
    def step_no(self) -> int: ...
    @property
    def prompt_layout(self) -> str: ...
    @property
    def raw_output(self) -> str: ...
    @property
    def observation(self) -> str: ...


def rebuild_prompts(
    session: Session, questions: Mapping[int, str], steps: Sequence[StepRow]
) -> dict[tuple[int, int], str]:
    """Exact prompts of steps, (episode id, step_no) -> prompt, in one query for their texts.

    `steps` hold whole episodes in step order; `questions` maps their episode ids to the
    question. A step whose prompt cannot be rebuilt reads as a one-line note saying why.
    """
    texts = load_texts(session, (i for s in steps for i in layout_text_ids(s.prompt_layout)))
    by_episode: dict[int, list[StepRow]] = {}
    for s in steps:
        by_episode.setdefault(s.episode_id, []).append(s)
    out: dict[tuple[int, int], str] = {}
    for episode_id, rows in by_episode.items():
        prompts, errors = decode_episode(
            [(s.step_no, s.prompt_layout) for s in rows],
            texts=texts,
            question=questions[episode_id],
            steps={s.step_no: StepText(s.raw_output, s.observation) for s in rows},
        )
        for no, prompt in prompts.items():
            out[episode_id, no] = prompt
        for no, why in errors.items():
            out[episode_id, no] = f"[prompt not rebuilt: {why}]"
    return out


class _StepLink(NamedTuple):
    """An episode's steps so far, newest first: a link per step (copying a dict of them at
    every step cost more than encoding the step)."""

    step_no: int
    step: StepText
    earlier: _StepLink | None


class _History(NamedTuple):
    """What encoding an episode's next prompt needs: its question and its steps so far."""

    question: str
    newest: _StepLink | None = None
    last_prompt: str | None = None
    last_no: int = 0
    """The newest step's number (0 before the first)."""
    hashed: Hash | None = None
    """SHA-256 state over `last_prompt[:hashed_upto]`: what the next prompt likely keeps."""
    hashed_upto: int = 0

    @property
    def steps(self) -> dict[int, StepText]:
        out: dict[int, StepText] = {}
        link = self.newest
        while link is not None:
            out.setdefault(link.step_no, link.step)
            link = link.earlier
        return out

    def then(
        self, step_no: int, prompt: str, step: StepText, hashed: Hash, hashed_upto: int
    ) -> _History:
        link = _StepLink(step_no, step, self.newest)
        return _History(self.question, link, prompt, step_no, hashed, hashed_upto)


class _Head(NamedTuple):
    """The text a first prompt had before its first reference (a system prompt, the framing
    before the question), and the SHA-256 state over it once a second prompt starts with it
    (prompts whose start changes every episode never pay for hashing it twice)."""

    text: str
    hashed: Hash | None = None


class PromptWriter:
    """Encodes the step prompts of one sink's batches against their episodes' earlier steps.

    It remembers each live episode's last prompt, and the shape the last step added to it
    (the renderer's framing around an output and an observation): a step that adds the same
    costs the text that shape adds and two comparisons (`ShapeMatcher`), any other a search.
    A first prompt that starts as the last one did (`_Head`) is searched and hashed past that
    start only: with a 20 kB system prompt, that start was most of a step's cost.
    What a batch taught it counts only once that batch's transaction has committed
    (`commit`), so a retried or failed batch starts from the same state.
    """

    def __init__(self) -> None:
        self._histories: dict[int, _History] = {}
        self._text_ids: dict[str, int] = {}
        self._staged: dict[int, _History] = {}
        self._staged_ids: dict[str, int] = {}
        self._shape: ShapeMatcher | None = None
        self._head: _Head | None = None
        """A hint, kept if its batch fails: a first prompt that does not start with it is
        searched whole."""
        self._template: str | None = None
        """The shape's layout with its texts' ids: set once those ids are committed."""
        self._template_shape: ShapeMatcher | None = None
        self._tail = 0
        """What the last prompt that kept its last one dropped of it: a hint, kept if its
        batch fails (a wrong one costs a step's digest its whole prompt, no more)."""

    def encode(
        self, session: Session, batch: IterationBatch, episode_ids: Sequence[int]
    ) -> list[tuple[str, bytes, StepText]]:
        """(prompt_layout, prompt digest, output and observation cleaned for the store) of each
        of the batch's steps, in order; `episode_ids` holds each step's episode id."""
        self._staged, self._staged_ids = {}, {}
        staged, histories, shape = self._staged, self._histories, self._shape
        template = self._batch_template(session, shape)
        started = {s.key: s.question for s in batch.started}
        # Each step's layout, or its pieces while some of their texts have no id yet.
        encoded: list[tuple[str | list[Piece], bytes, StepText]] = []
        # A shape's texts may be unknown still: learnt in a batch whose transaction failed.
        literals = set(shape.literals) if shape else set()
        for s, episode_id in zip(batch.steps, episode_ids, strict=True):
            history = staged.get(episode_id) or histories.get(episode_id)
            if history is None:
                question = started.get(s.key)
                history = (
                    _History(clean_text(question))
                    if question is not None
                    else _load_history(session, episode_id)
                )
            prompt = s.prompt
            step_no = s.step_no
            previous = history.last_prompt if history.last_no == step_no - 1 else None
            layout: str | list[Piece] | None = None
            keep = None
            if previous is not None and shape is not None and history.newest is not None:
                last = history.newest.step
                # Matched as it came: a match is the last (clean) prompt's start and the shape
                # around clean texts, so the prompt needs no cleaning, nor a scan for NUL.
                keep = shape.keep(prompt, previous=previous, question=history.question, last=last)
                if keep is not None:
                    layout = (
                        template.format(keep, step_no - 1)
                        if template
                        else shape.pieces(keep, step_no)
                    )
            head = None
            if layout is None:
                prompt = clean_text(prompt)
                if step_no == 1 and history.newest is None:
                    pieces, head = self._first_pieces(prompt, history.question)
                else:
                    pieces = encode_pieces(
                        prompt,
                        question=history.question,
                        steps=history.steps,
                        step_no=step_no,
                        previous=previous,
                    )
                # A shape learnt in a batch that then failed is harmless: its texts are
                # looked up like any other, and a shape that does not fit is not used.
                learnt = shape_of(pieces, step_no)
                if learnt is not None and (shape is None or learnt != shape.shape):
                    shape = self._shape = ShapeMatcher(learnt)
                    template = self._batch_template(session, shape)
                literals.update(p for p in pieces if isinstance(p, str))  # the shape's among them
                layout = pieces
            step = StepText(clean_text(s.raw_output), clean_text(s.observation))
            # The digest from the last prompt's hashed part when this one keeps exactly that;
            # the next prompt is expected to drop as long a tail as this one dropped (after a
            # first prompt, as long as the last step that kept one dropped).
            kept = history.hashed if keep is not None and keep == history.hashed_upto else None
            if keep is not None and previous is not None:
                tail = self._tail = len(previous) - keep
            else:
                tail = self._tail
            start, state = (keep or 0, kept) if head is None else (len(head.text), head.hashed)
            digest, hashed = digest_continuing(prompt, start, tail, state)
            encoded.append((layout, digest, step))
            staged[episode_id] = history.then(step_no, prompt, step, hashed, len(prompt) - tail)
        known = self._stage_ids(session, literals)
        return [
            (
                layout if isinstance(layout, str) else join_layout(layout, known.__getitem__),
                digest,
                step,
            )
            for layout, digest, step in encoded
        ]

    def _first_pieces(self, prompt: str, question: str) -> tuple[list[Piece], _Head | None]:
        """A first prompt's pieces; and the head it starts with, when it starts as the last
        first prompt did: searched past the head only, its digest hashed from the head's."""
        head = self._head
        if head is None or not prompt.startswith(head.text):
            pieces = encode_pieces(prompt, question=question, steps={}, step_no=1, previous=None)
            if len(pieces) > 1 and isinstance(pieces[0], str):
                self._head = _Head(pieces[0])
            return pieces, None
        if head.hashed is None:
            head = self._head = _Head(head.text, hash_state(head.text))
        # Valid whatever the rest holds: the pieces join to the prompt.
        rest = prompt[len(head.text) :]
        return [
            head.text,
            *encode_pieces(rest, question=question, steps={}, step_no=1, previous=None),
        ], head

    def _batch_template(self, session: Session, shape: ShapeMatcher | None) -> str | None:
        """The shape's layout template for this batch: its texts' ids looked up (or inserted,
        in the batch's transaction) now, so the first batch of a run needs no pieces either."""
        if shape is None:
            return None
        if (template := self._template_of(shape)) is not None:
            return template
        known = self._stage_ids(session, shape.literals)
        # Not kept past this batch: the ids count once its transaction has committed.
        return shape.template(known.__getitem__)

    def _stage_ids(self, session: Session, texts: Iterable[str]) -> dict[str, int]:
        """Ids for these texts (looked up or inserted in the batch's transaction, staged until
        it commits); returns every id known now, committed or staged."""
        unknown = set(texts) - self._text_ids.keys() - self._staged_ids.keys()
        self._staged_ids.update(text_ids(session, unknown))
        return self._text_ids | self._staged_ids

    def _template_of(self, shape: ShapeMatcher | None) -> str | None:
        """The shape's layout template, when every text it holds has a committed id."""
        if shape is None or not shape.literals <= self._text_ids.keys():
            return None
        if self._template is None or self._template_shape is not shape:
            self._template = shape.template(self._text_ids.__getitem__)
            self._template_shape = shape
        return self._template

    def commit(self, finished: Iterable[int]) -> None:
        """The last `encode`'s batch is in the store; `finished` episodes are done for good."""
        self._histories.update(self._staged)
        self._text_ids.update(self._staged_ids)
        self._staged, self._staged_ids = {}, {}
        for episode_id in finished:
            self._histories.pop(episode_id, None)


def _load_history(session: Session, episode_id: int) -> _History:
    """An episode's history from the store: a sink that did not write its earlier steps."""
    question = session.scalar(select(Episode.question).where(Episode.id == episode_id)) or ""
    rows = session.execute(
        select(Step.step_no, Step.prompt_layout, Step.raw_output, Step.observation)
        .where(Step.episode_id == episode_id)
        .order_by(Step.step_no)
    ).all()
    steps = {s.step_no: StepText(s.raw_output, s.observation) for s in rows}
    if not rows:
        return _History(question)
    prompts, _ = decode_episode(
        [(s.step_no, s.prompt_layout) for s in rows],
        texts=load_texts(session, (i for s in rows for i in layout_text_ids(s.prompt_layout))),
        question=question,
        steps=steps,
    )
    newest = None
    for no, step in steps.items():  # in step order
        newest = _StepLink(no, step, newest)
    last = rows[-1].step_no
    # A last prompt that cannot be rebuilt is no base: the next one is stored without it.
    return _History(question, newest, prompts.get(last), last)
