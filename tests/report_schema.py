"""The report schema (``nmsim/data/report.schema.json``), checked and applied with ``jsonschema``.

The schema itself is checked when loaded: against the meta-schema of the draft it
declares, and for keywords that draft does not define (``jsonschema`` ignores those,
so a misspelt ``minimun`` would silently check nothing). Violations are returned as
``"path: problem"`` strings (``$.tensors[1].status: 'fine' not in [...]``), one per
problem, so a test can assert which damage was found.
"""

from __future__ import annotations

import importlib.resources
import json
import math
from collections.abc import Iterator
from typing import Any

import jsonschema
import jsonschema.validators

__all__ = ["SCHEMA", "check_schema", "validate"]

# Keywords that annotate and never validate; every other keyword must be one the
# draft's validator implements.
ANNOTATIONS = frozenset(
    {"$schema", "$id", "$defs", "$comment", "title", "description", "default", "examples"}
)
# Where a keyword's value holds subschemas: one, a list, or a name -> subschema mapping.
ONE_SUBSCHEMA = ("items", "additionalProperties", "not", "if", "then", "else", "contains")
LIST_OF_SUBSCHEMAS = ("anyOf", "allOf", "oneOf", "prefixItems")
MAP_OF_SUBSCHEMAS = ("properties", "patternProperties", "$defs", "dependentSchemas")


def _is_integer(checker: Any, value: Any) -> bool:
    # JSON Schema counts 1.0 as an integer; the report writes counts as ints, so a float
    # count is a bug worth catching.
    return isinstance(value, int) and not isinstance(value, bool)


def _is_finite_number(checker: Any, value: Any) -> bool:
    # The report is written with allow_nan=False: a NaN or infinity is never valid.
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _subschemas(schema: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    for key in ONE_SUBSCHEMA:
        if isinstance(schema.get(key), dict):
            yield key, schema[key]
    for key in LIST_OF_SUBSCHEMAS:
        for index, item in enumerate(schema.get(key, [])):
            yield f"{key}/{index}", item
    for key in MAP_OF_SUBSCHEMAS:
        for name, item in schema.get(key, {}).items():
            yield f"{key}/{name}", item


def _unknown_keywords(schema: Any, known: frozenset[str], path: str = "#") -> list[str]:
    if not isinstance(schema, dict):
        return []
    found = [f"{path}: unknown keyword {key!r}" for key in sorted(set(schema) - known)]
    for where, subschema in _subschemas(schema):
        found += _unknown_keywords(subschema, known, f"{path}/{where}")
    return found


def check_schema(schema: dict[str, Any]) -> type:
    """The validator class for ``schema`` after checking the schema itself.

    Raises
    ------
    jsonschema.SchemaError
        If the schema breaks its draft's meta-schema.
    ValueError
        If it uses a keyword its draft does not define.
    """
    draft = jsonschema.validators.validator_for(schema)
    draft.check_schema(schema)
    unknown = _unknown_keywords(schema, frozenset(draft.VALIDATORS) | ANNOTATIONS)
    if unknown:
        raise ValueError("; ".join(unknown))
    type_checker = draft.TYPE_CHECKER.redefine_many(
        {"integer": _is_integer, "number": _is_finite_number}
    )
    return jsonschema.validators.extend(draft, type_checker=type_checker)


def _where(error: jsonschema.ValidationError) -> str:
    return "$" + "".join(
        f"[{part}]" if isinstance(part, int) else f".{part}" for part in error.absolute_path
    )


def _problems(error: jsonschema.ValidationError) -> list[str]:
    """One error as the checker's ``path: problem`` lines."""
    path, value, rule = _where(error), error.instance, error.validator_value
    match error.validator:
        case "anyOf" | "oneOf":
            return [f"{path}: matches none of {error.validator}"]
        case "type":
            return [f"{path}: {value!r:.60} is not of type {rule}"]
        case "const":
            return [f"{path}: {value!r} != {rule!r}"]
        case "enum":
            return [f"{path}: {value!r} not in {rule}"]
        case "minimum":
            return [f"{path}: {value} < {rule}"]
        case "maximum":
            return [f"{path}: {value} > {rule}"]
        case "required":
            return [f"{path}: missing {key!r}" for key in rule if key not in value]
        case "additionalProperties":
            extra = set(value) - set(error.schema.get("properties", {}))
            return [f"{path}: unexpected key {key!r}" for key in sorted(extra)]
    return [f"{path}: {error.message}"]


def validate(value: Any, schema: dict[str, Any]) -> list[str]:
    """Every violation of ``schema`` by the document ``value``, as ``"path: problem"`` strings."""
    validator = check_schema(schema)(schema)
    found: list[str] = []
    for error in validator.iter_errors(value):
        # `required` reports each missing key as its own error; keep each line once.
        found += [problem for problem in _problems(error) if problem not in found]
    return found


SCHEMA: dict[str, Any] = json.loads(
    (importlib.resources.files("nmsim") / "data" / "report.schema.json").read_text()
)
check_schema(SCHEMA)
