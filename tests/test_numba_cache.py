"""Numba's cache and jitted callees in other files (``nmref/transposable/_codegen.py`` says why).

A kernel compiled with ``cache=True`` is stored under a stamp of its own source file, but
its machine code holds every jitted function it calls. So a callee from another file must
be covered by a current digest of that file in the caller's module (``CACHE_DEPENDS``,
written by ``scripts/generate_kernels.py``); otherwise a change to the callee alone would
leave the caller's cached kernel stale.
"""

from __future__ import annotations

import importlib
import os
import sys
import types
from collections.abc import Iterable, Iterator
from pathlib import Path

from numba.core.caching import NullCache
from numba.core.dispatcher import Dispatcher

import nmref
import nmsim
from nmref.transposable._codegen import file_digest

PACKAGES = (nmref, nmsim)


def _kernel_modules(packages: Iterable[types.ModuleType]) -> list[str]:
    """The modules of ``packages`` whose source asks Numba for a cache."""
    names = []
    for package in packages:
        root = Path(package.__file__).parent
        for path in sorted(root.rglob("*.py")):
            if "cache=True" in path.read_text(encoding="utf-8"):
                parts = path.relative_to(root.parent).with_suffix("").parts
                names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def _cached_kernels(module_names: Iterable[str]) -> Iterator[Dispatcher]:
    """Every dispatcher with ``cache=True`` defined in the named modules."""
    for name in module_names:
        module = importlib.import_module(name)
        for value in vars(module).values():
            if (
                isinstance(value, Dispatcher)
                and value.py_func.__module__ == name
                and not isinstance(value._cache, NullCache)
            ):
                yield value


def _code_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            names |= _code_names(constant)
    return names


def _jitted_callees(caller: Dispatcher) -> list[Dispatcher]:
    """The jitted functions the caller's code names: its module's globals, and attributes
    of modules it imported (``kernels.masked_tiles``)."""
    names = sorted(_code_names(caller.py_func.__code__))
    namespace = caller.py_func.__globals__
    callees = []
    for name in names:
        value = namespace.get(name)
        if isinstance(value, Dispatcher):
            callees.append(value)
        elif isinstance(value, types.ModuleType):
            members = (getattr(value, attribute, None) for attribute in names)
            callees += [member for member in members if isinstance(member, Dispatcher)]
    return callees


def _source_file(dispatcher: Dispatcher) -> Path:
    return Path(dispatcher.py_func.__code__.co_filename).resolve()


def uncovered_callees(kernels: Iterable[Dispatcher]) -> list[str]:
    """Every call, on any path from a cached kernel, into another file that the caller's
    ``CACHE_DEPENDS`` does not cover with a current digest, as one line each."""
    problems = []
    seen: set[int] = set()
    stack = list(kernels)
    while stack:
        caller = stack.pop()
        if id(caller) in seen:
            continue
        seen.add(id(caller))
        caller_file = _source_file(caller)
        declared = getattr(sys.modules[caller.py_func.__module__], "CACHE_DEPENDS", {})
        for callee in _jitted_callees(caller):
            stack.append(callee)
            callee_file = _source_file(callee)
            if callee_file == caller_file:
                continue
            name = Path(os.path.relpath(callee_file, caller_file.parent)).as_posix()
            where = f"{caller.__name__} ({caller_file.name}) calls {callee.__name__} from {name}"
            if name not in declared:
                problems.append(f"{where}, which its CACHE_DEPENDS does not list")
            elif declared[name] != file_digest(callee_file.read_bytes()):
                problems.append(f"{where}, whose digest in CACHE_DEPENDS is out of date")
    return problems


def test_every_cached_kernel_covers_the_files_of_its_jitted_callees():
    """Every ``cache=True`` kernel in nmref and nmsim, and every jitted function they reach,
    calls into other files only through a current ``CACHE_DEPENDS`` digest (rerun
    ``python scripts/generate_kernels.py`` when one is out of date)."""
    modules = _kernel_modules(PACKAGES)
    assert "nmref.transposable._flow_kernels" in modules
    kernels = list(_cached_kernels(modules))
    assert len(kernels) > 50
    assert uncovered_callees(kernels) == []


def test_the_cache_check_rejects_missing_and_stale_digests(tmp_path, monkeypatch):
    """The checker has power: a cached caller whose callee lives in another file fails
    without a digest of that file and with an out-of-date one, and passes with a current
    one; a callee reached through an uncached function is checked too."""
    package = tmp_path / "cache_check_case"
    package.mkdir()
    (package / "__init__.py").write_text("")
    callee_source = "import numba\n\n\n@numba.njit(cache=True)\ndef leaf(x):\n    return x + 1\n"
    (package / "callee.py").write_text(callee_source)
    middle = (
        "import numba\n\nfrom cache_check_case import callee\n\n{depends}\n\n"
        "@numba.njit\ndef middle(x):\n    return callee.leaf(x)\n"
    )
    caller = (
        "import numba\n\nfrom cache_check_case.middle import middle\n\n"
        "CACHE_DEPENDS = {{'middle.py': '{digest}'}}\n\n\n"
        "@numba.njit(cache=True)\ndef kernel(x):\n    return middle(x) * 2\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # each variant is imported afresh

    def problems(depends: str) -> list[str]:
        (package / "middle.py").write_text(middle.format(depends=depends))
        digest = file_digest((package / "middle.py").read_bytes())
        (package / "caller.py").write_text(caller.format(digest=digest))
        for name in [name for name in sys.modules if name.startswith("cache_check_case")]:
            monkeypatch.delitem(sys.modules, name)
        return uncovered_callees(_cached_kernels(["cache_check_case.caller"]))

    current = file_digest(callee_source.encode())
    assert problems(f"CACHE_DEPENDS = {{'callee.py': '{current}'}}") == []
    (missing,) = problems("")
    assert missing.startswith("middle (middle.py) calls leaf from callee.py")
    assert "does not list" in missing
    (stale,) = problems("CACHE_DEPENDS = {'callee.py': 'sha256:0'}")
    assert "out of date" in stale
