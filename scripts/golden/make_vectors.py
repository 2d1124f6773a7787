"""Regenerate the golden vectors: ``python scripts/golden/make_vectors.py``.

Inputs come from the kit's deterministic case families (stored as arrays, so
the vectors never depend on a random generator again); expected outputs come
from the readable reference ``nmref.nm_mask_reference`` and are cross-checked
against the fast path before anything is written. ``--check`` regenerates in
memory and exits 1 if any stored file would change.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
# Package data of nmref.testing, so an installed nmref carries its own oracle.
HERE = ROOT / "nmref" / "testing" / "data" / "vectors"

import nmref  # noqa: E402
from nmref.masks import nm_mask_reference  # noqa: E402
from nmref.testing.cases import generate_cases  # noqa: E402

# (function, kind, dtype, layout, patterns): one vector per pattern.
PLAN = [
    ("nm_mask", "tie_heavy", "float32", None, [(2, 4), (1, 4), (4, 8)]),
    ("nm_mask", "tie_free", "float32", None, [(2, 4), (3, 8)]),
    ("nm_mask", "zeros", "float64", None, [(2, 4)]),
    ("nm_mask", "infinities", "float32", None, [(2, 4), (1, 2)]),
    ("nm_mask", "tie_heavy", "float16", None, [(2, 4), (4, 8)]),
    ("nm_mask", "tie_heavy", "bfloat16", None, [(2, 4), (4, 8)]),
    ("nm_mask", "random", "bfloat16", None, [(2, 4)]),
    ("nm_mask", "infinities", "int64", None, [(2, 4)]),
    ("nm_mask", "tie_heavy", "int8", None, [(7, 40)]),
    ("magnitude_mask", "tie_heavy", "float32", "linear", [(2, 4), (4, 8)]),
    ("magnitude_mask", "infinities", "int8", "linear", [(1, 4)]),
    ("magnitude_mask", "tie_heavy", "bfloat16", "channels", [(2, 4)]),
    ("magnitude_mask", "random", "float16", "channels", [(2, 4)]),
    ("magnitude_mask", "tie_heavy", "float32", "flat", [(2, 4), (4, 8)]),
]


def expected_output(function: str, array: np.ndarray, n: int, m: int, layout: str | None):
    """Reference output by the readable implementation, checked against the fast one."""
    if function == "nm_mask":
        readable = nm_mask_reference(array, n, m)
        fast = nmref.nm_mask(array, n, m)
    else:
        matrix = nmref.to_magnitudes(nmref.to_reduction_matrix(array, layout))
        readable = nmref.from_reduction_matrix(nm_mask_reference(matrix, n, m), array.shape, layout)
        fast = nmref.magnitude_mask(array, n, m, layout=layout)
    if not np.array_equal(readable, fast):
        raise AssertionError(f"readable and fast references disagree on {function} {n}:{m}")
    return readable


# (layout, dtype, kind, patterns): Bi-Mask backward masks for a stored random permutation.
BIMASK_PLAN = [
    ("linear", "float32", "tie_heavy", [(2, 4), (1, 4)]),
    ("linear", "bfloat16", "random", [(2, 4)]),
    ("channels", "float16", "tie_heavy", [(2, 4)]),
]


def bimask_vectors(files: dict[str, bytes], entries: list[dict]) -> None:
    """Bi-Mask backward masks (``nmref.bimask.backward_mask``, rank="survivors")."""
    from nmref.bimask import backward_mask, forward_mask
    from nmref.testing.bimask import bimask_cases

    for layout, dtype, kind, patterns in BIMASK_PLAN:
        pairs = [
            pair
            for pair in bimask_cases(dtype, layout=layout, seed=2026)
            if pair[0].kind == kind and (pair[0].n, pair[0].m) in patterns
        ]
        for pattern in patterns:
            case, permutation = next(p for p in pairs if (p[0].n, p[0].m) == pattern)
            forward = forward_mask(case.scores, case.n, case.m, layout=layout)
            expected = backward_mask(
                case.scores, forward, permutation, case.n, case.m, layout=layout
            )
            name = f"bimask_backward_{kind}_{dtype}_{case.n}of{case.m}_{layout}"
            buffer = io.BytesIO()
            np.savez_compressed(
                buffer, input=case.scores, expected=expected, permutation=permutation
            )
            data = buffer.getvalue()
            files[f"{name}.npz"] = data
            entries.append(
                {
                    "name": name,
                    "file": f"{name}.npz",
                    "function": "bimask.backward_mask",
                    "n": case.n,
                    "m": case.m,
                    "dtype": dtype,
                    "layout": layout,
                    "kind": kind,
                    "shape": list(case.scores.shape),
                    "sha256": hashlib.sha256(data).hexdigest(),
                }
            )


# (method, fill, dtype, kind, patterns): transposable masks (nmref.transposable,
# specs/transposable.md). Inputs are |scores|, except kind "signed_tie_heavy" of the at-most
# fill: the tie-heavy family with its signs, because the at-most fill never keeps a negative
# score (spec T1) and a tight zero is kept where its lines have room (T3).
TRANSPOSABLE_PLAN = [
    ("exact", "exact", "float32", "tie_heavy", [(2, 4), (4, 8)]),
    ("exact", "exact", "float32", "random", [(2, 4), (4, 8)]),
    ("exact", "exact", "bfloat16", "tie_heavy", [(2, 4)]),
    ("greedy", "exact", "float32", "tie_free", [(2, 4), (4, 8)]),
    ("greedy-prune", "exact", "float16", "random", [(2, 4)]),
    ("exact", "at_most", "float32", "tie_heavy", [(2, 4), (4, 8)]),
    ("exact", "at_most", "float32", "random", [(2, 4), (4, 8)]),
    ("exact", "at_most", "float32", "zeros", [(2, 4)]),
    ("exact", "at_most", "bfloat16", "tie_heavy", [(2, 4)]),
    ("exact", "at_most", "float32", "signed_tie_heavy", [(2, 4), (4, 8)]),
    ("exact", "at_most", "float32", "under_filled", [(2, 4), (4, 8)]),
]
# Kind "under_filled": |N(0,1)| of 16 x 64 (seed 2026), where some tiles have a better
# at-most-n mask than every exactly-n one, so that those vectors differ from the exact fill.


def transposable_vectors(files: dict[str, bytes], entries: list[dict]) -> None:
    """Transposable masks (``nmref.transposable.transposable_mask``) of the stored scores.

    At-most vectors are cross-checked against the readable solver
    (``transposable_mask_reference``) before anything is written.
    """
    from collections import namedtuple

    from nmref.testing.transposable import transposable_cases
    from nmref.transposable import transposable_mask, transposable_mask_reference

    Case = namedtuple("Case", "scores n m")

    for method, fill, dtype, kind, patterns in TRANSPOSABLE_PLAN:
        signed = kind.startswith("signed_")
        family = kind.removeprefix("signed_")
        cases = [c for c in transposable_cases(dtype) if c.kind == family]
        for pattern in patterns:
            matching = [c for c in cases if (c.n, c.m) == pattern]
            if signed:
                matching = [c for c in matching if (c.scores < 0).any()]
            if kind == "under_filled":
                rng = np.random.default_rng(2026)
                case = Case(np.abs(rng.standard_normal((16, 64))).astype(dtype), *pattern)
            else:
                case = matching[0]
            scores = case.scores if signed else np.abs(case.scores)
            if kind == "under_filled":
                exact = transposable_mask(scores, case.n, case.m)
                under = transposable_mask(scores, case.n, case.m, fill="at_most")
                assert (exact != under).any(), pattern
            expected = transposable_mask(scores, case.n, case.m, method=method, fill=fill)
            if fill == "at_most":
                readable = transposable_mask_reference(scores, case.n, case.m, fill=fill)
                assert np.array_equal(expected, readable), (kind, pattern)
            prefix = method if fill == "exact" else f"{method}_{fill}"
            name = f"transposable_{prefix}_{kind}_{dtype}_{case.n}of{case.m}"
            buffer = io.BytesIO()
            np.savez_compressed(buffer, input=scores, expected=expected)
            data = buffer.getvalue()
            files[f"{name}.npz"] = data
            function = method if fill == "exact" else f"{method},{fill}"
            entries.append(
                {
                    "name": name,
                    "file": f"{name}.npz",
                    "function": f"transposable_mask[{function}]",
                    "n": case.n,
                    "m": case.m,
                    "dtype": dtype,
                    "layout": None,
                    "kind": kind,
                    "shape": list(scores.shape),
                    "sha256": hashlib.sha256(data).hexdigest(),
                }
            )


def build() -> tuple[dict[str, bytes], dict]:
    """All vector files (name -> bytes) and the manifest."""
    files: dict[str, bytes] = {}
    entries = []
    for function, kind, dtype, layout, patterns in PLAN:
        cases = generate_cases(
            kind, dtype, len(patterns), seed=2026, layout=layout, patterns=tuple(patterns)
        )
        for case in cases:
            name = f"{function}_{kind}_{dtype}_{case.n}of{case.m}" + (
                f"_{layout}" if layout and layout != "linear" else ""
            )
            expected = expected_output(function, case.scores, case.n, case.m, layout)
            buffer = io.BytesIO()
            np.savez_compressed(buffer, input=case.scores, expected=expected)
            data = buffer.getvalue()
            files[f"{name}.npz"] = data
            entries.append(
                {
                    "name": name,
                    "file": f"{name}.npz",
                    "function": function,
                    "n": case.n,
                    "m": case.m,
                    "dtype": dtype,
                    "layout": layout,
                    "kind": kind,
                    "shape": list(case.scores.shape),
                    "sha256": hashlib.sha256(data).hexdigest(),
                }
            )
    bimask_vectors(files, entries)
    transposable_vectors(files, entries)
    manifest = {
        "schema_version": 1,
        "generator": "scripts/golden/make_vectors.py",
        "expected_by": (
            "masks: nmref.nm_mask_reference (readable), equal to the fast path; "
            "Bi-Mask: nmref.bimask.backward_mask (forward mask by nmref.bimask.forward_mask); "
            "transposable: nmref.transposable.transposable_mask of the stored scores "
            "(|scores| except the signed at-most vectors; at most n: equal to the readable "
            "transposable_mask_reference)"
        ),
        "note": "bfloat16 inputs are stored as their exact float32 upcast",
        "vectors": entries,
    }
    return files, manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    args = parser.parse_args(argv)
    files, manifest = build()
    manifest_text = json.dumps(manifest, indent=1) + "\n"
    if args.check:
        stale = [name for name, data in files.items() if (HERE / name).read_bytes() != data]
        if (HERE / "manifest.json").read_text() != manifest_text:
            stale.append("manifest.json")
        print("\n".join(stale) if stale else f"{len(files)} vectors up to date")
        return 1 if stale else 0
    for name, data in files.items():
        (HERE / name).write_bytes(data)
    (HERE / "manifest.json").write_text(manifest_text)
    print(f"wrote {len(files)} vectors and manifest.json to {HERE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
