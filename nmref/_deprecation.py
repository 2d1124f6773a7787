"""Old import paths that keep working for one release, with a ``DeprecationWarning``.

When a module moves (``nmref.flow`` -> ``nmref.transposable.flow``), the old path is not
left behind as a file: the package registers the move here, in one table, and an import of
the old path returns the new module itself after warning once. Code that was written
against the old path keeps running unchanged; ``python -W error::DeprecationWarning``
finds every such import.

Real modules always win: the finder is consulted after the ordinary path finders, so a
table entry can never hide a file that exists.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
import warnings
from collections.abc import Mapping, Sequence

__all__ = ["MOVED_MODULES", "install_moved_modules"]

#: Every registered move, old dotted path -> new dotted path (read by the tests).
MOVED_MODULES: dict[str, str] = {}

REMOVAL = "the next release"


def _caller_stacklevel() -> int:
    """Stack level of the first frame outside the import machinery (for the warning)."""
    frame = sys._getframe(1)
    level = 1
    while frame is not None:
        name = frame.f_code.co_filename
        if not (name.startswith("<frozen importlib") or name == __file__):
            return level
        frame = frame.f_back
        level += 1
    return level


class _MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Meta-path finder that answers the old paths in :data:`MOVED_MODULES`."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED_MODULES:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        new_name = MOVED_MODULES[spec.name]
        warnings.warn(
            f"{spec.name} has moved to {new_name}; the old path is deprecated and will be "
            f"removed in {REMOVAL}. Import {new_name} instead.",
            DeprecationWarning,
            stacklevel=_caller_stacklevel(),
        )
        # The module object itself, not a copy: attributes set through either name are one.
        return importlib.import_module(new_name)

    def exec_module(self, module: types.ModuleType) -> None:
        # Already executed under its new name by create_module.
        return None


_FINDER = _MovedModuleFinder()


def install_moved_modules(moves: Mapping[str, str]) -> None:
    """Register ``old -> new`` module moves and make sure the finder is installed.

    Parameters
    ----------
    moves : mapping of str to str
        Old dotted module path to the dotted path of the module that replaced it. Both
        must be absolute; the new module must exist.
    """
    MOVED_MODULES.update(moves)
    if _FINDER not in sys.meta_path:
        # Last, so that a real module of the same name always wins.
        sys.meta_path.append(_FINDER)
