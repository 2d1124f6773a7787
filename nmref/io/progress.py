"""A progress bar (tensors, bytes, tiles) and a summary line for commands over many tensors.

Drawn with rich on stderr, and only when stderr is a terminal and the command was not
given ``--quiet``: piped output and logs stay byte-stable. Progress advances by bytes
(the stored size of each tensor), so a model of one huge and many small tensors shows
a truthful remaining time. The summary line (``summary()``) gives the wall time and
the throughput in bytes (and tiles) per second.
"""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import Any

__all__ = ["WorkProgress", "progress_columns", "stored_bytes"]

_ITEMSIZE = {
    "bool": 1,
    "uint8": 1,
    "int8": 1,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "uint16": 2,
    "int16": 2,
    "float16": 2,
    "bfloat16": 2,
    "uint32": 4,
    "int32": 4,
    "float32": 4,
    "uint64": 8,
    "int64": 8,
    "float64": 8,
}


def stored_bytes(shape: tuple[int, ...], dtype: str) -> int:
    """Bytes a tensor of ``shape`` takes in its file's dtype (4 per element if unknown)."""
    count = 1
    for size in shape:
        count *= int(size)
    return count * _ITEMSIZE.get(dtype, 4)


def _decimal(size: float) -> str:
    from rich.filesize import decimal

    return decimal(int(size))


def progress_columns(width: int, label_width: int, counts_width: int) -> tuple[list, int]:
    """The bar's columns for a ``width``-column terminal, and how many characters of the
    current tensor's name it shows (its end; 0: none).

    The first layout that fits wins: label, bar (6-40 columns), counts, elapsed, eta and
    the name (12-40); then without the name; without the eta; without the bar; the label
    and counts alone. The line is never cut.
    """
    from rich.progress import BarColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    label, counts = TextColumn("{task.description}"), TextColumn("{task.fields[counts]}")
    elapsed, eta = [TimeElapsedColumn()], [TextColumn("eta"), TimeRemainingColumn()]
    name = TextColumn("{task.fields[current]}")
    fixed = label_width + 1 + counts_width + 1  # a space after each column
    times = 7 + 1 + 3 + 1 + 7 + 1  # "0:00:12 eta 0:00:20 "
    room = width - 1 - fixed  # one column to spare against the terminal's last cell
    if room - times >= 6 + 1 + 12:
        left = room - times
        shown = min(40, max(12, left - 1 - 40))
        bar = min(40, left - 1 - shown)
        return [label, BarColumn(bar_width=bar), counts, *elapsed, *eta, name], shown
    if room - times >= 5 + 1:
        bar = min(40, room - times - 1)
        return [label, BarColumn(bar_width=bar), counts, *elapsed, *eta], 0
    if room - 8 >= 3 + 1:
        return [label, BarColumn(bar_width=room - 8 - 1), counts, *elapsed], 0
    if room >= 8:
        return [label, counts, *elapsed], 0
    return [label, counts], 0


class WorkProgress:
    """A bar over ``total_bytes`` of tensors; ``advance(name, nbytes, tiles)`` per tensor.

    Use as a context manager. With ``quiet`` or stderr not a terminal nothing is drawn,
    and :meth:`print_summary` prints nothing either.
    """

    def __init__(
        self,
        label: str,
        tensors: int,
        total_bytes: int,
        total_tiles: int = 0,
        *,
        quiet: bool = False,
    ) -> None:
        from rich.console import Console

        self.label = label
        self.tensors = tensors
        self.total_bytes = total_bytes
        self.total_tiles = total_tiles
        self.console = Console(stderr=True, highlight=False)
        self.enabled = not quiet and self.console.is_terminal
        self.done_tensors = 0
        self.done_bytes = 0
        self.done_tiles = 0
        self.started = time.perf_counter()
        self._bar: Any = None
        self._task: Any = None
        self._name_width = 40

    def __enter__(self) -> WorkProgress:
        self.started = time.perf_counter()
        if self.enabled:
            from rich.progress import Progress

            # The widest the counts get (at the end), so the line never outgrows the terminal.
            done = (self.done_tensors, self.done_bytes, self.done_tiles)
            self.done_tensors, self.done_bytes = self.tensors, self.total_bytes
            self.done_tiles = self.total_tiles
            widest = len(self._counts())
            self.done_tensors, self.done_bytes, self.done_tiles = done
            columns, self._name_width = progress_columns(
                self.console.width, len(self.label), widest
            )
            self._bar = Progress(*columns, console=self.console, transient=True)
            self._bar.start()
            self._task = self._bar.add_task(
                self.label, total=max(self.total_bytes, 1), counts=self._counts(), current=""
            )
        return self

    def _counts(self) -> str:
        text = (
            f"{self.done_tensors}/{self.tensors} tensors "
            f"{_decimal(self.done_bytes)}/{_decimal(self.total_bytes)}"
        )
        if self.total_tiles:
            text += f" {self.done_tiles:,}/{self.total_tiles:,} tiles"
        return text

    def advance(self, name: str, nbytes: int, tiles: int = 0) -> None:
        """Count one finished tensor."""
        self.done_tensors += 1
        self.done_bytes += nbytes
        self.done_tiles += tiles
        if self._bar is not None:
            current = name[-self._name_width :] if self._name_width else ""
            self._bar.update(self._task, advance=nbytes, counts=self._counts(), current=current)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def summary(self) -> str:
        """``"<label>: 5 tensors, 1.2 GB in 3.4 s (350 MB/s, 1,234 tiles/s)"``."""
        seconds = max(time.perf_counter() - self.started, 1e-9)
        text = (
            f"{self.label}: {self.done_tensors} tensor(s), {_decimal(self.done_bytes)} in "
            f"{seconds:.1f} s ({_decimal(self.done_bytes / seconds)}/s"
        )
        if self.done_tiles:
            text += f", {self.done_tiles / seconds:,.0f} tiles/s"
        return text + ")"

    def print_summary(self) -> None:
        """Print :meth:`summary` on stderr when the bar was shown."""
        if self.enabled:
            print(self.summary(), file=sys.stderr)
