"""The selection networks of up to 16 wires, written out as straight-line code.

The start of the flow kernel (:func:`~nmref.transposable._flow_start._start_lanes`)
finds the ``n``-th largest key of every row and column of a block of tiles with a
selection network (:func:`~nmref.transposable._selection_networks._selection_network`), one
tile per vector lane. Looping over the network's comparators keeps the wires in memory:
two loads and two stores per comparator and lane. For networks of up to 16 wires (tiles
with ``m <= 16``) this module writes each network out as one function whose wires are
local variables, so that they stay in registers while LLVM vectorises across lanes
(the 4:8 start ran 1.4x faster; 16 wires made 8:16 1.07x faster on one core, in blocks of
8 tiles, for about 6 s more compile). Each function returns the same value on its wire as
the loop over the table (tested); only that wire is written back. Larger networks loop.
``scripts/generate_kernels.py`` writes them to ``_generated_networks.py``
(:mod:`~nmref.transposable._codegen`).
"""

from __future__ import annotations

from nmref.transposable._codegen import generated_module
from nmref.transposable._selection_networks import _selection_network

UNROLLED_WIRES = 16

_GENERATED_DOCSTRING = """
Selection networks of up to 16 wires as straight-line code, one function per wire.

Written from :func:`~nmref.transposable._selection_networks._selection_network` by
:mod:`~nmref.transposable._unrolled_networks`, which says why; called by
:func:`~nmref.transposable._flow_start._select_lanes`.
"""


def _select_source(size: int, wire: int) -> str:
    network = _selection_network(size, wire)
    out = [
        "@numba.njit(cache=True, nogil=True)",
        f"def _select_{size}_wire_{wire}(sort):  # pragma: no cover",
        f'    """sort[{wire}, t] = rank {wire} (0: the largest) of the {size} wires sort[:, t]."""',
        "    for t in range(sort.shape[1]):",
    ]
    out += [
        f"        x{k} = sort[{k}, t]" for k in range(size) if k == wire or (network == k).any()
    ]
    for a, b in network:
        out.append(f"        x{a}, x{b} = max(x{a}, x{b}), min(x{a}, x{b})")
    out.append(f"        sort[{wire}, t] = x{wire}")
    return "\n".join(out) + "\n"


def unrolled_select_source() -> str:
    """Source of the module ``_generated_networks``: every unrolled network (sizes 2, 4, 8
    and 16, every wire) and ``_select_unrolled(sort, wire)``, which runs the one for
    ``sort``'s size and ``wire`` and returns whether there was one (the caller loops over
    the table otherwise)."""
    functions = []
    cases = []
    size = 2
    while size <= UNROLLED_WIRES:
        for wire in range(size):
            functions.append(_select_source(size, wire))
            cases.append((size, wire))
        size *= 2
    dispatch = [
        "@numba.njit(cache=True, nogil=True)",
        "def _select_unrolled(sort, wire):  # pragma: no cover",
        '    """Run the unrolled network of ``sort.shape[0]`` wires that decides ``wire``."""',
        "    size = sort.shape[0]",
    ]
    for index, (size, wire) in enumerate(cases):
        keyword = "if" if index == 0 else "elif"
        dispatch.append(f"    {keyword} size == {size} and wire == {wire}:")
        dispatch.append(f"        _select_{size}_wire_{wire}(sort)")
    dispatch.append("    else:")
    dispatch.append("        return False")
    dispatch.append("    return True")
    functions.append("\n".join(dispatch) + "\n")
    return generated_module(
        "nmref.transposable._unrolled_networks.unrolled_select_source",
        _GENERATED_DOCSTRING,
        ["import numba"],
        functions,
    )
