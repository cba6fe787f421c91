"""Step prompts in the store: each step keeps the messages its turn added, plus shared texts.

A step's prompt is the list of chat messages the model received. Stored whole, every step would
repeat the whole conversation so far (and a long system prompt); so a step row keeps:

- `prompt_added`: a JSON array of the messages this step's prompt adds to the previous step's
  (for a runner episode: the assistant's last output and the user's observation);
- `prompt_from_step`: the first step of the episode whose `prompt_added` this prompt includes
  (1 for a conversation that only ever grew; the step itself when its prompt did not begin
  with the previous one);
- `prompt_shared_id`: the `prompt_texts` row holding the leading system messages as a JSON
  array, stored once for the whole store (NULL when the prompt has none).

So step k's prompt is: the shared messages, then the `prompt_added` messages of steps
`prompt_from_step` .. k, in step order. The `step_prompts` view (`prompt_view_sql`) builds
exactly that in SQL, for people reading the store with sqlite3, pandas or psql.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping, Sequence
from typing import NamedTuple, Protocol

import orjson
from sqlalchemy import Connection, insert, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from rollout_core.records import ChatMessage, StepRecord
from storage.models import PromptText, Step
from storage.text_clean import clean_text

Prompt = tuple[ChatMessage, ...]


class StoredPrompt(NamedTuple):
    """A step's prompt columns, as written."""

    shared_id: int | None
    from_step: int
    added: str


class OpenPrompt(NamedTuple):
    """What encoding an episode's next prompt needs: its last prompt and where it began."""

    last_step: int
    prompt: Prompt
    shared_id: int | None
    from_step: int


_JSON = json.JSONEncoder(ensure_ascii=False)
"""Built once: `json.dumps` with any option builds a new encoder at every call."""


MAX_NESTING = 100
"""The deepest lists and objects a stored message may hold. Deeper, orjson refuses to write
them (past 254 levels) and Python's json runs out of stack (about 1,000), so they are refused
where messages come in (`nested_deeper_than`)."""


def nested_deeper_than(value: object, limit: int = MAX_NESTING) -> bool:
    """Whether lists and objects nest more than `limit` levels deep in `value` (a walk with a
    stack of its own: a recursive one would fail on what it looks for)."""
    todo = [(value, 1)]
    while todo:
        item, level = todo.pop()
        if isinstance(item, Mapping):
            children: Iterable[object] = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if level > limit:
            return True
        todo.extend((child, level + 1) for child in children)
    return False


def messages_json(messages: Sequence[ChatMessage]) -> str:
    """Messages as the store keeps them: a JSON array, non-ASCII text as it is, and a NaN or
    infinite number as null (JSON has none)."""
    plain = [m if isinstance(m, dict) else dict(m) for m in messages]
    try:
        # orjson writes them several times faster (docs/benchmarks.md); json takes what it
        # refuses: a lone surrogate, a whole number past 64 bits, a type it does not know.
        return orjson.dumps(plain).decode()
    except TypeError:
        return clean_text(_JSON.encode(plain))  # a lone surrogate is written as it is


def _leading_system(prompt: Prompt) -> int:
    """How many of the prompt's first messages are system messages (shared between episodes)."""
    n = 0
    while n < len(prompt) and prompt[n].get("role") == "system":
        n += 1
    return n


def encode_prompt(
    prompt: Prompt, step_no: int, last: OpenPrompt | None, shared_id: Callable[[Prompt], int]
) -> tuple[StoredPrompt, OpenPrompt]:
    """A step's prompt columns, given its episode's last prompt (None: not known), and what
    the next step of the episode is encoded against. `shared_id` stores leading system
    messages once and gives their `prompt_texts` id."""
    if (
        last is not None
        and last.last_step == step_no - 1
        and prompt[: len(last.prompt)] == last.prompt
    ):
        shared, from_step, added = last.shared_id, last.from_step, prompt[len(last.prompt) :]
    else:
        lead = _leading_system(prompt)
        shared = shared_id(prompt[:lead]) if lead else None
        from_step, added = step_no, prompt[lead:]
    stored = StoredPrompt(shared, from_step, messages_json(added))
    return stored, OpenPrompt(step_no, prompt, shared, from_step)


