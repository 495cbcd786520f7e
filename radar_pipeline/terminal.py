"""Text for a terminal: hostile text made harmless (control characters out, rich markup escaped) and tables fitted
to the terminal's width, for the demo and the `radar` command."""

from __future__ import annotations

import os
from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from radar_pipeline.config import printable

BORDER = 3  # characters a rich table spends per column on borders and padding
MIN_FLEXIBLE = 30  # narrower than this, the flexible column makes room by dropping the droppable ones
# The width given to output that is not a terminal (a pipe, a file, a CI log): wider than any table, so fitted_table
# keeps every column and cell whole, and rich prints each table at its natural width.
UNBOUNDED = 1_000_000


def console(stderr: bool = False) -> Console:
    """A rich Console for the command's output: the terminal's width on a terminal, or the width COLUMNS asks for;
    elsewhere (a pipe, a file, a CI log, where nobody can widen the window) UNBOUNDED, so tables are printed whole,
    not cut to 80 columns."""
    found = Console(highlight=False, stderr=stderr)
    if found.is_terminal or os.environ.get("COLUMNS", "").strip().isdigit():
        return found
    return Console(highlight=False, stderr=stderr, width=UNBOUNDED)


def clean(text: object) -> str:
    """`text` on one line: control characters out (see config.printable) and runs of white space, newlines and tabs
    included, folded to one space."""
    return " ".join(printable("" if text is None else str(text)).split())


def ellipsis(text: str, width: int) -> str:
    """`text` cut to `width` characters with an ellipsis when longer."""
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


def fitted_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[object]],
    width: int,
    flexible: str,
    droppable: Sequence[str] = (),
) -> Table:
    """A table of cleaned cells that fits `width` characters: every column as wide as its widest cell except
    `flexible`, whose cells are cut with an ellipsis to the room left; when that room would be under MIN_FLEXIBLE,
    the `droppable` columns are left out, in order, until it is not."""
    cells = [[clean(c) for c in row] for row in rows]
    keep = list(range(len(headers)))
    flex = list(headers).index(flexible)

    def room(columns: list[int]) -> int:
        fixed = sum(max([len(headers[i]), *(len(r[i]) for r in cells)]) for i in columns if i != flex)
        return width - fixed - BORDER * len(columns) - 1

    for name in droppable:
        if room(keep) >= MIN_FLEXIBLE:
            break
        keep.remove(list(headers).index(name))
    space = max(MIN_FLEXIBLE // 2, room(keep))
    table = Table(show_lines=False)
    for i in keep:
        table.add_column(headers[i], no_wrap=True, overflow="ellipsis")
    for row in cells:
        table.add_row(*(escape(ellipsis(row[i], space) if i == flex else row[i]) for i in keep))
    return table
