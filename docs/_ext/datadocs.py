"""Sphinx extension: a public constant is documented by its ``#:`` comment where it is defined.

autodoc reads ``#:`` comments only in the module being documented. The API pages document
``nmref.LAYOUTS``, defined in ``nmref._validation`` and imported into ``nmref``; autodoc then
falls back to the docstring of the value's type, and a tuple reads "Built-in immutable
sequence.". This extension finds the comment in the module of the package that defines the
name (the same object under the same name) and uses it; a public constant without one is a
warning, which ``-W`` makes an error.
"""

from __future__ import annotations

import sys

from sphinx.pycode import ModuleAnalyzer, PycodeError
from sphinx.util import logging

PACKAGES = ("nmref", "nmsim")

logger = logging.getLogger(__name__)


def doc_comment(full_name: str, obj: object) -> list[str] | None:
    """The ``#:`` comment of ``full_name`` (``package.NAME``) where ``obj`` is defined."""
    name = full_name.rsplit(".", 1)[-1]
    for module_name, module in sorted(sys.modules.items()):
        if module is None or not module_name.startswith(tuple(f"{p}." for p in PACKAGES)):
            continue
        if module_name.split(".")[0] != full_name.split(".")[0]:
            continue
        if getattr(module, name, None) is not obj:
            continue
        try:
            attributes = ModuleAnalyzer.for_module(module_name).find_attr_docs()
        except PycodeError:
            continue
        lines = attributes.get(("", name))
        if lines and any(line.strip() for line in lines):
            return [line for line in lines if line is not None]
    return None


def _data_docstring(app, what, name, obj, options, lines) -> None:
    if what != "data":
        return
    inherited = " ".join((type(obj).__doc__ or "").split())
    own = " ".join(" ".join(lines).split())
    if own and not inherited.startswith(own):
        return  # a comment in the documented module itself
    comment = doc_comment(name, obj)
    if comment is None:
        logger.warning(
            "%s has no '#:' doc comment where it is defined (its type's docstring would show)",
            name,
        )
        return
    lines[:] = [*comment, ""]


def setup(app) -> dict:
    app.connect("autodoc-process-docstring", _data_docstring)
    return {"parallel_read_safe": True}
