"""nmref.audit: each peer against its published description, validity, certified gaps, CLI.

Expected masks below are written by hand from the descriptions quoted in the peer
modules (and specs/audit.md), not computed by the code under test.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import nmref
from nmref.audit import METHODS, audit, classify_mask
from nmref.audit._blocks import to_blocks
from nmref.audit.apex import apex_best_mask, apex_greedy_mask, apex_pattern_order
from nmref.audit.hu2024 import hu2024_mask, hu2024_patterns
from nmref.audit.pytorch_tile import pytorch_tile_mask, pytorch_tile_signed_mask
from nmref.audit.reference import optima
from nmref.audit.tsenor import dykstra_plan, local_search, tsenor_mask
from nmref.cli import main

# The keep-greedy stalls here: rows 0-2 fill columns 0-2, row 3 only finds column 3.
STALLED = np.array([[9, 8, 0, 0], [7, 0, 6, 0], [0, 5, 4, 0], [0, 0, 0, 0]])
STALLED_GREEDY = np.array([[1, 1, 0, 0], [1, 0, 1, 0], [0, 1, 1, 0], [0, 0, 0, 1]], dtype=bool)
# Lexicographically greatest transposable 2:4 pattern (first row of Hu et al.'s table).
LEX_FIRST = np.array([[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 1], [0, 0, 1, 1]], dtype=bool)


# ---- peers against their descriptions --------------------------------------------------


def test_pytorch_tile_greedy_keeps_largest_first_and_may_keep_fewer_than_8():
    # 9, 8 (row 0), 7, 6 (row 1), 5, 4 (row 2); then only (3, 3) still fits: 7 kept.
    kept = pytorch_tile_mask(STALLED)
    np.testing.assert_array_equal(kept, STALLED_GREEDY)
    assert kept.sum() == 7


def test_pytorch_default_algorithm_ranks_signed_values():
    weights = np.array([[-9, 8, 1, 0], [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]])
    # signed ranking: 8 then 1 fill row 0; |w| ranking: 9 then 8
    assert pytorch_tile_signed_mask(weights)[0].tolist() == [False, True, True, False]
    assert pytorch_tile_mask(weights)[0].tolist() == [True, True, False, False]


def test_apex_greedy_visits_equal_values_higher_index_first():
    tile = np.array([[5, 5, 5, 0], [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]])
    assert apex_greedy_mask(tile, 2, 4)[0].tolist() == [False, True, True, False]
    # nmref's greedy: lower index first
    assert nmref.transposable_mask(tile, 2, 4, method="greedy")[0].tolist() == [
        True,
        True,
        False,
        False,
    ]


def test_apex_greedy_equals_nmref_greedy_without_ties():
    scores = np.random.default_rng(3).permutation(64 * 64).reshape(64, 64).astype(float)
    for n, m in ((2, 4), (4, 8), (8, 16)):
        np.testing.assert_array_equal(
            apex_greedy_mask(scores, n, m), nmref.transposable_mask(scores, n, m, method="greedy")
        )


def test_the_90_patterns_of_apex_and_hu_are_the_transposable_2_4_patterns():
    apex, hu = apex_pattern_order(), hu2024_patterns()
    assert len(apex) == len(hu) == 90
    assert {p.tobytes() for p in apex} == {p.tobytes() for p in hu}
    for pattern in hu.reshape(90, 4, 4):
        assert (pattern.sum(axis=0) == 2).all() and (pattern.sum(axis=1) == 2).all()
    np.testing.assert_array_equal(hu[0].reshape(4, 4), LEX_FIRST)
    # descending lexicographic order of the row-major keep-vectors
    keys = [tuple(p) for p in hu.astype(int)]
    assert keys == sorted(keys, reverse=True)


def test_pattern_searches_find_a_unique_optimum():
    # 10 on a valid pattern, 1 elsewhere: that pattern is the only optimum.
    pattern = np.array([[1, 0, 1, 0], [0, 1, 0, 1], [1, 1, 0, 0], [0, 0, 1, 1]], dtype=bool)
    tile = np.where(pattern, 10.0, 1.0)
    np.testing.assert_array_equal(apex_best_mask(tile), pattern)
    np.testing.assert_array_equal(hu2024_mask(tile), pattern)


def test_float32_sums_miss_a_near_tie_that_the_exact_optimum_sees():
    tile = np.ones((4, 4))
    tile[3, 0] += 2.0**-30  # rounds away in float32: every pattern ties there
    np.testing.assert_array_equal(hu2024_mask(tile), LEX_FIRST)  # first of the tied table
    assert nmref.transposable_mask(tile, 2, 4)[3, 0]  # the exact optimum keeps it
    result = audit(tile, "2:4", methods=["hu2024", "apex-best"], kind="scores")
    for report in result.methods:
        assert report.validity.kind == "exact"
        assert report.total_gap == 2.0**-30  # certified, not rounded to 0


def test_apex_best_breaks_ties_by_its_set_order_not_lexicographically():
    np.testing.assert_array_equal(
        apex_best_mask(np.ones((4, 4))), apex_pattern_order()[0].reshape(4, 4)
    )
    assert not np.array_equal(apex_pattern_order()[0], hu2024_patterns()[0])
    apex, hu = audit(np.ones((4, 4)), "2:4", methods=["apex-best", "hu2024"]).methods
    assert (apex.total_gap, apex.gap_tiles, apex.non_canonical_tiles) == (0.0, 0, 1)
    assert (hu.total_gap, hu.gap_tiles, hu.non_canonical_tiles) == (0.0, 0, 0)


@given(arrays(np.int64, (8, 8), elements=st.integers(0, 3)))
def test_hu2024_equals_the_canonical_exact_mask_when_sums_are_exact(scores):
    # small integers: float32 sums are exact, so ties are the only question, and the
    # first maximum of the descending-lexicographic table is nmref's canonical rule
    np.testing.assert_array_equal(hu2024_mask(scores), nmref.transposable_mask(scores, 2, 4))


def test_tsenor_local_search_applies_the_best_positive_swap():
    scores = STALLED.astype(float)
    scores[3, 1] = scores[2, 3] = 3.0
    kept = STALLED_GREEDY.copy()
    # deficient row 3 and column 3; best swap: drop (2, 1) (5), add (3, 1) and (2, 3): +1
    local_search(kept, scores, 2, steps=8)
    expected = np.array([[1, 1, 0, 0], [1, 0, 1, 0], [0, 0, 1, 1], [0, 1, 0, 1]], dtype=bool)
    np.testing.assert_array_equal(kept, expected)


def test_tsenor_local_search_stops_without_a_positive_swap():
    kept = STALLED_GREEDY.copy()
    local_search(kept, STALLED.astype(float), 2, steps=8)  # every swap would lose score
    np.testing.assert_array_equal(kept, STALLED_GREEDY)


def test_tsenor_plan_is_near_feasible_and_rounding_is_valid():
    scores = np.abs(np.random.default_rng(0).standard_normal((64, 64)))
    plan = dykstra_plan(to_blocks(scores, 16), 8)
    assert (plan <= 1).all() and (plan > 0).all()
    # the box projection comes last: rows and columns only approach n in 100 sweeps
    np.testing.assert_allclose(plan.sum(axis=1), 8, rtol=5e-2)
    mask = tsenor_mask(scores, 8, 16)
    assert classify_mask(mask, 8, 16).kind in ("exact", "at_most")


def test_tsenor_on_a_dominant_diagonal():
    np.testing.assert_array_equal(
        tsenor_mask(np.diag([4.0, 3.0, 2.0, 1.0]) + 0.5, 1, 4), np.eye(4, dtype=bool)
    )


# ---- validity ----------------------------------------------------------------------------


def test_validity_exact_at_most_and_where_invalid():
    exact = np.kron(np.eye(2, dtype=int), np.ones((2, 2), dtype=int)).astype(bool)
    full = np.hstack([exact, exact])
    assert classify_mask(full, 2, 4).kind == "exact"
    under = full.copy()
    under[1, 5] = False
    validity = classify_mask(under, 2, 4)
    assert (validity.kind, validity.exact_tiles, validity.at_most_tiles) == ("at_most", 1, 1)
    assert validity.tile_kinds.tolist() == [[0, 1]]
    over = full.copy()
    over[2, 4] = True  # tile (0, 1): row 2 keeps 3
    validity = classify_mask(over, 2, 4)
    assert validity.kind == "invalid"
    assert tuple(validity.first_violation) == ((0, 1), "row", 2, 3)
    column = full.copy()
    column[2, 4], column[2, 6] = True, False  # row 2 still keeps 2, column 0 of tile (0, 1) keeps 3
    assert tuple(classify_mask(column, 2, 4).first_violation) == ((0, 1), "column", 0, 3)


@given(arrays(np.bool_, (8, 12), elements=st.booleans()), st.integers(0, 4))
def test_validity_agrees_with_is_transposable(mask, n):
    validity = classify_mask(mask, n, 4)
    assert (validity.kind == "exact") == nmref.is_transposable(mask, n, 4)
    assert (validity.kind != "invalid") == nmref.is_transposable(mask, n, 4, exact=False)
    assert validity.exact_tiles + validity.at_most_tiles + validity.invalid_tiles == 6


@pytest.mark.parametrize(
    ("shape", "pattern"), [((0, 0), "2:4"), ((0, 8), "4:8"), ((4, 4), "0:4"), ((4, 8), "4:4")]
)
def test_edge_patterns_and_empty_matrices(shape, pattern):
    result = audit(np.random.default_rng(1).standard_normal(shape), pattern)
    for report in result.methods:
        assert report.validity.kind == "exact" and report.total_gap == 0.0, report.name


def test_an_invalid_user_method_is_reported_with_its_violation():
    def everything(scores, weights, n, m):
        return np.ones(scores.shape, dtype=bool)

    report = audit(np.ones((4, 8)), "2:4", methods={"dense": everything}).methods[0]
    assert report.validity.kind == "invalid" and report.reference is None
    assert tuple(report.validity.first_violation) == ((0, 0), "row", 0, 4)
    assert report.tile_gap.size == 0


# ---- certified gaps --------------------------------------------------------------------


def test_an_at_most_mask_that_beats_the_exact_optimum_is_scored_against_the_at_most_one():
    result = audit(STALLED, "2:4", methods=["exact", "greedy", "pytorch-tile"])
    assert (result.exact_total, result.at_most_total, result.at_most_better_tiles) == (
        35.0,
        39.0,
        1,
    )
    exact, greedy, tile = result.methods
    assert (exact.reference, exact.total_gap) == ("exact", 0.0)
    for report in (greedy, tile):
        assert (report.validity.kind, report.reference) == ("at_most", "at_most")
        assert (report.total_gap, report.beats_exact_tiles) == (0.0, 1)
    # fill="at_most": the exactly-2 optimum is 4 below the at-most one
    exact_at_most = audit(STALLED, "2:4", methods=["exact"], fill="at_most").methods[0]
    assert (exact_at_most.reference, exact_at_most.total_gap) == ("at_most", 4.0)


def test_a_wrong_reference_is_caught_not_clamped(monkeypatch):
    # mutant: the exactly-n optimum passed off as the at-most one
    import nmref.audit.run as run

    def wrong(scores, n, m):
        best = optima(scores, n, m)
        return best._replace(at_most_mask=best.exact_mask, at_most_value=best.exact_value)

    monkeypatch.setattr(run, "optima", wrong)
    with pytest.raises(RuntimeError, match="negative gap"):
        audit(STALLED, "2:4", methods=["greedy"])


@pytest.mark.parametrize(("n", "m"), [(2, 4), (1, 4), (3, 4), (2, 6), (4, 8)])
def test_the_padded_at_most_optimum_equals_the_readable_at_most_solver(n, m):
    rng = np.random.default_rng(n * 10 + m)
    for scores in (rng.integers(0, 3, (2 * m, 2 * m)), rng.standard_normal((2 * m, 2 * m))):
        best = optima(scores.astype(float), n, m)
        expected = nmref.transposable_optimum(scores, n, m, fill="at_most").ravel()
        np.testing.assert_array_equal(best.at_most_value, expected)
        assert classify_mask(
            np.vstack([np.hstack(list(row)) for row in best.at_most_mask.reshape(2, 2, m, m)]), n, m
        ).kind in ("exact", "at_most")


@given(
    st.sampled_from([(2, 4), (4, 8)]).flatmap(
        lambda p: st.tuples(
            st.just(p),
            arrays(
                np.float64,
                (2 * p[1], 2 * p[1]),
                elements=st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.0]),
            ),
        )
    )
)
def test_gaps_are_never_negative_for_any_method(case):
    (n, m), weights = case
    result = audit(weights, (n, m), fill="exact")
    for report in result.methods:
        assert report.validity.kind != "invalid", report.name
        assert (report.tile_gap >= 0).all() and report.total_gap >= 0, report.name
        if report.reference == "exact":
            assert report.validity.kind == "exact"


def test_the_audit_is_deterministic():
    weights = np.random.default_rng(5).standard_normal((32, 64)).astype(np.float32)
    first, second = (audit(weights, "4:8").as_dict() for _ in range(2))
    for document in (first, second):
        for method in document["methods"]:
            method.pop("seconds")
    assert first == second


def test_peers_defined_for_2_4_only_are_skipped_elsewhere():
    result = audit(np.ones((8, 8)), "4:8")
    assert set(result.skipped) == {name for name, method in METHODS.items() if method.only_2_4}
    assert "exact" in [r.name for r in result.methods]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: audit(np.ones((4, 4)), "2:4", methods=["nope"]), "methods='nope'"),
        (lambda: audit(np.ones((4, 4)), "2:4", fill="some"), "fill"),
        (lambda: audit(-np.ones((4, 4)), "2:4", kind="scores"), "non-negative"),
        (lambda: audit(np.ones((4, 6)), "2:4"), "multiple"),
        (lambda: audit(np.full((4, 4), np.nan), "2:4"), "NaN"),
    ],
)
def test_bad_input_names_the_argument(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# ---- CLI -----------------------------------------------------------------------------------


@pytest.fixture
def checkpoint(tmp_path):
    rng = np.random.default_rng(7)
    path = tmp_path / "w.npz"
    np.savez(
        path,
        **{
            "a.weight": rng.standard_normal((16, 16)).astype(np.float32),
            "odd.weight": rng.standard_normal((6, 16)).astype(np.float32),
        },
    )
    return path


def test_cli_json(checkpoint, capsys):
    assert (
        main(["audit", str(checkpoint), "--pattern", "2:4", "--methods", "exact,greedy", "--json"])
        == 0
    )
    document = json.loads(capsys.readouterr().out)
    assert [t["name"] for t in document["tensors"]] == ["a.weight"]
    assert [row["method"] for row in document["summary"]] == ["exact", "greedy"]
    assert document["summary"][0]["tile_gap"]["max"] == 0.0
    assert any("odd.weight" in s for s in document["skipped"])


def test_cli_table_and_errors(checkpoint, capsys):
    assert main(["audit", str(checkpoint), "--pattern", "4:8", "--fill", "at_most"]) == 0
    out = capsys.readouterr().out
    assert "tsenor" in out and "not run: apex-best" in out
    with pytest.raises(SystemExit) as stop:
        main(["audit", str(checkpoint), "--pattern", "2:4", "--methods", "nope"])
    assert stop.value.code == 2
    assert "--methods" in capsys.readouterr().err
    assert main(["audit", str(checkpoint), "--pattern", "2:4", "--include", "zzz"]) == 2
    assert "--include" in capsys.readouterr().err


def test_cli_escapes_tensor_names(tmp_path, capsys):
    path = tmp_path / "w.npz"
    np.savez(path, **{"x\x1b[31m": np.ones((4, 4), dtype=np.float32)})
    assert main(["audit", str(path), "--pattern", "2:4", "--methods", "exact"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\\x1b[31m" in out


@pytest.mark.parametrize("content", [None, b"not a numpy file", b"\x93NUMPY\x01\x00"])
def test_cli_unreadable_inputs_exit_2_in_one_line(tmp_path, capsys, content):
    path = tmp_path / "w.npy"
    if content is not None:
        path.write_bytes(content)
    assert main(["audit", str(path), "--pattern", "2:4"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("nmref: error:") and err.count("\n") == 1
