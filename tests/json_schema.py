"""A small JSON Schema validator for the subset ``specs/report.schema.json`` uses.

Supports ``$ref`` (local ``#/$defs/...``), ``type`` (a name or a list; ``integer``
and ``number`` exclude booleans), ``const``, ``enum``, ``properties``,
``required``, ``additionalProperties`` (bool or schema), ``items``,
``minItems``/``maxItems``, ``minimum``/``maximum``, ``pattern`` and ``anyOf``.
Any other keyword raises, so the schema cannot silently use one it ignores.
"""

from __future__ import annotations

import math
import re
from typing import Any

KNOWN = {
    "$schema",
    "$id",
    "$defs",
    "$ref",
    "title",
    "description",
    "type",
    "const",
    "enum",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "minItems",
    "maxItems",
    "minimum",
    "maximum",
    "pattern",
    "anyOf",
}


def _is_type(value: Any, name: str) -> bool:
    if name == "null":
        return value is None
    if name == "boolean":
        return isinstance(value, bool)
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "number":
        return (
            isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        )
    if name == "string":
        return isinstance(value, str)
    if name == "array":
        return isinstance(value, list)
    if name == "object":
        return isinstance(value, dict)
    raise ValueError(f"unknown type {name!r} in schema")


def errors(value: Any, schema: dict[str, Any], root: dict[str, Any], path: str = "$") -> list[str]:
    """Every violation of ``schema`` by ``value``, as ``"path: problem"`` strings."""
    unknown = set(schema) - KNOWN
    if unknown:
        raise ValueError(f"schema at {path} uses unsupported keywords {sorted(unknown)}")
    if "$ref" in schema:
        target: Any = root
        for part in schema["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        return errors(value, target, root, path)
    found: list[str] = []
    if "anyOf" in schema:
        if all(errors(value, option, root, path) for option in schema["anyOf"]):
            found.append(f"{path}: matches none of anyOf")
        return found
    if "type" in schema:
        names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_is_type(value, name) for name in names):
            return [f"{path}: {value!r:.60} is not of type {names}"]
    if "const" in schema and value != schema["const"]:
        found.append(f"{path}: {value!r} != {schema['const']!r}")
    if "enum" in schema and value not in schema["enum"]:
        found.append(f"{path}: {value!r} not in {schema['enum']}")
    if _is_type(value, "number"):
        if "minimum" in schema and value < schema["minimum"]:
            found.append(f"{path}: {value} < {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            found.append(f"{path}: {value} > {schema['maximum']}")
    if isinstance(value, str) and "pattern" in schema and not re.search(schema["pattern"], value):
        found.append(f"{path}: {value!r} does not match {schema['pattern']}")
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            found.append(f"{path}: fewer than {schema['minItems']} items")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            found.append(f"{path}: more than {schema['maxItems']} items")
        if "items" in schema:
            for index, item in enumerate(value):
                found += errors(item, schema["items"], root, f"{path}[{index}]")
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        for key in schema.get("required", []):
            if key not in value:
                found.append(f"{path}: missing {key!r}")
        extra = schema.get("additionalProperties", True)
        for key, item in value.items():
            if key in properties:
                found += errors(item, properties[key], root, f"{path}.{key}")
            elif extra is False:
                found.append(f"{path}: unexpected key {key!r}")
            elif isinstance(extra, dict):
                found += errors(item, extra, root, f"{path}.{key}")
    return found


def validate(value: Any, schema: dict[str, Any]) -> list[str]:
    """Violations of the whole document against a root schema."""
    return errors(value, schema, schema)
