"""Golden vectors for 1-D masks (nmref/testing/data/golden/masks.json, expected by brute force)."""

from __future__ import annotations

import importlib.resources
import json

import numpy as np
import pytest

import nmref

GOLDEN = json.loads(
    (importlib.resources.files("nmref.testing") / "data" / "golden" / "masks.json").read_text()
)


@pytest.mark.parametrize("case", GOLDEN["cases"], ids=lambda c: c["name"])
def test_golden_mask(case):
    scores = np.array(case["scores"], dtype=case["dtype"])
    function = getattr(nmref, case["function"])
    mask = function(scores, case["n"], case["m"])
    np.testing.assert_array_equal(mask.astype(int), case["expected"])
