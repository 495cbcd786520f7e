"""The package's long SQL queries, each in a .sql file of a queries/ folder beside the module that runs it, loaded by
name: sql_text("warehouse.window_health") is radar_pipeline/warehouse/queries/window_health.sql as a SQLAlchemy text
clause, sql_string("collector.wait_sample") a collector's file as the plain string psycopg takes.

The files are package data (pyproject.toml), read through importlib.resources so that an installed wheel finds them
as the checkout does; each is read once per process. Short one-line statements, and those built from parts (column
lists, shared fragments), stay inline where they are run.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import sqlalchemy as sa

PACKAGE = "radar_pipeline"
FOLDER = "queries"


class QueryNotFound(LookupError):
    """A query's name has no .sql file; the message names the query and the file looked for."""


def query_path(name: str) -> tuple[str, str]:
    """The package a query belongs to and its file's path in it: "warehouse.window_health" →
    ("radar_pipeline.warehouse", "queries/window_health.sql")."""
    package, _, stem = name.rpartition(".")
    if not package or not stem:
        raise QueryNotFound(f"query {name!r}: a name is <package>.<file>, e.g. 'warehouse.window_health'")
    return f"{PACKAGE}.{package}", f"{FOLDER}/{stem}.sql"


@cache
def sql_string(name: str) -> str:
    """The text of the named query's .sql file (QueryNotFound, naming it, when there is none)."""
    package, file = query_path(name)
    try:
        return resources.files(package).joinpath(file).read_text(encoding="utf-8")
    except (FileNotFoundError, ModuleNotFoundError) as exc:
        raise QueryNotFound(f"query {name!r}: no file {package.replace('.', '/')}/{file}") from exc


@cache
def sql_text(name: str) -> sa.TextClause:
    """The named query as a SQLAlchemy text clause (its :name bind parameters as written in the file)."""
    # sqlalchemy is imported here, not when the module loads: the code location loads without it (test_layers).
    import sqlalchemy as sa

    return sa.text(sql_string(name))
