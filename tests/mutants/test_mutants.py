"""Every deliberately wrong implementation in ``implementations.py`` is rejected by the kit.

A conformance kit that passes everything proves nothing: these tests give it
power. Each mutant makes one mistake seen in real code; the kit must find a
counterexample and say which rule it breaks.
"""

from __future__ import annotations

import numpy as np
import pytest

from nmref.testing import (
    ConformanceError,
    check_magnitude_mask,
    check_mask_error_rules,
    check_nm_mask,
    check_sparse_training,
)
from tests.mutants import implementations as mutants


@pytest.mark.parametrize("name", sorted(mutants.NM_MASK_MUTANTS))
def test_nm_mask_mutant_is_rejected(name):
    function, dtype = mutants.NM_MASK_MUTANTS[name]
    report = check_nm_mask(function, dtype=dtype, raise_on_failure=False)
    assert not report.ok, f"{name} passed the kit: {report.summary()}"
    assert report.failures and "expected" in str(report.failures[0])


@pytest.mark.parametrize("name", sorted(mutants.ERROR_RULE_MUTANTS))
def test_error_rule_mutant_is_rejected(name):
    report = check_mask_error_rules(mutants.ERROR_RULE_MUTANTS[name], raise_on_failure=False)
    assert not report.ok, f"{name} passed the kit: {report.summary()}"


@pytest.mark.parametrize("name", sorted(mutants.MAGNITUDE_MUTANTS))
def test_magnitude_mutant_is_rejected(name):
    function, layout, dtype = mutants.MAGNITUDE_MUTANTS[name]
    report = check_magnitude_mask(function, layout=layout, dtype=dtype, raise_on_failure=False)
    assert not report.ok, f"{name} passed the kit: {report.summary()}"


def test_the_tie_mutant_report_names_the_tie_rule():
    with pytest.raises(ConformanceError, match=r"lower index must win \(rule C4"):
        check_nm_mask(mutants.lower_index_loses_ties, quick=True)


def test_the_underfill_mutant_report_names_the_count_rule():
    with pytest.raises(ConformanceError, match=r"must keep exactly \d+ \(rule C1\)"):
        check_nm_mask(mutants.drops_kept_zeros, quick=True)


def test_the_straddle_mutant_report_names_the_row_rule():
    with pytest.raises(ConformanceError, match="groups must not straddle rows"):
        check_mask_error_rules(mutants.groups_straddle_rows)


def test_torch_topk_is_rejected_on_ties():
    """The real ``torch.topk``: not tie-compatible with the spec (rule C4)."""
    torch = pytest.importorskip("torch")
    import numpy as np

    def topk_mask(scores, n, m):
        groups = torch.from_numpy(np.ascontiguousarray(scores)).reshape(-1, m)
        mask = torch.zeros(groups.shape, dtype=torch.bool)
        if n:
            mask.scatter_(1, torch.topk(groups, n, dim=1).indices, True)
        return mask.reshape(scores.shape).numpy()

    report = check_nm_mask(topk_mask, raise_on_failure=False)
    assert not report.ok


@pytest.mark.parametrize("name", sorted(mutants.TRAINING_MUTANTS))
def test_training_mutant_is_rejected(name):
    report = check_sparse_training(
        mutants.TRAINING_MUTANTS[name], method="srste", decay=mutants.DECAY, raise_on_failure=False
    )
    assert not report.ok, f"{name} passed the kit: {report.summary()}"


def test_a_correct_numpy_training_step_passes():
    """The control: the same helper without a bug passes, so the mutants fail for their bug."""
    check_sparse_training(mutants._step, method="srste", decay=mutants.DECAY)


def test_the_backward_mask_mutant_report_names_the_contract():
    with pytest.raises(ConformanceError, match="forward mask E"):
        check_sparse_training(mutants.backward_mask_not_a_subset, decay=mutants.DECAY)


@pytest.mark.parametrize("name", sorted(mutants.BIMASK_MUTANTS))
def test_bimask_mutant_is_rejected(name):
    from nmref.testing.bimask import check_bimask_backward_mask

    report = check_bimask_backward_mask(
        mutants.BIMASK_MUTANTS[name], layout="linear", raise_on_failure=False
    )
    assert not report.ok, f"{name} passed the kit: {report.summary()}"


def test_the_bimask_subset_mutant_report_names_the_subset_rule():
    from nmref.testing.bimask import check_bimask_backward_mask

    with pytest.raises(ConformanceError, match="B must be a subset of F"):
        check_bimask_backward_mask(mutants.bimask_backward_ignores_forward_mask, layout="linear")


def test_bame_mutants_are_rejected():
    from nmref.testing.bame import check_bame_block_scores, check_select_blocks

    scores = check_bame_block_scores(
        mutants.bame_prunes_the_lowest_index_on_ties, raise_on_failure=False
    )
    assert not scores.ok, scores.summary()
    selection = check_select_blocks(
        mutants.bame_blocks_in_reverse_index_order, raise_on_failure=False
    )
    assert not selection.ok, selection.summary()


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("bame_dense_weight_gradient", "outside the computed positions"),
        ("bame_backward_with_dense_weight", "dX differs"),
    ],
)
def test_bame_training_mutants_are_rejected(name, message):
    from nmref.testing.bame import check_bame_training

    with pytest.raises(ConformanceError, match=message):
        check_bame_training(getattr(mutants, name))


def test_bame_training_check_accepts_the_reference():
    from nmref.bame.training import sparse_weight_gradient
    from nmref.testing.bame import check_bame_training

    def reference(x, w, mask, dy, positions):
        sparse = np.where(mask, w, 0)
        return x @ sparse.T, dy @ sparse, sparse_weight_gradient(x, dy, positions)

    assert check_bame_training(reference).ok


@pytest.mark.parametrize("name", ["transposable_greedy_that_under_fills", "transposable_rows_only"])
def test_transposable_mutants_are_rejected(name):
    from nmref.testing.transposable import check_transposable_mask

    report = check_transposable_mask(getattr(mutants, name), method="exact", raise_on_failure=False)
    assert not report.ok, report.summary()
    assert report.failures
