"""Every public function of nmref, nmref.testing, nmsim and nmsim.torch is fuzzed (issue 20).

A function counts as covered when a module of ``tests/fuzz`` calls it through its public
name (``nmref.nm_mask``, ``kit.check_nm_mask``, ``nt.sparsify``, ...) or lists it in one of
its call tables. Adding a public function without adding it to the fuzz suite fails here.
"""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import pytest

MODULES = {"nmref": "nmref", "nmref.testing": "kit", "nmsim": "nmsim", "nmsim.torch": "nt"}
HERE = Path(__file__).parent


def public_functions(module_name: str) -> list[str]:
    module = importlib.import_module(module_name)
    return sorted(
        name
        for name in module.__all__
        if inspect.isfunction(getattr(module, name)) or inspect.isbuiltin(getattr(module, name))
    )


def fuzz_text() -> str:
    return "\n".join(path.read_text() for path in sorted(HERE.glob("test_fuzz_*.py")))


@pytest.mark.parametrize("module_name", sorted(MODULES))
def test_every_public_function_is_fuzzed(module_name: str) -> None:
    if module_name == "nmsim.torch":
        pytest.importorskip("torch")
    text = fuzz_text()
    aliases = {module_name, MODULES[module_name], module_name.split(".")[-1]}
    missing = []
    for name in public_functions(module_name):
        called = any(re.search(rf"\b{re.escape(alias)}\.{name}\b", text) for alias in aliases)
        imported = re.search(rf"from {re.escape(module_name)} import [^\n]*\b{name}\b", text)
        listed = re.search(rf'"{name}": \(', text)  # a call table entry
        if not (called or imported or listed):
            missing.append(name)
    assert not missing, f"{module_name}: public functions without a fuzz test: {missing}"
