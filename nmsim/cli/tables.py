"""How every ``nmsim`` command prints numbers and tables: one formatter, shared.

The command families (:mod:`nmsim.cli.formats`, :mod:`nmsim.cli.perf`,
:mod:`nmsim.cli.report`) format cells, ratios and JSON through this module
rather than through each other.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Sequence
from typing import Any

from nmsim.report.text import printable

__all__ = [
    "format_ratio",
    "format_value",
    "output_width",
    "print_json",
    "print_table",
    "printable",
]


def output_width() -> int | None:
    """The width tables are laid out for: ``COLUMNS`` when set, else the terminal's when
    stdout is one; ``None`` when piped (a table is then as wide as it needs, up to 160)."""
    text = os.environ.get("COLUMNS", "")
    if text.isdigit() and int(text) > 0:
        return int(text)
    if sys.stdout.isatty():
        return shutil.get_terminal_size().columns
    return None


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """Print ``rows`` under ``columns`` as a rich table, or aligned plain text without rich.

    Cells go through :func:`format_value`. Laid out for :func:`output_width`: a cell never
    splits a number or a name; only cells with spaces wrap, at the spaces. A table that
    still does not fit is printed in parts of whole columns, each repeating the first
    column, and a line under the last part says so.
    """
    cells = [[format_value(c) for c in row] for row in rows]
    widths = [max([len(col), *(len(r[i]) for r in cells)]) for i, col in enumerate(columns)]
    try:
        from rich.console import Console
    except ImportError:  # plain text when rich is absent
        print(title)
        print("  ".join(col.ljust(w) for col, w in zip(columns, widths, strict=True)))
        for row in cells:
            print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
        print()
        return
    available = output_width()
    if available is None:
        # Wide enough for the table when piped (rich assumes 80), capped so long notes wrap.
        width = min(160, max(len(title) + 2, sum(widths) + 3 * len(widths) + 1))
        Console(width=width).print(_rich_table(title, columns, cells, range(len(columns))))
        return
    console = Console(width=available)
    parts = _column_parts(title, columns, cells, available)
    for number, part in enumerate(parts):
        console.print(_rich_table(title if number == 0 else None, columns, cells, part))
    if len(parts) > 1:
        console.print(
            f"(at {available} columns: in {len(parts)} parts, each with the first column; "
            "--json, or a wider terminal, shows one table)",
            style="dim",
            markup=False,
            highlight=False,
        )


def _wraps(cells: list[list[str]], index: int) -> bool:
    """Whether column ``index`` may wrap: some cell has a space to wrap at."""
    return any(" " in row[index] for row in cells)


def _rich_table(
    title: str | None, columns: Sequence[str], cells: list[list[str]], shown: Sequence[int]
) -> Any:
    """The rich table of the columns ``shown``: cells with a space wrap there, no other does."""
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for index in shown:
        table.add_column(columns[index], overflow="fold", no_wrap=not _wraps(cells, index))
    for row in cells:
        table.add_row(*(row[index] for index in shown))
    return table


def _narrowest(columns: Sequence[str], cells: list[list[str]], index: int) -> int:
    """The least width column ``index`` takes: its widest cell, or widest word if it wraps."""
    from rich.cells import cell_len

    texts = [columns[index], *(row[index] for row in cells)]
    if _wraps(cells, index):
        return max(cell_len(word) for text in texts for word in [*text.split(), ""])
    return max(cell_len(text) for text in texts)


def _column_parts(
    title: str, columns: Sequence[str], cells: list[list[str]], width: int
) -> list[list[int]]:
    """Whole columns in groups that each fit ``width`` (the first column in every group).

    A column of the default table takes its width plus 3 (a space each side, a rule) and
    the table one more rule.
    """
    narrowest = [_narrowest(columns, cells, index) for index in range(len(columns))]

    def fits(shown: list[int]) -> bool:
        return sum(narrowest[index] + 3 for index in shown) + 1 <= width

    everything = list(range(len(columns)))
    if fits(everything):
        return [everything]
    parts: list[list[int]] = []
    part = [0]
    for index in everything[1:]:
        if len(part) > 1 and not fits([*part, index]):
            parts.append(part)
            part = [0]
        part.append(index)
    parts.append(part)
    return parts


def format_value(value: object) -> str:
    """A table cell: ``None`` as ``"-"``, whole floats below 1e9 as integers, other floats
    to 4 significant digits (one decimal from 1000 to 1e5)."""
    if value is None:
        return "-"
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e9:
            return str(int(value))
        if abs(value) >= 1e5 or abs(value) < 1e-3:
            return f"{value:.4g}"
        return f"{value:.4g}" if abs(value) < 1000 else f"{value:.1f}"
    return str(value)


def format_ratio(value: float | None, digits: int = 2) -> str:
    """A ratio as ``"1.23x"``, never rounded onto ``1`` unless it is exactly 1.

    A sparse run marginally slower than dense (0.9999) must not read as "1.00x", nor a
    marginal gain as no change: such ratios get more decimals (``"0.9999x"``), up to 6;
    beyond that a ``<`` or ``>`` says on which side of 1 they lie (``"<1.000000x"``).
    ``None`` is ``"-"``.
    """
    if value is None:
        return "-"
    text = f"{value:.{digits}f}"
    while value != 1 and float(text) == 1 and digits < 6:
        digits += 1
        text = f"{value:.{digits}f}"
    if value != 1 and float(text) == 1:
        text = ("<" if value < 1 else ">") + text
    return f"{text}x"


def print_json(data: Any) -> None:
    """Write ``data`` to stdout as indented JSON (objects it cannot encode as their ``str``)."""
    json.dump(data, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")
