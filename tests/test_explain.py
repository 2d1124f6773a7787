"""``nmref explain``: the traces describe exactly what the library computes."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import nmref
from nmref import bimask
from nmref.cli import main
from nmref.explain import explain_bimask, explain_nm_mask, explain_transposable, render_text
from nmref.transposable.flow import successive_shortest_paths
from nmref.transposable.tiles import exact_integer_tile

PATTERNS = [(1, 2), (2, 4), (1, 4), (3, 4), (4, 4), (0, 4), (2, 6)]


@st.composite
def tiles(draw):
    n, m = draw(st.sampled_from(PATTERNS))
    # A few distinct values make ties (the canonical pass) common.
    values = draw(st.sampled_from([[0.0, 1.0, 2.0], [0.25, 0.5, 3.0, -1.0], [0.1, 0.7, 1.3]]))
    cells = draw(st.lists(st.sampled_from(values), min_size=m * m, max_size=m * m))
    return np.array(cells, dtype=np.float32).reshape(m, m), n, m


@given(tiles())
def test_transposable_trace_matches_the_library(case):
    tile, n, m = case
    e = explain_transposable(tile, n, m)
    expected = nmref.transposable_mask(tile, n, m)
    assert e["result"]["mask"] == expected.astype(int).tolist()
    assert e["result"]["certified"] is True
    units, _ = exact_integer_tile(tile)
    augmentations = [s for s in e["steps"] if s["title"].startswith("augmentation")]
    assert len(augmentations) == n * m
    # The paths' gains add up to the kept sum of the mask after the augmentations (ties keep it).
    assert sum(s["gain"] for s in augmentations) == e["result"]["kept_sum"]
    kept_sum = sum(units[i][j] for i in range(m) for j in range(m) if expected[i, j])
    assert e["result"]["kept_sum"] == kept_sum
    certificate = next(s for s in e["steps"] if s["title"] == "certificate")
    assert certificate["bound"] == kept_sum


@given(tiles())
def test_the_trace_callback_does_not_change_the_solver(case):
    tile, n, m = case
    units, _ = exact_integer_tile(tile)
    events = []
    traced = successive_shortest_paths(units, n, trace=events.append)
    assert traced == successive_shortest_paths(units, n)
    assert len(events) == n * m + 1
    assert all(e["path"][0] == 0 and e["path"][-1] == 2 * m + 1 for e in events[1:])


def test_transposable_tie_pass_is_described():
    # The augmentations end on a tied optimum that the canonical pass must move.
    tile = np.array([[1, 1, 1, 1], [2, 2, 2, 2], [1, 2, 1, 2], [0, 0, 0, 0]], dtype=np.float32)
    e = explain_transposable(tile, 2, 4)
    ties = next(s for s in e["steps"] if s["title"] == "canonical tie pass")
    assert e["result"]["mask"] == nmref.transposable_mask(tile, 2, 4).astype(int).tolist()
    assert any(d["kept"] for d in ties["decisions"])
    assert "tight, dropped" in render_text(e)


@given(
    st.sampled_from([(1, 2), (2, 4), (3, 8), (0, 4), (4, 4)]).flatmap(
        lambda p: st.tuples(
            st.just(p),
            st.lists(
                st.sampled_from([0.0, -0.0, 1.0, 2.0, -1.0, np.inf]),
                min_size=p[1] * 2,
                max_size=p[1] * 2,
            ),
        )
    )
)
def test_nm_mask_trace_matches_the_library(case):
    (n, m), values = case
    scores = np.array(values).reshape(2, m)
    e = explain_nm_mask(scores, n, m)
    assert e["result"]["mask"] == nmref.nm_mask(scores, n, m).astype(int).tolist()
    for step in e["steps"][1:-1]:
        group = scores[step["row"], step["group"] * m : (step["group"] + 1) * m]
        if 0 < n < m:
            ranked = [group[k] for k in step["ranking"]]
            assert step["tie"] == (ranked[n - 1] == ranked[n])


def test_nm_mask_trace_names_the_tie():
    e = explain_nm_mask([1.0, 1.0, 1.0, 1.0], 2, 4)
    assert e["steps"][1]["tie"] is True and e["steps"][1]["keep"] == [0, 1]
    assert "the lower index wins" in render_text(e)


@pytest.mark.parametrize("candidates", [0, 7])
def test_bimask_trace_matches_the_library(candidates):
    w = np.random.default_rng(3).standard_normal((8, 12))
    e = explain_bimask(w, 2, 4, candidates=candidates, rng=5)
    forward = bimask.forward_mask(w, 2, 4)
    permutation = (
        np.arange(8)
        if candidates == 0
        else bimask.search_permutation(w, 2, 4, candidates=candidates, rng=5).permutation
    )
    assert e["result"]["permutation"] == permutation.tolist()
    expected = bimask.backward_mask(w, forward, permutation, 2, 4)
    assert e["result"]["backward_mask"] == expected.astype(int).tolist()
    assert e["result"]["backward_kept"] == int(expected.sum())


def test_cli_text_and_json(tmp_path, capsys):
    path = tmp_path / "tile.npy"
    np.save(path, np.arange(16, dtype=np.float32).reshape(4, 4))
    assert main(["explain", "transposable", str(path), "--pattern", "2:4"]) == 0
    text = capsys.readouterr().out
    for words in ("== network", "== augmentation 8 of 8", "== canonical tie pass", "optimal"):
        assert words in text
    assert main(["explain", "transposable", str(path), "--pattern", "2:4", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    expected = nmref.transposable_mask(np.arange(16).reshape(4, 4), 2, 4)
    assert data["result"]["mask"] == expected.astype(int).tolist()
    assert main(["explain", "nm_mask", str(path), "--pattern", "1:4", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["result"]["mask"][0] == [0, 0, 0, 1]
    assert main(["explain", "bimask", str(path), "--pattern", "2:4", "--candidates", "0"]) == 0
    assert "== backward mask B" in capsys.readouterr().out


def test_cli_picks_a_tile_of_a_larger_matrix(tmp_path, capsys):
    w = np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32)
    path = tmp_path / "w.npy"
    np.save(path, w)
    args = ["explain", "transposable", str(path), "--pattern", "2:4", "--tile", "1,0"]
    assert main([*args, "--magnitude", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)["result"]["mask"]
    assert got == nmref.transposable_mask(np.abs(w[4:, :4]), 2, 4).astype(int).tolist()


@pytest.mark.parametrize(
    ("array", "extra", "words"),
    [
        (np.zeros((4, 6)), [], "not a multiple of m=4 along both axes"),
        (np.zeros(4), [], "must be a 2-D matrix"),
        (np.zeros((8, 8)), ["--tile", "2,0"], "outside the 2x2 tiles"),
        (np.zeros((8, 8)), ["--tile", "x"], "--tile x must be ROW,COL"),
        (np.full((4, 4), np.nan), [], "NaN"),
    ],
)
def test_cli_errors_exit_2(tmp_path, capsys, array, extra, words):
    path = tmp_path / "t.npy"
    np.save(path, array)
    assert main(["explain", "transposable", str(path), "--pattern", "2:4", *extra]) == 2
    assert words in capsys.readouterr().err


def test_cli_refuses_a_file_with_several_tensors(tmp_path, capsys):
    path = tmp_path / "two.npz"
    np.savez(path, a=np.zeros((4, 4)), b=np.ones((4, 4)))
    assert main(["explain", "nm_mask", str(path), "--pattern", "2:4"]) == 2
    assert "choose one with --name" in capsys.readouterr().err
    assert main(["explain", "nm_mask", str(path), "--pattern", "2:4", "--name", "b"]) == 0


def test_explain_refuses_large_inputs():
    with pytest.raises(ValueError, match="explain is for small inputs"):
        explain_nm_mask(np.zeros((100, 100)), 2, 4)


def test_cli_explain_ranks_magnitudes_like_nmref_mask_by_default(tmp_path, capsys):
    # Issue 37: explain ranked signed values while `nmref mask` ranks |w|, then called its
    # (different) mask "the same as nmref.transposable_mask".
    tile = np.array(
        [
            [-9.0, 1.0, 2.0, 3.0],
            [1.0, -9.0, 2.0, 3.0],
            [1.0, 2.0, -9.0, 3.0],
            [1.0, 2.0, 3.0, -9.0],
        ],
        dtype=np.float32,
    )
    path = tmp_path / "tile.npy"
    np.save(path, tile)
    out = tmp_path / "mask.npy"
    assert main(["mask", str(path), "--pattern", "2:4", "--transposable", "-o", str(out)]) == 0
    from_mask = np.load(out).astype(int).tolist()
    assert from_mask != nmref.transposable_mask(tile, 2, 4).astype(int).tolist()  # a real case
    capsys.readouterr()
    assert main(["explain", "transposable", str(path), "--pattern", "2:4", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["scores"] == "magnitude"
    assert data["result"]["mask"] == from_mask
    assert main(["explain", "transposable", str(path), "--pattern", "2:4"]) == 0
    assert capsys.readouterr().out.startswith("Scores: |values|, as nmref mask ranks weights")
    signed = ["explain", "transposable", str(path), "--pattern", "2:4", "--signed", "--json"]
    assert main(signed) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["scores"] == "signed"
    assert data["result"]["mask"] == nmref.transposable_mask(tile, 2, 4).astype(int).tolist()
    assert main(["explain", "nm_mask", str(path), "--pattern", "2:4", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)["result"]["mask"]
    assert got == nmref.magnitude_mask(tile, 2, 4).astype(int).tolist()
    assert main(["explain", "bimask", str(path), "--pattern", "2:4", "--signed"]) == 2
    assert "--signed applies to nm_mask and transposable" in capsys.readouterr().err
