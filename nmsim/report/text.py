"""Names from files, made safe to show on a terminal, in a table or in a plot."""

from __future__ import annotations

__all__ = ["printable"]


def printable(text: str) -> str:
    """``text`` with control and format characters written as escapes (``\\x1b``).

    Tensor names come from files: an escape byte in one must not reach the terminal
    (it could recolour or rewrite the output); printable Unicode is kept as is.
    """
    import unicodedata

    # a file name that is not valid UTF-8 arrives with surrogate escapes (os.fsdecode),
    # which no terminal or font can show: write its bytes as \xff escapes
    text = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return "".join(
        character
        if unicodedata.category(character)[0] != "C"
        else character.encode("unicode_escape").decode("ascii")
        for character in text
    )
