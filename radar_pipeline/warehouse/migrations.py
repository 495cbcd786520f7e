"""Apply the numbered plain-SQL migrations in sql/ with yoyo-migrations."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from yoyo import get_backend, read_migrations

from radar_pipeline.config import warehouse_url

# An installed wheel carries the migrations in the package (setup.py copies them there); a checkout keeps them in
# sql/ at its top.
PACKAGED_SQL_DIR = Path(__file__).resolve().parents[1] / "sql"
SQL_DIR = PACKAGED_SQL_DIR if PACKAGED_SQL_DIR.is_dir() else Path(__file__).resolve().parents[2] / "sql"


def pending(url: str) -> list[str]:
    """The ids of the migrations not yet applied to the warehouse."""
    backend = _backend(url)
    return [m.id for m in backend.to_apply(_migrations())]


def upgrade(url: str) -> list[str]:
    """Apply every migration not yet applied, under yoyo's lock; returns the ids applied (empty when up to date)."""
    backend = _backend(url)
    migrations = _migrations()
    with backend.lock():
        todo = backend.to_apply(migrations)
        backend.apply_migrations(todo)
    return [m.id for m in todo]


def _migrations():  # type: ignore[no-untyped-def]
    if not SQL_DIR.is_dir():
        raise FileNotFoundError(f"the migrations folder {SQL_DIR} is missing: reinstall radar_pipeline")
    return read_migrations(str(SQL_DIR))


def _backend(url: str):  # type: ignore[no-untyped-def]
    """yoyo on the warehouse, its own tables looked up in one schema whatever the role's search_path.

    yoyo names its tables without a schema. With the default search_path ("$user", public) and a role named radar, the
    first upgrade keeps them in public (schema radar does not exist yet), and the next looked for them in radar, found
    none and applied every migration again. The schema holding the history (the fullest one, where an earlier failure
    left an empty copy) goes first in the connection's search_path; a new warehouse keeps it where the search_path
    puts it now, as before.
    """
    url = warehouse_url(url)
    schema, search_path = _history_schema(url)
    if schema is None:
        return get_backend(url)
    # yoyo sets search_path to its URL's `schema` argument as given: the rest of the role's path is kept after it.
    pinned = sa.engine.make_url(url).update_query_dict({"schema": f"{_quoted(schema)}, {search_path}"})
    return get_backend(pinned.render_as_string(hide_password=False))


def _history_schema(url: str) -> tuple[str | None, str]:
    """The schema holding yoyo's history (else the one it would be created in now) and the session's search_path."""
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    try:
        with engine.connect() as conn:
            search_path = conn.execute(sa.text("SHOW search_path")).scalar_one()
            found = conn.execute(
                sa.text(
                    "SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "WHERE c.relname = '_yoyo_migration' AND c.relkind = 'r' AND has_table_privilege(c.oid, 'SELECT') "
                    "ORDER BY n.nspname <> 'public', n.nspname"
                )
            ).scalars()
            applied = {
                schema: conn.execute(sa.text(f"SELECT count(*) FROM {_quoted(schema)}._yoyo_migration")).scalar_one()
                for schema in found
            }
            if applied:
                return max(applied, key=lambda schema: applied[schema]), search_path
            return conn.execute(sa.text("SELECT current_schema()")).scalar_one_or_none(), search_path
    finally:
        engine.dispose()


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
