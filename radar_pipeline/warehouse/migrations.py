"""Apply the numbered plain-SQL migrations in sql/ with yoyo-migrations."""

from __future__ import annotations

from pathlib import Path

from yoyo import get_backend, read_migrations

from radar_pipeline.config import warehouse_url

# An installed wheel carries the migrations in the package (setup.py copies them there); a checkout keeps them in
# sql/ at its top.
PACKAGED_SQL_DIR = Path(__file__).resolve().parents[1] / "sql"
SQL_DIR = PACKAGED_SQL_DIR if PACKAGED_SQL_DIR.is_dir() else Path(__file__).resolve().parents[2] / "sql"


def pending(url: str) -> list[str]:
    """The ids of the migrations not yet applied to the warehouse."""
    backend = get_backend(_yoyo_url(url))
    return [m.id for m in backend.to_apply(_migrations())]


def upgrade(url: str) -> list[str]:
    """Apply every migration not yet applied, under yoyo's lock; returns the ids applied (empty when up to date)."""
    backend = get_backend(_yoyo_url(url))
    migrations = _migrations()
    with backend.lock():
        todo = backend.to_apply(migrations)
        backend.apply_migrations(todo)
    return [m.id for m in todo]


def _migrations():  # type: ignore[no-untyped-def]
    if not SQL_DIR.is_dir():
        raise FileNotFoundError(f"the migrations folder {SQL_DIR} is missing: reinstall radar_pipeline")
    return read_migrations(str(SQL_DIR))


def _yoyo_url(url: str) -> str:
    # yoyo takes the same URL form as SQLAlchemy; postgresql+psycopg selects its psycopg 3 backend.
    return warehouse_url(url)
