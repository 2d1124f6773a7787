"""Every moved module still imports under its old path, warns once, and is the new module."""

from __future__ import annotations

import importlib
import sys

import pytest

import nmref  # noqa: F401  (registers nmref's moves)
import nmsim  # registers nmsim's moves
from nmref._deprecation import MOVED_MODULES, install_moved_modules

try:  # the torch path registers its own moves, when torch is installed
    import nmsim.torch  # noqa: F401
except ImportError:
    pass


def _import_fresh(name: str):
    sys.modules.pop(name, None)
    parent, _, child = name.rpartition(".")
    if parent and parent in sys.modules and child in vars(sys.modules[parent]):
        # The parent remembers the submodule as an attribute after the first import.
        delattr(sys.modules[parent], child)
    return importlib.import_module(name)


@pytest.mark.parametrize("old", sorted(MOVED_MODULES))
def test_old_path_warns_and_is_the_new_module(old: str) -> None:
    new = MOVED_MODULES[old]
    if new.startswith("nmsim.torch"):
        pytest.importorskip("torch", reason="the module moved within the torch path")
    with pytest.warns(DeprecationWarning, match=rf"{old} has moved to {new}"):
        module = _import_fresh(old)
    assert module is importlib.import_module(new)


def test_a_real_module_always_wins_over_the_table() -> None:
    install_moved_modules({"nmref.masks": "nmref.layouts"})
    try:
        assert _import_fresh("nmref.masks").__name__ == "nmref.masks"
    finally:
        del MOVED_MODULES["nmref.masks"]


def test_unknown_modules_still_fail_to_import() -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("nmref.no_such_module")
