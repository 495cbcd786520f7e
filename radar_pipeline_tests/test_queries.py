"""The long queries in .sql files (config/queries.py): every name the package loads has its file and loads, every
file is loaded by some module, a name without a file fails naming it, and the files ship as package data."""

from __future__ import annotations

import ast
import glob
import tomllib
from pathlib import Path

import pytest
import sqlalchemy as sa

from radar_pipeline.config.queries import QueryNotFound, sql_string, sql_text

PACKAGE = Path(__file__).resolve().parents[1] / "radar_pipeline"
LOADER = PACKAGE / "config" / "queries.py"
LOADERS = {"sql_text", "sql_string"}


def _loaded() -> dict[str, list[str]]:
    """Each query name the package's modules load (a string literal handed to sql_text or sql_string) → where."""
    found: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text()
        # the loader's own module calls sql_string with a variable; only the modules that import it call the loader
        imports = "config.queries" in source or "config import queries" in source
        if path == LOADER or not imports:
            continue
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, ast.Call):
                continue
            called = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
            if called in LOADERS:
                where = f"{path.relative_to(PACKAGE)}:{node.lineno}"
                assert len(node.args) == 1 and isinstance(node.args[0], ast.Constant), f"{where}: not a literal name"
                found.setdefault(node.args[0].value, []).append(where)
    return found


def _files() -> dict[str, Path]:
    """Each .sql file of a queries/ folder in the package → the name that loads it."""
    return {
        ".".join(path.relative_to(PACKAGE).parent.parent.parts + (path.stem,)): path
        for path in sorted(PACKAGE.rglob("queries/*.sql"))
    }


def test_every_loaded_name_has_its_file_and_loads() -> None:
    loaded = _loaded()
    assert loaded, "no module loads a query: the scan found nothing"
    for name, where in sorted(loaded.items()):
        clause = sql_text(name)
        assert isinstance(clause, sa.TextClause) and clause.text.strip(), f"{name} ({where}): empty"
        assert sql_text(name) is clause, "each query is read once"
        assert sql_string(name) == clause.text


def test_every_query_file_is_loaded_by_some_module() -> None:
    unused = sorted(set(_files()) - set(_loaded()))
    assert not unused, f"query files no module loads: {unused}"


def test_a_name_without_a_file_fails_naming_it() -> None:
    with pytest.raises(QueryNotFound, match="warehouse.no_such_query.*warehouse/queries/no_such_query.sql"):
        sql_text("warehouse.no_such_query")
    with pytest.raises(QueryNotFound, match="'no_such_package.x'"):
        sql_string("no_such_package.x")
    with pytest.raises(QueryNotFound, match="'window_health'"):
        sql_text("window_health")


def test_the_query_files_are_package_data() -> None:
    """pyproject.toml's package-data patterns (setuptools globs them recursively) cover every query file."""
    pyproject = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["radar_pipeline"]
    shipped = {p for pattern in patterns for p in glob.glob(pattern, root_dir=PACKAGE, recursive=True)}
    files = {str(path.relative_to(PACKAGE)) for path in _files().values()}
    assert files and files <= shipped, sorted(files - shipped)


def test_the_collectors_queries_carry_its_mark_after_their_first_word() -> None:
    """pg_stat_statements keeps a statement's text from its first token: the mark that keeps the collector's own
    statements out of what it stores (collector.pgss.COLLECTOR_MARK) comes right after it, in every file."""
    from radar_pipeline.collector.pgss import COLLECTOR_MARK
    from radar_pipeline.collector.waits import LOCK

    files = {name: path for name, path in _files().items() if name.startswith("collector.")}
    assert files
    for name in files:
        first, _, rest = sql_string(name).partition(" ")
        assert rest.startswith(COLLECTOR_MARK + " "), f"{name}: {first} {rest[:60]}"
    assert f"wait_event_type = '{LOCK}'" in sql_string("collector.wait_sample")
