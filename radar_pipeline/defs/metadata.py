"""Tables for Dagster's metadata: rows that come from outside (statement text, plans, relation and target names,
errors) go in as table records, never Markdown, so nothing in them can become a link, an image or markup."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import dagster as dg

from radar_pipeline.config import printable

Cell = str | int | float | bool | None


def table(columns: Iterable[tuple[str, str]], rows: Iterable[Mapping[str, Any]]) -> dg.TableMetadataValue:
    """A metadata table of (name, type) columns ("string", "int", "float", "bool"); text cells stripped of control
    characters, missing or NaN cells empty."""
    schema = dg.TableSchema(columns=[dg.TableColumn(name, kind) for name, kind in columns])
    names = [c.name for c in schema.columns]
    return dg.MetadataValue.table(
        records=[dg.TableRecord({n: _cell(row.get(n)) for n in names}) for row in rows], schema=schema
    )


def _cell(value: object) -> Cell:
    if value is None or (isinstance(value, float) and value != value):
        return None
    if isinstance(value, bool | int | float):
        return value
    if hasattr(value, "item"):  # a numpy scalar
        return _cell(value.item())  # type: ignore[union-attr]
    return printable(str(value))


def rounded(value: float | None, digits: int = 2) -> float | None:
    """A number rounded for a table cell, None where there is none (a factor bound of an undecided verdict)."""
    return None if value is None or value != value else round(float(value), digits)


def detection_cells(row: Any, text: str) -> dict[str, Any]:
    """The cells every detections table starts with: the statement and its numbers before and after, the factor and
    its 95% interval, and the intervals of the statement's own history its test combined with the window (0: the
    window alone; README, "Reading a verdict")."""
    return {
        "query": text,
        "queryid": int(row.queryid),
        "before_ms": round(float(row.mean_before_ms), 3),
        "after_ms": round(float(row.mean_after_ms), 3),
        "factor": round(float(row.change_factor), 2),
        "factor_low": rounded(row.factor_low),
        "factor_high": rounded(row.factor_high),
        "history_intervals": None if row.history_intervals != row.history_intervals else int(row.history_intervals),
    }