class PromptEncoder:
    """Encodes one sink's step prompts against each live episode's last prompt.

    What a batch teaches it counts once that batch's transaction has committed (`commit`), so
    a retried or failed batch starts from the same state.
    """

    def __init__(self) -> None:
        self._open: dict[int, OpenPrompt] = {}
        self._staged: dict[int, OpenPrompt] = {}
        self._shared_ids: dict[Hashable, int] = {}
        self._staged_ids: dict[Hashable, int] = {}

    def encode(
        self, session: Session, steps: Sequence[StepRecord], episode_ids: Sequence[int]
    ) -> list[StoredPrompt]:
        """Each step's prompt columns, in order (`episode_ids`: each step's episode)."""
        self._staged, self._staged_ids = {}, {}
        out: list[StoredPrompt] = []
        for s, episode_id in zip(steps, episode_ids, strict=True):
            if isinstance(s.prompt, str):
                raise TypeError(
                    f"step {s.step_no} of {s.key}: its prompt is a str; give the chat messages "
                    "(a sequence of {'role': ..., 'content': ...} dicts)"
                )
            last = self._staged.get(episode_id) or self._open.get(episode_id)
            if last is None and s.step_no > 1:
                last = _load_open(session, episode_id, s.step_no - 1)
            stored, self._staged[episode_id] = encode_prompt(
                tuple(s.prompt), s.step_no, last, lambda shared: self._shared_id(session, shared)
            )
            out.append(stored)
        return out

    def _shared_id(self, session: Session, messages: Prompt) -> int:
        # Known texts are found by their messages' items, without encoding them again (a
        # system prompt with tool descriptions runs to tens of kB, once per episode).
        try:
            key: Hashable = tuple(tuple(m.items()) for m in messages)
            hash(key)
        except TypeError:  # a value that is a list or a dict: found by its JSON instead
            key = messages_json(messages)
        found = self._shared_ids.get(key) or self._staged_ids.get(key)
        if found is None:
            text = messages_json(messages)
            found = self._staged_ids[key] = text_ids(session, [text])[text]
        return found

    def commit(self, finished: Iterable[int]) -> None:
        """The last `encode`'s batch is in the store; `finished` episodes are done for good."""
        self._open.update(self._staged)
        self._shared_ids.update(self._staged_ids)
        self._staged, self._staged_ids = {}, {}
        for episode_id in finished:
            self._open.pop(episode_id, None)


def text_ids(session: Session, texts: Collection[str]) -> dict[str, int]:
    """The ids of these texts in `prompt_texts`, inserting those not there yet."""
    if not texts:
        return {}
    by_hash = {text_hash(t): t for t in texts}
    found = _ids_by_hash(session, by_hash)
    absent = {h: t for h, t in by_hash.items() if t not in found}
    missing = [{"sha256": h, "text": t} for h, t in absent.items()]
    if missing:
        # Another writer (PostgreSQL, many machines) may add the same text meanwhile.
        dialect = session.get_bind().dialect.name
        if dialect in ("postgresql", "sqlite"):
            module = postgresql if dialect == "postgresql" else sqlite
            session.execute(module.insert(PromptText).on_conflict_do_nothing(), missing)
        else:
            session.execute(insert(PromptText), missing)
        found.update(_ids_by_hash(session, absent))
    return found


