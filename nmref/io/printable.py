"""Text from files and users, made safe to show on a terminal, in a table or in a plot.

Tensor names, paths and arguments come from files and users: an escape byte must not reach
the terminal (it could recolour or rewrite the output), and a NUL or a newline must not hide
or split a line of a message that is promised to be one line.
"""

from __future__ import annotations

__all__ = ["printable"]


def printable(text: str) -> str:
    """``text`` with control and format characters written as escapes (``\\x1b``, ``\\x00``).

    Printable Unicode is kept as is; a name that is not valid UTF-8 (``os.fsdecode`` gives
    surrogate escapes, which no terminal or font can show) has its bytes written as ``\\xff``.

    Examples
    --------
    >>> print(printable("layer\\x00.weight\\x1b[31m"))
    layer\\x00.weight\\x1b[31m
    >>> printable("poids_é")
    'poids_é'
    """
    import unicodedata

    text = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return "".join(
        character
        if unicodedata.category(character)[0] != "C"
        else character.encode("unicode_escape").decode("ascii")
        for character in text
    )
