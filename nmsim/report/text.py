"""Names from files, made safe to show on a terminal, in a table or in a plot."""

from __future__ import annotations

# one rule for both packages: the nmref command line escapes names the same way
from nmref.io.printable import printable

__all__ = ["printable"]
