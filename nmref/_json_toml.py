"""JSON and TOML from files anyone may write, read with limits that fail in one line.

Model configs, shard indexes, ``.safetensors`` headers, compressed-checkpoint headers,
calibration corpora and verify manifests come from users. Python's parsers have two failures
that named neither the file nor the key: nesting a thousand levels deep ends in a
``RecursionError`` traceback (the JSON scanner and ``tomllib`` recurse once per level), and an
integer of more than 4,300 digits raises Python's "Exceeds the limit (4300 digits) for integer
string conversion". :func:`load_json` and :func:`load_toml` refuse both in one line naming
``source`` (how the caller names the file) and, for an integer, the line and the key. Nothing
real nests deeper than :data:`MAX_DEPTH` levels.
"""

from __future__ import annotations

import json
import re
import sys
import tomllib
from collections.abc import Callable
from typing import Any

__all__ = ["MAX_DEPTH", "load_json", "load_toml"]

#: Deepest nesting of arrays and objects (tables) read; a config or an index nests a few levels.
MAX_DEPTH = 64


def load_json(
    data: str | bytes,
    source: str,
    *,
    object_pairs_hook: Callable[[list[tuple[str, Any]]], Any] | None = None,
) -> Any:
    """``json.loads(data)``, refusing deep nesting and huge integers in one line.

    Parameters
    ----------
    data : str or bytes
        The document (bytes are decoded as UTF-8, as ``json.loads`` does).
    source : str
        How messages name the file: ``"index 'model/x.json'"``, ``"'config.json'"``.
    object_pairs_hook : callable, optional
        As for ``json.loads`` (to refuse a key named twice, say).

    Raises
    ------
    ValueError
        A ``json.JSONDecodeError`` for bad syntax (the caller's message names the file), or,
        naming ``source``: nesting deeper than :data:`MAX_DEPTH`, or an integer over Python's
        digit limit.
    UnicodeDecodeError
        For bytes that are not UTF-8.

    Examples
    --------
    >>> load_json('{"a": [1, 2]}', "'x.json'")
    {'a': [1, 2]}
    >>> load_json("[" * 100 + "]" * 100, "'x.json'")
    Traceback (most recent call last):
    ...
    ValueError: 'x.json' nests arrays or objects more than 64 levels deep; refused
    """
    try:
        value = json.loads(data, object_pairs_hook=object_pairs_hook)
    except RecursionError:
        raise _too_deep(source) from None
    except ValueError as error:
        if not _is_digit_limit(error):
            raise
        text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
        raise _huge_integer(source, text, json_keys=True) from None
    _check_depth(value, source)
    return value


def load_toml(text: str, source: str) -> dict[str, Any]:
    """``tomllib.loads(text)``, refusing deep nesting and huge integers in one line.

    Raises
    ------
    tomllib.TOMLDecodeError
        For bad syntax (a ``ValueError``; the caller's message names the file).
    ValueError
        Naming ``source``: nesting deeper than :data:`MAX_DEPTH`, or an integer over Python's
        digit limit.

    Examples
    --------
    >>> load_toml("a = 1", "'c.toml'")
    {'a': 1}
    >>> load_toml("a = " + "1" * 5000, "'c.toml'")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: 'c.toml', line 1, key 'a': an integer of 5000 digits, over the limit of 4300; ...
    """
    try:
        value = tomllib.loads(text)
    except RecursionError:
        raise _too_deep(source) from None
    except tomllib.TOMLDecodeError:
        raise
    except ValueError as error:
        if not _is_digit_limit(error):
            raise
        raise _huge_integer(source, text, json_keys=False) from None
    _check_depth(value, source)
    return value


def _too_deep(source: str) -> ValueError:
    return ValueError(
        f"{source} nests arrays or objects more than {MAX_DEPTH} levels deep; refused"
    )


def _check_depth(value: Any, source: str) -> None:
    """Refuse a parsed document deeper than :data:`MAX_DEPTH` (iteratively: no recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > MAX_DEPTH:
            raise _too_deep(source)
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))


def _digit_limit() -> int:
    return sys.get_int_max_str_digits() or 4300


def _is_digit_limit(error: ValueError) -> bool:
    return "integer string conversion" in str(error)


def _huge_integer(source: str, text: str, *, json_keys: bool) -> ValueError:
    """The message for the first integer over the digit limit: its line and key."""
    limit = _digit_limit()
    # not inside a word or a string ("w1111..."); TOML allows 1_000
    match = re.search(rf"(?<![\w.\"'])[-+]?[0-9][0-9_]{{{limit},}}", text)
    if match is None:  # pragma: no cover - the parser found one
        return ValueError(f"{source} holds an integer over the limit of {limit} digits; refused")
    digits = sum(character.isdigit() for character in match.group())
    line = text.count("\n", 0, match.start()) + 1
    before = text[: match.start()].rstrip()
    # the key right before the number ("key": 1 in JSON, key = 1 or "key" = 1 in TOML)
    quoted = r'"(?:[^"\\]|\\.)*"'
    pattern = rf"({quoted})\s*:$" if json_keys else rf"({quoted}|[\w.-]+)\s*=$"
    key = re.search(pattern, before[-1000:])
    name = key.group(1) if key else None
    if name is not None and name.startswith('"'):
        try:  # the key as its program sees it ("\\u0000" is a NUL)
            name = json.loads(name)
        except ValueError:
            name = name[1:-1]
    where = f", key {name!r}" if name is not None else ""
    return ValueError(
        f"{source}, line {line}{where}: an integer of {digits} digits, over the limit of "
        f"{limit}; refused"
    )
