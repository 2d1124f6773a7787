"""Error messages in the words of the command line.

Library errors name Python arguments (``remainder='pad'``); a user who typed
``--remainder`` should read ``--remainder pad``. :func:`in_flag_words` rewrites
every ``name=value`` whose ``--name`` is an option of the running command, and
leaves everything else (paths, ``n=5 must be <= m=4``) untouched.

Both command lines build their parsers from :class:`OneLineParser`, so that an
argument error is one line (the program, the flag as the command names it, the
rule) with exit status 2, never argparse's usage dump; :func:`pattern_argument` is
the ``N:M`` argument type of every ``--pattern``/``--sparse`` flag, whose message
says ``N`` and ``M`` (``-m``/``-n`` are GEMM sizes in ``nmsim gemm``).
"""

from __future__ import annotations

import argparse
import re
from typing import TYPE_CHECKING, NoReturn

from nmref.io.printable import printable

if TYPE_CHECKING:
    from nmref.patterns import Pattern

__all__ = [
    "OneLineParser",
    "command_parser",
    "in_flag_words",
    "option_names",
    "pattern_argument",
    "was_interrupted",
]

_ASSIGNMENT = re.compile(r"(?<![-\w])([a-z][a-z0-9_]*)=('(?:[^'\\]|\\.)*'|\"[^\"]*\"|[-+\w.]+)")


def option_names(parser: argparse.ArgumentParser) -> set[str]:
    """Every ``--long`` option of ``parser`` and of its sub-commands."""
    names: set[str] = set()
    for action in parser._actions:  # argparse exposes no public walk of its actions
        names.update(option for option in action.option_strings if option.startswith("--"))
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                names |= option_names(sub)
    return names


def in_flag_words(message: str, parser: argparse.ArgumentParser) -> str:
    """``message`` with ``name='value'`` written as ``--name value`` where that flag exists.

    Examples
    --------
    >>> p = argparse.ArgumentParser()
    >>> _ = p.add_argument("--remainder")
    >>> print(in_flag_words("remainder='pad' is needed; n=5 must be <= m=4", p))
    --remainder pad is needed; n=5 must be <= m=4
    """
    options = option_names(parser)

    def replace(match: re.Match[str]) -> str:
        flag = "--" + match.group(1).replace("_", "-")
        if flag not in options:
            return match.group(0)
        value = match.group(2)
        if value[:1] in "'\"" and value[-1:] == value[:1]:
            value = value[1:-1]
        return f"{flag} {value}"

    return _ASSIGNMENT.sub(replace, message)


def command_parser(parser: argparse.ArgumentParser, command: str | None) -> argparse.ArgumentParser:
    """The sub-parser of ``command`` (``parser`` itself when there is none).

    Messages speak in the flags of the command that ran: ``nmsim gemm`` has ``--sparse``, and a
    ``pattern=`` there must not become another command's ``--pattern``.
    """
    for action in parser._actions:  # argparse exposes no public walk of its actions
        if isinstance(action, argparse._SubParsersAction) and command in action.choices:
            return action.choices[command]
    return parser


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line on stderr and exit status 2.

    argparse prints its usage (four lines and more for the commands here) before the
    message; the usage is one ``--help`` away, and the rule is what the user needs.
    Sub-parsers are of the same class (argparse makes them with ``type(parent)``).
    """

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{printable(self.prog)}: error: {printable(message)}\n")


_PATTERN_RULE = "N kept of every M, whole numbers with 0 <= N <= M and M >= 1, e.g. 2:4"


def pattern_argument(text: str) -> Pattern:
    """Parse an ``N:M`` command-line value; a bad one is one line naming ``N``/``M`` and the rule.

    The rule is :func:`nmref.parse_pattern`'s; its messages name the library's arguments
    (``n=5 must be <= m=4``), which on a command line read as ``-n``/``-m`` or as
    ``--pattern``. argparse puts the flag the command defines before this message.

    Examples
    --------
    >>> pattern_argument("2:4")
    Pattern(n=2, m=4)
    >>> pattern_argument("5:4")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: '5:4' is not an N:M pattern: N=5 must be <= M=4 (N kept of ...
    """
    from nmref.patterns import parse_pattern

    try:
        return parse_pattern(text)
    except (ValueError, TypeError) as error:
        shown = printable(repr(text if len(text) <= 40 else text[:37] + "..."))
        detail = str(error)
        if detail.startswith("pattern="):  # not of the form N:M at all
            raise argparse.ArgumentTypeError(
                f"{shown} is not an N:M pattern ({_PATTERN_RULE})"
            ) from None
        detail = re.sub(r"(?<![-\w])([nm])=", lambda match: match.group(1).upper() + "=", detail)
        raise argparse.ArgumentTypeError(
            f"{shown} is not an N:M pattern: {detail} ({_PATTERN_RULE})"
        ) from None


def was_interrupted(error: BaseException) -> bool:
    """Whether ``error`` is a Ctrl-C: a ``KeyboardInterrupt``, or the ``SystemError`` that a
    compiled (Numba) function raises when the interrupt arrives while it runs ("returned a
    result with an exception set", caused by the ``KeyboardInterrupt``)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, KeyboardInterrupt):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False
