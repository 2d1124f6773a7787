"""Regressions for what tests/fuzz found in nmref's remaining public functions (issue 20).

Each test writes the input the fuzz suite drew, literally.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import nmref


def test_to_reduction_shape_refuses_a_fractional_dimension_instead_of_truncating_it() -> None:
    # (2.5, 4) was read as (2, 4): a shape nobody passed.
    with pytest.raises(TypeError, match=r"shape\[0\]=2.5 must be an integer"):
        nmref.to_reduction_shape((2.5, 4))
    with pytest.raises(ValueError, match=r"shape\[0\]=-1 must be >= 0"):
        nmref.to_reduction_shape((-1, 4))
    assert nmref.to_reduction_shape((np.int64(64), 32, 3, 3), "channels") == (576, 32)


def test_count_transposable_patterns_with_a_huge_m_is_a_value_error_not_a_recursion_error() -> None:
    with pytest.raises(ValueError, match=r"m=1180591620717411303424, n=1: counting needs"):
        nmref.count_transposable_patterns(2**70, 1)
    with pytest.raises(ValueError, match="states"):
        nmref.count_transposable_patterns(40, 20)
    assert nmref.count_transposable_patterns(300, 1) > 0  # m! still counts, deep recursion


def test_select_blocks_refuses_complex_scores_and_non_bool_candidates() -> None:
    # Complex scores lost their imaginary part with a ComplexWarning; 0.5 was a candidate.
    with pytest.raises(TypeError, match="scores must have a bool, integer or float"):
        nmref.select_blocks(np.array([[1 + 2j, 0.5]]), np.ones((1, 2), bool), 1)
    with pytest.raises(TypeError, match="candidates must be a bool array"):
        nmref.select_blocks(np.array([[1.0, 0.5]]), np.array([[0.5, 1.0]]), 1)


def test_verify_certificate_refuses_complex_potentials() -> None:
    scores = np.abs(np.random.default_rng(0).standard_normal((4, 4)))
    found = nmref.transposable_certificate(scores, 2, 4)
    with pytest.raises(TypeError, match="row_potentials must have"):
        nmref.verify_certificate(
            scores, found.mask, found.row_potentials + 0j, found.column_potentials, 2, 4
        )


def test_sgd_step_on_an_infinite_weight_follows_ieee_without_a_warning() -> None:
    # w=[[inf, 0], [0, 0]], g=w, momentum 0.9: inf - 0.1 * inf = NaN (spec srste.md section 2:
    # +-inf pass through), which used to come with "invalid value encountered in subtract".
    weight = np.array([[np.inf, 0.0], [0.0, 0.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        new_weight, velocity = nmref.sgd_step(weight, weight, lr=0.1, momentum=0.9)
    assert np.isnan(new_weight[0, 0]) and velocity[0, 0] == np.inf
    np.testing.assert_array_equal(new_weight.ravel()[1:], 0.0)


def test_case_generators_refuse_a_negative_count_instead_of_returning_nothing() -> None:
    import nmref.testing as kit

    with pytest.raises(ValueError, match="count=-1 must be a non-negative integer"):
        list(kit.generate_cases("tie_free", "float16", -1))
    with pytest.raises(ValueError, match="count=-1 must be a non-negative integer"):
        kit.training_cases(-1)
    with pytest.raises(ValueError, match="dtype='int8' must be one of"):
        kit.training_cases(2, dtype="int8")


def test_round_to_bfloat16_refuses_complex_and_saturates_float64_without_a_warning() -> None:
    import nmref.testing as kit

    with pytest.raises(TypeError, match="values must be a real numeric array"):
        kit.round_to_bfloat16(np.array([1 + 1j]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert kit.round_to_bfloat16(np.array([3.40282357e38]))[0] == np.inf


def test_training_check_reports_string_outputs_as_a_failure() -> None:
    # impl returned ("y", "dx", "dw"): np.asarray(..., dtype=float64) raised inside the kit.
    import nmref.testing as kit

    report = kit.check_sparse_training(
        lambda x, w, dy, n, m: ("y", "dx", "dw"), decay=0.25, raise_on_failure=False
    )
    assert not report.ok and "not a real numeric array" in report.failures[0].message


def test_model_layers_names_a_non_string_model_and_an_unknown_option() -> None:
    import nmsim

    with pytest.raises(TypeError, match="model=None must be a str"):
        nmsim.model_layers(None)  # was AttributeError: 'NoneType' object has no attribute 'strip'
    with pytest.raises(TypeError, match="option 'seq_len' is not one of model 'resnet18'"):
        nmsim.model_layers("resnet18", seq_len=64)
    with pytest.raises(ValueError, match="seq_len=-1 must be a positive integer"):
        nmsim.model_layers("bert-base", seq_len=-1)  # was about layer positions


def test_training_flops_and_estimate_step_name_a_bad_model_or_number() -> None:
    import nmsim

    with pytest.raises(TypeError, match="model must be a built-in model name"):
        nmsim.training_flops(None, "dense")  # was "'NoneType' object is not iterable"
    with pytest.raises(ValueError, match="epochs=10000"):
        nmsim.training_flops("resnet18", "dense", epochs=10**400)  # was OverflowError
    with pytest.raises(TypeError, match="non_gemm_fraction='1' must be a real number"):
        nmsim.estimate_step("resnet18", "dense", "2:4", "h100-sxm", 8, non_gemm_fraction="1")
    with pytest.raises(ValueError, match=r"non_gemm_fraction=.* beyond the float64 range"):
        nmsim.estimate_step("resnet18", "dense", "2:4", "h100-sxm", 8, non_gemm_fraction=10**400)


def test_calibrate_checks_its_settings_and_rows_before_fitting() -> None:
    import nmsim
    from nmsim.perf.corpus import load_corpus

    rows = load_corpus()[1][:5]
    with pytest.raises(ValueError, match="sweeps=-1 must be a positive integer"):
        nmsim.calibrate(rows, sweeps=-1)  # was IndexError deep in the fit
    with pytest.raises(ValueError, match="iterations=0 must be a positive integer"):
        nmsim.calibrate(rows, iterations=0)
    with pytest.raises(TypeError, match="cross_validation='yes' must be True or False"):
        nmsim.calibrate(rows, cross_validation="yes")
    with pytest.raises(TypeError, match=r"rows\[0\] is a int, not a nmsim.perf.corpus.Measurement"):
        nmsim.calibrate([1, 2])  # was AttributeError: 'int' object has no attribute 'library'
    with pytest.raises(ValueError, match="rows is empty"):
        nmsim.calibrate([])


def test_layers_from_torch_names_a_non_module_and_a_sample_it_cannot_run() -> None:
    torch = pytest.importorskip("torch")
    import nmsim

    with pytest.raises(TypeError, match=r"module must be a torch\.nn\.Module, got NoneType"):
        nmsim.layers_from_torch(None, torch.zeros(3, 8))
    with pytest.raises(ValueError, match=r"module\(sample_input\) failed"):
        nmsim.layers_from_torch(torch.nn.Linear(8, 4), torch.zeros(3, 5))  # was RuntimeError


def test_default_layout_names_a_non_integer_ndim() -> None:
    with pytest.raises(TypeError, match="ndim='2' must be an integer"):
        nmref.default_layout("2")  # was "'<' not supported between 'str' and 'int'"


def test_conformance_checks_name_their_own_dtype_and_method_arguments() -> None:
    import nmref.testing as kit

    with pytest.raises(ValueError, match="dtype='float99' must be one of"):
        kit.check_nm_mask(nmref.nm_mask, dtype="float99")  # said dtype_name=
    with pytest.raises(ValueError, match="method='approx' must be one of"):
        kit.check_transposable_mask(nmref.transposable_mask, method="approx")  # was read as greedy


def test_torch_masks_of_a_meta_tensor_say_a_mask_needs_values() -> None:
    torch = pytest.importorskip("torch")
    import nmsim.torch as nt

    meta = torch.empty(4, 8, device="meta")
    with pytest.raises(TypeError, match="scores is a meta tensor"):
        nt.nm_mask(meta, 2, 4)  # was RuntimeError: Tensor.item() cannot be called on meta tensors
    with pytest.raises(TypeError, match="weights is a meta tensor"):
        nt.magnitude_mask(meta, 2, 4)
    assert nt.to_reduction_matrix(meta).device.type == "meta"  # shape-only work still runs


def test_torch_functions_name_a_numpy_argument() -> None:
    pytest.importorskip("torch")
    import nmsim.torch as nt

    array = np.ones((4, 8), np.float32)
    with pytest.raises(TypeError, match=r"weights must be a torch\.Tensor, got ndarray"):
        nt.to_magnitude_keys(array)  # was AttributeError: ... 'is_floating_point'
    with pytest.raises(TypeError, match=r"weight must be a torch\.Tensor, got ndarray"):
        nt.to_reduction_matrix(array)
    with pytest.raises(TypeError, match=r"weight must be a torch\.Tensor, got ndarray"):
        nt.sparse_weight(array)  # was AttributeError: ... 'detach'


def test_torch_layouts_of_zero_size_weights_have_the_nmref_shape() -> None:
    torch = pytest.importorskip("torch")
    import nmsim.torch as nt

    # reshape(out, -1) and reshape(-1, in) are ambiguous without elements: RuntimeError
    assert tuple(nt.to_reduction_matrix(torch.zeros(0, 2, 3), "flat").shape) == (0, 6)
    assert tuple(nt.to_reduction_matrix(torch.zeros(1, 0, 2), "channels").shape) == (2, 0)
    assert nmref.to_reduction_matrix(np.zeros((1, 0, 2)), "channels").shape == (2, 0)


def test_torch_srste_gradient_checks_like_nmref() -> None:
    torch = pytest.importorskip("torch")
    import nmsim.torch as nt

    w = torch.ones(2, 4)
    with pytest.raises(TypeError, match="mask must be a bool tensor"):
        nt.srste_gradient(w, w, torch.ones(2, 4), 0.5)  # a float mask was used as a condition
    with pytest.raises(ValueError, match="must have one shape"):
        nt.srste_gradient(w, w, torch.ones(1, 2, 4, dtype=torch.bool), 0.5)
    with pytest.raises(ValueError, match=r"decay=-1\.0"):
        nt.srste_gradient(w, w, w > 0, -1.0)


def test_sparsify_names_a_non_module_and_a_filter_that_matches_nothing() -> None:
    torch = pytest.importorskip("torch")
    import nmsim.torch as nt

    with pytest.raises(TypeError, match=r"model must be a torch\.nn\.Module, got NoneType"):
        nt.sparsify(None)  # was AttributeError: ... 'named_modules'
    with pytest.raises(TypeError, match="include=3 must be a regular expression"):
        nt.sparsify(torch.nn.Linear(8, 8), include=3)
    with pytest.raises(ValueError, match=r"include='nomatch' matched no nn\.Linear"):
        nt.sparsify(torch.nn.Sequential(torch.nn.Linear(8, 8)), include="nomatch")


def test_golden_implementation_names_a_vector_that_is_not_one() -> None:
    pytest.importorskip("torch")
    import nmsim.torch as nt

    with pytest.raises(TypeError, match=r"vector must be a nmref\.testing\.golden\.GoldenVector"):
        nt.golden_implementation("nm_mask")  # was AttributeError: ... 'function'


def _vectors_folder(tmp_path, manifest_text: str):
    folder = tmp_path / "vectors"
    folder.mkdir()
    (folder / "manifest.json").write_text(manifest_text)
    return folder


@pytest.mark.parametrize(
    ("manifest", "message"),
    [
        ("{", "manifest.json is not UTF-8 JSON"),  # was json's message without the file
        ('{"vectors": 3}', "schema_version=None is not 1"),
        ('{"schema_version": 1, "vectors": 3}', "'vectors' must be a list"),
        (
            '{"schema_version": 1, "vectors": [{"name": "x", "file": "../../etc/passwd",'
            ' "function": "nm_mask", "n": 2, "m": 4, "dtype": "float32", "sha256": "0"}]}',
            "file='../../etc/passwd' must be a plain .npz file name inside the folder",
        ),  # was read: 'outside/../../etc/passwd'
        ('{"schema_version": 1, "vectors": [{"name": 3}]}', "name=3 must be a str"),
    ],
    ids=["not-json", "no-schema", "vectors-not-list", "path-traversal", "wrong-type"],
)
def test_verify_refuses_a_hostile_vectors_folder_in_one_line(tmp_path, capsys, manifest, message):
    from nmsim.cli import main

    folder = _vectors_folder(tmp_path, manifest)
    assert main(["verify", "--vectors", str(folder), "--only", "golden"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0] and "vectors" in err[0], err


def test_verify_on_a_folder_without_a_manifest_is_an_error_not_a_note(tmp_path, capsys):
    from nmsim.cli import main

    assert main(["verify", "--vectors", str(tmp_path), "--only", "golden"]) == 2
    err = capsys.readouterr().err
    # it printed "no manifest.json (not checked)", then "--only 'golden' matches no suite"
    assert "has no manifest.json" in err and "matches no suite" not in err


def test_channel_permutation_objective_of_a_matrix_without_columns_is_zero() -> None:
    # shape (2, 0): reshape(0, -1) of no groups raised "cannot reshape array of size 0"
    empty = np.zeros((2, 0))
    assert nmref.permutation_objective(empty, 1, 2) == 0.0
    assert nmref.count_column_partitions(0, 2**70) == 1  # was OverflowError in factorial
    with pytest.raises(ValueError, match="counting stops at columns <="):
        nmref.count_column_partitions(2**20, 4)


def test_an_unrepresentable_certificate_names_the_scores() -> None:
    # A certificate potential float64 cannot hold: the error was right but named no argument
    # (random-profile fuzzing found it on 3.0 next to 3.7e-240 in one tile, whose certificate
    # has been representable since the kernel solves wide tiles on sticky units). Here both
    # solvers' u_0 = 2 - 0.1 needs 56 significant bits (spec T5).
    scores = np.array([[2.0, 2.0], [0.1, 0.1]])
    with pytest.raises(ValueError, match=r"^scores: a certificate potential is not representable"):
        nmref.transposable_certificate(scores, 1, 2, fill="exact")
    wide = np.zeros((4, 8))
    wide[0, 5] = 3.0
    wide[1, 5] = 3.7e-240
    assert nmref.verify_certificate(wide, *nmref.transposable_certificate(wide, 1, 4), 1, 4)