def text_hash(text: str) -> bytes:
    """SHA-256 of a text's UTF-8 bytes: how `prompt_texts` finds a text it holds already."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


def _ids_by_hash(session: Session, by_hash: Mapping[bytes, str]) -> dict[str, int]:
    stmt = select(PromptText.sha256, PromptText.id).where(PromptText.sha256.in_(list(by_hash)))
    return {by_hash[bytes(h)]: i for h, i in session.execute(stmt)}


class PromptRow(Protocol):
    """The columns of a step row that rebuilding its prompt reads."""

    @property
    def episode_id(self) -> int: ...
    @property
    def step_no(self) -> int: ...
    @property
    def prompt_shared_id(self) -> int | None: ...
    @property
    def prompt_from_step(self) -> int: ...
    @property
    def prompt_added(self) -> str: ...


def rebuild_prompts(
    session: Session | Connection, steps: Sequence[PromptRow]
) -> dict[tuple[int, int], Prompt]:
    """(episode id, step_no) -> the prompt's messages, for steps holding whole episodes (or
    each episode's steps from every `prompt_from_step` they name). A step whose prompt cannot
    be rebuilt gets one message saying why, with role `rollscope`."""
    shared_ids = {s.prompt_shared_id for s in steps if s.prompt_shared_id is not None}
    shared = {i: _messages(t) for i, t in _load_texts(session, shared_ids).items()}
    added = {(s.episode_id, s.step_no): _messages(s.prompt_added) for s in steps}
    out: dict[tuple[int, int], Prompt] = {}
    for s in steps:
        head: Prompt = ()
        if s.prompt_shared_id is not None:
            head = shared.get(s.prompt_shared_id) or _note(f"shared text {s.prompt_shared_id}")
        parts = [added.get((s.episode_id, no)) for no in range(s.prompt_from_step, s.step_no + 1)]
        if any(p is None for p in parts):
            out[s.episode_id, s.step_no] = _note(f"step {s.prompt_from_step}'s messages")
            continue
        out[s.episode_id, s.step_no] = head + tuple(m for p in parts if p for m in p)
    return out


def _note(missing: str) -> Prompt:
    return ({"role": "rollscope", "content": f"[prompt not rebuilt: {missing} is missing]"},)


def _messages(text: str) -> Prompt:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):  # nested deeper than Python's stack
        return _note("valid JSON")
    if not isinstance(value, list) or not all(isinstance(m, dict) for m in value):
        return _note("a JSON array of messages")
    return tuple(value)


def _load_texts(session: Session | Connection, ids: Collection[int]) -> dict[int, str]:
    if not ids:
        return {}
    rows = session.execute(select(PromptText.id, PromptText.text).where(PromptText.id.in_(ids)))
    return {i: t for i, t in rows}


def _load_open(session: Session, episode_id: int, step_no: int) -> OpenPrompt | None:
    """An episode's last prompt from the store: a sink that did not write its earlier steps."""
    rows = session.execute(
        select(
            Step.episode_id,
            Step.step_no,
            Step.prompt_shared_id,
            Step.prompt_from_step,
            Step.prompt_added,
        )
        .where(Step.episode_id == episode_id, Step.step_no <= step_no)
        .order_by(Step.step_no)
    ).all()
    if not rows or rows[-1].step_no != step_no:
        return None
    last = rows[-1]
    prompt = rebuild_prompts(session, rows).get((episode_id, step_no))
    if prompt is None:
        return None
    return OpenPrompt(step_no, prompt, last.prompt_shared_id, last.prompt_from_step)


def prompt_view_sql(dialect: str) -> str:
    """`CREATE VIEW step_prompts`: each step's prompt as a JSON array, built in SQL as the
    module docstring says. Ask it for one episode (`WHERE episode_id = ...`): each row reads
    that episode's steps through their index."""
    if dialect == "postgresql":
        shared = "p.text::json"
        elements = "json_array_elements(parts.messages) WITH ORDINALITY AS m(value, n)"
        agg = "coalesce(json_agg(m.value ORDER BY parts.k, parts.part, m.n), '[]'::json)::text"
        added = "a.prompt_added::json"
    else:
        shared = "p.text"
        elements = "json_each(parts.messages) AS m"
        agg = "json_group_array(json(m.value))"
        added = "a.prompt_added"
    # SQLite aggregates in the order it visits rows: the parts in step order, each array's
    # elements in order.
    order = "" if dialect == "postgresql" else " ORDER BY k, part"
    return f"""CREATE VIEW step_prompts AS
SELECT s.id AS step_id, s.episode_id, s.step_no,
  (SELECT {agg} FROM (
      SELECT 0 AS k, 0 AS part, {shared} AS messages FROM prompt_texts p
        WHERE p.id = s.prompt_shared_id
      UNION ALL
      SELECT a.step_no, 1, {added} FROM steps a
        WHERE a.episode_id = s.episode_id
          AND a.step_no BETWEEN s.prompt_from_step AND s.step_no{order}
    ) AS parts, {elements}) AS prompt
FROM steps s"""
