"""The schema checker of the report tests has teeth: a broken schema or document is caught."""

from __future__ import annotations

import copy

import jsonschema
import pytest

from tests.report_schema import SCHEMA, check_schema, validate

OBJECT_WITH_A_COUNT = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "properties": {"count": {"type": "integer", "minimum": 0}, "share": {"type": "number"}},
}


def test_the_report_schema_declares_draft_2020_12():
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert check_schema(SCHEMA).META_SCHEMA["$id"] == SCHEMA["$schema"]


def test_an_unknown_keyword_deep_in_the_schema_is_rejected():
    schema = copy.deepcopy(OBJECT_WITH_A_COUNT)
    schema["properties"]["count"]["minimun"] = 0  # misspelt: jsonschema alone ignores it
    with pytest.raises(ValueError, match="#/properties/count: unknown keyword 'minimun'"):
        check_schema(schema)


def test_a_schema_that_breaks_the_meta_schema_is_rejected():
    schema = copy.deepcopy(OBJECT_WITH_A_COUNT)
    schema["properties"]["count"]["type"] = "int"
    with pytest.raises(jsonschema.SchemaError):
        check_schema(schema)


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        ({"count": 1.0}, "$.count: 1.0 is not of type integer"),
        ({"count": True}, "$.count: True is not of type integer"),
        ({"count": -1}, "$.count: -1 < 0"),
        ({"share": float("nan")}, "$.share: nan is not of type number"),
        ({"share": float("inf")}, "$.share: inf is not of type number"),
    ],
)
def test_documents_the_report_must_never_hold_are_rejected(document, problem):
    assert validate(document, OBJECT_WITH_A_COUNT) == [problem]


def test_a_valid_document_has_no_problems():
    assert validate({"count": 3, "share": 0.5}, OBJECT_WITH_A_COUNT) == []
