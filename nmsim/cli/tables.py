"""How every ``nmsim`` command prints numbers and tables: one formatter, shared.

The command families (:mod:`nmsim.cli.formats`, :mod:`nmsim.cli.perf`,
:mod:`nmsim.cli.report`) format cells, ratios and JSON through this module
rather than through each other.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

from nmsim.report.text import printable

__all__ = ["format_ratio", "format_value", "print_json", "print_table", "printable"]


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """Print ``rows`` under ``columns`` as a rich table, or aligned plain text without rich.

    Cells go through :func:`format_value`.
    """
    cells = [[format_value(c) for c in row] for row in rows]
    widths = [max([len(col), *(len(r[i]) for r in cells)]) for i, col in enumerate(columns)]
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:  # plain text when rich is absent
        print(title)
        print("  ".join(col.ljust(w) for col, w in zip(columns, widths, strict=True)))
        for row in cells:
            print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
        print()
        return
    table = Table(title=title, title_justify="left")
    for col in columns:
        table.add_column(col, overflow="fold")
    for row in cells:
        table.add_row(*row)
    # Wide enough for the table when piped (rich assumes 80), capped so long notes wrap.
    width = min(160, max(len(title) + 2, sum(widths) + 3 * len(widths) + 1))
    Console(width=width).print(table)


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
