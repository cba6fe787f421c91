"""Steps that read true with plain SQL: whole argument and error texts, prompts as messages.

- `steps.argument` and `steps.error` hold their text again (revision 0009 kept them as spans of
  the output and observation, leaving '' in the column); the span columns go.
- Prompts: each layout (revision 0003) is rebuilt and stored as the chat messages its step
  added, the leading system messages shared (`storage.prompts`): `prompt_shared_id`,
  `prompt_from_step`, `prompt_added` replace `prompt_layout` and `prompt_sha256`. A prompt that
  was not JSON chat messages becomes one message with role `prompt`.
- The `step_prompts` view gives each step's whole prompt in SQL.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa
from alembic import op

from storage.migrations.legacy_layouts import (
    StepText,
    decode_episode,
    layout_text_ids,
    simple_pieces,
)
from storage.prompts import (
    OpenPrompt,
    Prompt,
    encode_prompt,
    messages_json,
    prompt_view_sql,
    rebuild_prompts,
)
from storage.prompts import text_hash as _hash

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | None = None
depends_on: str | None = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
# Episodes converted per round trip: a few thousand step rows in memory at a time.
_CHUNK = 500

_episodes = sa.table("episodes", sa.column("id", sa.Integer), sa.column("question", sa.Text))
_texts = sa.table(
    "prompt_texts",
    sa.column("id", sa.Integer),
    sa.column("sha256", sa.LargeBinary),
    sa.column("text", sa.Text),
)
_steps = sa.table(
    "steps",
    *(
        sa.column(c, sa.Integer)
        for c in ("id", "episode_id", "step_no", "prompt_shared_id", "prompt_from_step")
    ),
    *(sa.column(c, sa.Text) for c in ("prompt_layout", "raw_output", "observation")),
    sa.column("prompt_added", sa.Text),
)


def upgrade() -> None:
    conn = op.get_bind()
    with op.batch_alter_table("steps", schema=None) as batch_op:
        batch_op.add_column(sa.Column("prompt_shared_id", _ID, nullable=True))
        batch_op.add_column(sa.Column("prompt_from_step", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("prompt_added", sa.Text(), nullable=True))
    for name, source in (("argument", "raw_output"), ("error", "observation")):
        op.execute(
            f"UPDATE steps SET {name} = substr({source}, {name}_start + 1, "
            f"{name}_end - {name}_start) WHERE {name}_end IS NOT NULL"
        )
    _convert_prompts(conn)
    op.execute("DELETE FROM prompt_texts WHERE id NOT IN (SELECT prompt_shared_id FROM steps "
               "WHERE prompt_shared_id IS NOT NULL)")  # fmt: skip
    with op.batch_alter_table("steps", schema=None) as batch_op:
        for column in (
            "prompt_layout",
            "prompt_sha256",
            "argument_start",
            "argument_end",
            "error_start",
            "error_end",
        ):
            batch_op.drop_column(column)
        batch_op.alter_column("prompt_from_step", existing_type=sa.Integer(), nullable=False)
        batch_op.alter_column("prompt_added", existing_type=sa.Text(), nullable=False)
        batch_op.create_foreign_key(
            op.f("fk_steps_prompt_shared_id_prompt_texts"),
            "prompt_texts",
            ["prompt_shared_id"],
            ["id"],
        )
    op.execute(prompt_view_sql(conn.dialect.name))


def downgrade() -> None:
    """Back to layouts (`p<k> t<rest>`: what each prompt keeps of the previous step's and a
    text for the rest, prompts as JSON text) and whole argument and error columns."""
    op.execute("DROP VIEW step_prompts")
    with op.batch_alter_table("steps", schema=None) as batch_op:
        batch_op.add_column(sa.Column("prompt_layout", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("prompt_sha256", sa.LargeBinary(length=32), nullable=True))
        for name in ("argument", "error"):
            batch_op.add_column(sa.Column(f"{name}_start", sa.Integer(), nullable=True))
            batch_op.add_column(sa.Column(f"{name}_end", sa.Integer(), nullable=True))
    _layouts_back(op.get_bind())
    with op.batch_alter_table("steps", schema=None) as batch_op:
        batch_op.drop_constraint(op.f("fk_steps_prompt_shared_id_prompt_texts"), "foreignkey")
        for column in ("prompt_shared_id", "prompt_from_step", "prompt_added"):
            batch_op.drop_column(column)
        batch_op.alter_column("prompt_layout", existing_type=sa.Text(), nullable=False)
        batch_op.alter_column(
            "prompt_sha256", existing_type=sa.LargeBinary(length=32), nullable=False
        )


def _episode_chunks(conn: sa.Connection) -> Iterator[dict[int, str]]:
    """(episode id -> question) of every episode, _CHUNK at a time, in id order."""
    last = 0
    while True:
        rows = conn.execute(
            sa.select(_episodes.c.id, _episodes.c.question)
            .where(_episodes.c.id > last)
            .order_by(_episodes.c.id)
            .limit(_CHUNK)
        ).all()
        if not rows:
            return
        yield {i: q for i, q in rows}
        last = rows[-1][0]


def _convert_prompts(conn: sa.Connection) -> None:
    shared: dict[str, int] = {}
    for questions in _episode_chunks(conn):
        rows = conn.execute(
            sa.select(_steps)
            .where(_steps.c.episode_id.in_(questions))
            .order_by(_steps.c.episode_id, _steps.c.step_no)
        ).all()
        texts = _load_texts(conn, {i for r in rows for i in layout_text_ids(r.prompt_layout)})
        by_episode: dict[int, list[Any]] = {}
        for r in rows:
            by_episode.setdefault(r.episode_id, []).append(r)
        values = []
        for episode_id, ep_rows in by_episode.items():
            prompts = decode_episode(
                [(r.step_no, r.prompt_layout) for r in ep_rows],
                texts=texts,
                question=questions[episode_id] or "",
                steps={r.step_no: StepText(r.raw_output, r.observation) for r in ep_rows},
            )
            last: OpenPrompt | None = None
            for r in ep_rows:
                text = prompts.get(r.step_no)
                messages = _as_messages(text) if text is not None else _lost()
                stored, last = encode_prompt(
                    messages, r.step_no, last, lambda m: _shared_id(conn, m, shared)
                )
                values.append(
                    {"b_id": r.id, "b_shared": stored.shared_id, "b_from": stored.from_step,
                     "b_added": stored.added}
                )  # fmt: skip
        if values:
            conn.execute(
                _steps.update()
                .where(_steps.c.id == sa.bindparam("b_id"))
                .values(
                    prompt_shared_id=sa.bindparam("b_shared"),
                    prompt_from_step=sa.bindparam("b_from"),
                    prompt_added=sa.bindparam("b_added"),
                ),
                values,
            )
    # Steps of no episode (a store written with foreign keys off) have nothing to rebuild from.
    conn.execute(
        _steps.update()
        .where(_steps.c.prompt_added.is_(None))
        .values(prompt_from_step=_steps.c.step_no, prompt_added="[]")
    )


def _layouts_back(conn: sa.Connection) -> None:
    steps = sa.table(
        "steps",
        *(sa.column(c, sa.Integer) for c in ("id", "episode_id", "step_no", "prompt_shared_id",
                                             "prompt_from_step")),
        sa.column("prompt_added", sa.Text),
        sa.column("prompt_layout", sa.Text),
        sa.column("prompt_sha256", sa.LargeBinary),
    )  # fmt: skip
    known: dict[str, int] = {}
    for questions in _episode_chunks(conn):
        rows = conn.execute(
            sa.select(steps)
            .where(steps.c.episode_id.in_(questions))
            .order_by(steps.c.episode_id, steps.c.step_no)
        ).all()
        prompts = rebuild_prompts(conn, rows)
        values = []
        previous: tuple[int, int, str] | None = None
        for r in rows:
            prompt = json.dumps([dict(m) for m in prompts[r.episode_id, r.step_no]],
                                ensure_ascii=False)  # fmt: skip
            base = (
                previous[2] if previous and previous[:2] == (r.episode_id, r.step_no - 1) else None
            )
            keep, rest = simple_pieces(prompt, base)
            rest_id = _text_id(conn, rest, known)
            layout = f"p{keep} t{rest_id}" if keep else f"t{rest_id}"
            values.append({"b_id": r.id, "b_layout": layout, "b_hash": _hash(prompt)})
            previous = (r.episode_id, r.step_no, prompt)
        if values:
            conn.execute(
                steps.update()
                .where(steps.c.id == sa.bindparam("b_id"))
                .values(
                    prompt_layout=sa.bindparam("b_layout"), prompt_sha256=sa.bindparam("b_hash")
                ),
                values,
            )
    conn.execute(steps.update().where(steps.c.prompt_layout.is_(None)).values(
        prompt_layout="", prompt_sha256=_hash("")))  # fmt: skip


def _as_messages(prompt: str) -> Prompt:
    """A stored prompt's chat messages; a prompt that is not JSON messages is one message."""
    try:
        value = json.loads(prompt)
    except ValueError:
        value = None
    if isinstance(value, list) and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) for m in value
    ):
        return tuple(value)
    return ({"role": "prompt", "content": prompt},)


