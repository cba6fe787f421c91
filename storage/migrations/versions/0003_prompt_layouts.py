"""Step prompts as layouts over shared texts, with a hash of each exact prompt.

- prompt_texts: text stored once for the whole store (system prompts, message framing);
- steps.prompt_layout and steps.prompt_sha256 replace steps.prompt: every old prompt is
  stored as what it keeps of the previous step's prompt and a text for the rest
  (`storage.migrations.legacy_layouts`), and hashed; then the column goes. Revision 0011
  turns layouts into the messages each step added.

Revision ID: 0003
Revises: 0002
Create Date: 2027-01-15
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

from storage.migrations.legacy_layouts import (
    StepText,
    decode_episode,
    layout_text_ids,
    prompt_hash,
    simple_pieces,
)

revision: str = "0003"
down_revision: str | None = "0002"
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


def _steps(*extra: str) -> sa.TableClause:
    columns = ("id", "episode_id", "step_no", "raw_output", "observation", *extra)
    types: dict[str, Any] = {
        "id": sa.Integer, "episode_id": sa.Integer, "step_no": sa.Integer,
        "prompt_sha256": sa.LargeBinary,
    }  # fmt: skip
    return sa.table("steps", *(sa.column(c, types.get(c, sa.Text)) for c in columns))


def upgrade() -> None:
    op.create_table(
        "prompt_texts",
        sa.Column("id", _ID, nullable=False),
        sa.Column("sha256", sa.LargeBinary(length=32), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_prompt_texts")),
        sa.UniqueConstraint("sha256", name=op.f("uq_prompt_texts_sha256")),
    )
    with op.batch_alter_table("steps", schema=None) as batch_op:
        batch_op.add_column(sa.Column("prompt_layout", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("prompt_sha256", sa.LargeBinary(length=32), nullable=True))
    _encode_prompts(op.get_bind())
    with op.batch_alter_table("steps", schema=None) as batch_op:
        batch_op.drop_column("prompt")
        batch_op.alter_column("prompt_layout", existing_type=sa.Text(), nullable=False)
        batch_op.alter_column(
            "prompt_sha256", existing_type=sa.LargeBinary(length=32), nullable=False
        )


def downgrade() -> None:
    with op.batch_alter_table("steps", schema=None) as batch_op:
        batch_op.add_column(sa.Column("prompt", sa.Text(), nullable=True))
    _decode_prompts(op.get_bind())
    with op.batch_alter_table("steps", schema=None) as batch_op:
        batch_op.drop_column("prompt_sha256")
        batch_op.drop_column("prompt_layout")
        batch_op.alter_column("prompt", existing_type=sa.Text(), nullable=False)
    op.drop_table("prompt_texts")


def _episode_chunks(conn: sa.Connection) -> Any:
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


def _encode_prompts(conn: sa.Connection) -> None:
    steps = _steps("prompt", "prompt_layout", "prompt_sha256")
    ids: dict[str, int] = {}
    for questions in _episode_chunks(conn):
        rows = conn.execute(
            sa.select(steps)
            .where(steps.c.episode_id.in_(questions))
            .order_by(steps.c.episode_id, steps.c.step_no)
        ).all()
        _write_layouts(conn, steps, rows, questions, ids)
    # Steps of no episode (a store written with foreign keys off): their prompts as texts.
    orphans = conn.execute(sa.select(steps).where(steps.c.prompt_layout.is_(None))).all()
    _write_layouts(conn, steps, orphans, {r.episode_id: "" for r in orphans}, ids)


def _write_layouts(
    conn: sa.Connection,
    steps: sa.TableClause,
    rows: Sequence[Any],
    questions: dict[int, str],
    ids: dict[str, int],
) -> None:
    encoded = []
    previous: tuple[int, int, str] | None = None  # (episode, step_no, prompt)
    for r in rows:
        prompt = r.prompt
        base = None
        if previous is not None and previous[:2] == (r.episode_id, r.step_no - 1):
            base = previous[2]
        encoded.append((r.id, *simple_pieces(prompt, base), prompt_hash(prompt)))
        previous = (r.episode_id, r.step_no, prompt)
    _text_ids(conn, {rest for _, _, rest, _ in encoded} - ids.keys(), ids)
    if encoded:
        conn.execute(
            steps.update()
            .where(steps.c.id == sa.bindparam("b_id"))
            .values(prompt_layout=sa.bindparam("b_layout"), prompt_sha256=sa.bindparam("b_hash")),
            [
                {
                    "b_id": i,
                    "b_layout": f"p{keep} t{ids[rest]}" if keep else f"t{ids[rest]}",
                    "b_hash": digest,
                }
                for i, keep, rest, digest in encoded
            ],
        )


def _text_ids(conn: sa.Connection, texts: set[str], ids: dict[str, int]) -> None:
    """Insert texts (none is there yet: this revision creates the table) and learn their ids."""
    if not texts:
        return
    by_hash = {prompt_hash(t): t for t in texts}
    conn.execute(sa.insert(_texts), [{"sha256": h, "text": t} for h, t in by_hash.items()])
    hashes = list(by_hash)
    for start in range(0, len(hashes), 500):
        part = hashes[start : start + 500]
        for i, h in conn.execute(
            sa.select(_texts.c.id, _texts.c.sha256).where(_texts.c.sha256.in_(part))
        ):
            ids[by_hash[bytes(h)]] = i


def _decode_prompts(conn: sa.Connection) -> None:
    steps = _steps("prompt", "prompt_layout")
    for questions in _episode_chunks(conn):
        rows = conn.execute(
            sa.select(steps)
            .where(steps.c.episode_id.in_(questions))
            .order_by(steps.c.episode_id, steps.c.step_no)
        ).all()
        wanted = {i for r in rows for i in layout_text_ids(r.prompt_layout)}
        texts = {
            i: t
            for i, t in conn.execute(
                sa.select(_texts.c.id, _texts.c.text).where(_texts.c.id.in_(wanted))
            )
        }
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
            values += [{"b_id": r.id, "b_prompt": prompts.get(r.step_no, "")} for r in ep_rows]
        if values:
            conn.execute(
                steps.update()
                .where(steps.c.id == sa.bindparam("b_id"))
                .values(prompt=sa.bindparam("b_prompt")),
                values,
            )
    # Steps of no episode have nothing to rebuild from.
    conn.execute(steps.update().where(steps.c.prompt.is_(None)).values(prompt=""))
