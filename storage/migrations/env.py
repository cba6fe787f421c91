"""Alembic environment: migrates the connection that `storage.migrations` hands over."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, create_engine

from storage.models import Base
from storage.text_search import in_models

config = context.config
connection: Connection | None = config.attributes.get("connection")


def _run(conn: Connection) -> None:
    # render_as_batch: SQLite cannot ALTER most things; batch mode copies the table instead.
    context.configure(
        connection=conn,
        target_metadata=Base.metadata,
        render_as_batch=True,
        compare_type=True,
        # The text search's FTS5 table and trigram indexes live outside the models.
        include_name=in_models,
    )
    with context.begin_transaction():
        context.run_migrations()


if connection is not None:
    _run(connection)
else:
    # Plain `alembic -x url=...` use, for making new revisions during development.
    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option(
        "sqlalchemy.url"
    )
    if not url:
        raise SystemExit("pass -x url=sqlite:///path.db to run alembic directly")
    with create_engine(url).begin() as conn:
        _run(conn)