def _lost() -> Prompt:
    return ({"role": "rollscope", "content": "[prompt not rebuilt: its stored layout is damaged]"},)


def _load_texts(conn: sa.Connection, ids: set[int]) -> dict[int, str]:
    found: dict[int, str] = {}
    wanted = sorted(ids)
    for start in range(0, len(wanted), 500):
        part = wanted[start : start + 500]
        rows = conn.execute(sa.select(_texts.c.id, _texts.c.text).where(_texts.c.id.in_(part)))
        found.update((i, t) for i, t in rows)
    return found


def _shared_id(conn: sa.Connection, messages: Prompt, known: dict[str, int]) -> int:
    return _text_id(conn, messages_json(messages), known)


def _text_id(conn: sa.Connection, text: str, known: dict[str, int]) -> int:
    """The `prompt_texts` id of a text, inserting it when it is not there."""
    if text not in known:
        digest = _hash(text)
        found = conn.scalar(sa.select(_texts.c.id).where(_texts.c.sha256 == digest))
        if found is None:
            conn.execute(sa.insert(_texts).values(sha256=digest, text=text))
            found = conn.scalar(sa.select(_texts.c.id).where(_texts.c.sha256 == digest))
        assert found is not None  # inserted just now
        known[text] = int(found)
    return known[text]
