"""Error messages in the words of the command line.

Library errors name Python arguments (``remainder='pad'``); a user who typed
``--remainder`` should read ``--remainder pad``. :func:`in_flag_words` rewrites
every ``name=value`` whose ``--name`` is an option of the running parser, and
leaves everything else (paths, ``n=5 must be <= m=4``) untouched.
"""

from __future__ import annotations

import argparse
import re

__all__ = ["in_flag_words", "option_names"]

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
