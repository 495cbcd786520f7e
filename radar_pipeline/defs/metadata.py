"""Tables for Dagster's metadata: rows that come from outside (statement text, plans, relation and target names,
errors) go in as table records, never Markdown, so nothing in them can become a link, an image or markup."""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import dagster as dg

from radar_pipeline.config import printable
from radar_pipeline.pgss_model import shared_queryid_note

Cell = str | int | float | bool | None
ID = "id"  # a column of 64-bit identifiers (queryid): shown as text, exact
# The largest integer a JavaScript number (the UI's) holds exactly: 2**53 − 1. Past it the browser rounds
# (3247342922765952897 shows as 3247342922765953000), so an integer cell beyond it is given as text instead.
EXACT_IN_BROWSER = 2**53 - 1
# Characters of chart images (base64) one materialization's metadata carries: the UI loads a materialization's
# metadata whole, and a chart is 55,000–58,000 (PNGs of 41–43 kB in the tests and the demo): the first three fit.
CHART_IMAGES_LIMIT = 200_000
PNG = b"\x89PNG\r\n\x1a\n"
OWNERS = ["team:radar"]  # every asset's owner in the UI's catalog
OUTBOX_STATUSES = ("pending", "sending", "sent", "failed", "skipped", "withheld")  # sql/0009


def table(columns: Iterable[tuple[str, str]], rows: Iterable[Mapping[str, Any]]) -> dg.TableMetadataValue:
    """A metadata table of (name, type) columns ("string", "int", "float", "bool", or ID: 64-bit ids as text); text
    cells stripped of control characters, missing or NaN cells empty, integers the browser would round given as
    text."""
    columns = list(columns)
    schema = dg.TableSchema(columns=[dg.TableColumn(name, "string" if kind == ID else kind) for name, kind in columns])
    ids = {name for name, kind in columns if kind == ID}
    return dg.MetadataValue.table(
        records=[
            dg.TableRecord({n: _id(row.get(n)) if n in ids else _cell(row.get(n)) for n, _ in columns}) for row in rows
        ],
        schema=schema,
    )


def _id(value: object) -> str | None:
    cell = _cell(value)
    return None if cell is None else str(int(cell)) if isinstance(cell, int | float) else cell


def _cell(value: object) -> Cell:
    if value is None or (isinstance(value, float) and value != value):
        return None
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > EXACT_IN_BROWSER:
        return str(value)
    if isinstance(value, bool | int | float):
        return value
    if hasattr(value, "item"):  # a numpy scalar
        return _cell(value.item())  # type: ignore[union-attr]
    return printable(str(value))


def chart_images(paths: Sequence[str | Path], limit: int = CHART_IMAGES_LIMIT) -> dg.MarkdownMetadataValue | None:
    """The charts drawn, shown in the UI: Markdown images with the PNGs inline (data URIs, so the UI needs no access
    to the files, which may be on another machine or pod), the first ones within `limit` characters, then a line
    saying how many more there are. None without a chart to show. Nothing from outside goes into the Markdown: the
    chart's title (the statement) is in the image."""
    shown: list[str] = []
    used = 0
    for number, path in enumerate(paths, 1):
        try:
            png = Path(path).read_bytes()
        except OSError:  # gone already (a temporary folder cleaned up): the others are still shown
            continue
        if not png.startswith(PNG):
            continue
        data = base64.b64encode(png).decode("ascii")
        if used + len(data) > limit:
            more = len(paths) - number + 1
            shown.append(f"{more} more chart(s) not shown here: the `charts` entry names their files")
            break
        used += len(data)
        shown.append(f"![chart {number}](data:image/png;base64,{data})")
    return dg.MetadataValue.md("\n\n".join(shown)) if shown else None


REGRESSION_ALERTS = dg.AssetKey("regression_alerts")  # the asset whose materializations carry a deploy's charts
CHARTS_LOOKED_BACK = 20  # earlier materializations of a partition searched for its charts


def earlier_charts(instance: dg.DagsterInstance, partition: str) -> dict[str, dg.MetadataValue]:
    """The charts of the deploy partition's latest regression_alerts materialization that drew some, with the run
    that drew them (`chart_images`, `charts_from_run`), for a materialization that drew none: the partition's latest
    materialization then still shows them (issue 39). Empty when none of the last CHARTS_LOOKED_BACK did."""
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=REGRESSION_ALERTS, asset_partitions=[partition]), limit=CHARTS_LOOKED_BACK
    ).records
    for record in records:
        materialization = record.asset_materialization
        images = materialization.metadata.get("chart_images") if materialization is not None else None
        if isinstance(images, dg.MarkdownMetadataValue):
            return {"chart_images": images, "charts_from_run": dg.MetadataValue.text(record.run_id)}
    return {}


def status_counts(counts: Mapping[str, int]) -> dict[str, dg.IntMetadataValue]:
    """An outbox's rows by status, one number each (alerts_sent, alerts_failed, …, zeros too), which the UI charts."""
    return {f"alerts_{status}": dg.MetadataValue.int(int(counts.get(status, 0))) for status in OUTBOX_STATUSES}


def rounded(value: float | None, digits: int = 2) -> float | None:
    """A number rounded for a table cell, None where there is none (a factor bound of an undecided verdict)."""
    return None if value is None or value != value else round(float(value), digits)


def detection_cells(row: Any, text: str) -> dict[str, Any]:
    """The cells every detections table starts with: the statement and its numbers before and after, the factor and
    its 95% interval, the intervals of the statement's own history its test combined with the window (0: the window
    alone; docs/method.md, "Reading a verdict"), and a caution when its queryid is shared with statements over other
    tables (pgss_model.SHARED_QUERYID)."""
    shared = getattr(row, "queryid_shared_with", None)
    return {
        "caution": shared_queryid_note(shared) if isinstance(shared, list) and shared else "",
        "query": text,
        "queryid": int(row.queryid),
        "before_ms": round(float(row.mean_before_ms), 3),
        "after_ms": round(float(row.mean_after_ms), 3),
        "factor": round(float(row.change_factor), 2),
        "factor_low": rounded(row.factor_low),
        "factor_high": rounded(row.factor_high),
        "history_intervals": None if row.history_intervals != row.history_intervals else int(row.history_intervals),
    }
