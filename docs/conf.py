"""Sphinx configuration for the nmref / nmsim documentation site.

The API reference is generated at build time from each package's ``__all__`` (``_write_api_pages``),
so a function added to a public namespace is documented without editing these files, and the
Markdown specs are rendered by ``_ext/mdspecs.py`` (myst-parser is not a dependency).
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE / "_ext"))
os.environ.setdefault("MPLBACKEND", "Agg")

import nmref  # noqa: E402

project = "nmref / nmsim"
author = "nmref developers"
copyright = "nmref developers (MIT)"
release = nmref.__version__
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.doctest",
    "sphinx.ext.intersphinx",
    "sphinx.ext.mathjax",
    # MathJax from the package, copied into _static/: formulas render offline and in CI's
    # artifact (sphinx.ext.mathjax alone loads it from a CDN).
    "sphinx-mathjax-offline",
    "numpydoc",
    "sphinx_gallery.gen_gallery",
    "mdspecs",
    "datadocs",
]

# Internal references are the site's link check: every :func:/:class:/:doc: target must resolve.
nitpicky = True
# Types named in docstrings that are not objects of this project or of the documented libraries.
nitpick_ignore_regex = [
    (r"py:.*", r"(optional|default.*|array[-_ ]like|array|ndarray of .*|shape .*|sequence .*)"),
    (r"py:.*", r"(np|numpy|torch|numba|npt)\..*"),
    (r"py:.*", r"(Tile|ArrayLike|NDArray|DTypeLike|Path|PathLike|Callable|Sequence)"),
    (r"py:.*", r"(Iterable|Iterator|Mapping)"),
    (r"py:.*", r"(int|float|bool|str|bytes|dict|list|tuple|None|callable|object)( .*)?"),
    (r"py:.*", r"(iterable|mapping)( .*)?"),
    (r"py:.*", r".*\b(of|or|and)\b.*"),
    (r"py:.*", r"[{}'\"].*"),
    (r"py:.*", r"_.*|.*\._.*"),
]

intersphinx_mapping: dict = {}  # the build must work offline

templates_path = ["_templates"]
exclude_patterns = ["_build", "examples", "auto_examples/*.ipynb", "auto_examples/*.py"]
html_theme = "pydata_sphinx_theme"
html_title = f"nmref / nmsim {release}"
html_static_path = ["_static"]
html_css_files = ["specs.css"]
html_theme_options = {
    "navigation_depth": 2,
    "show_toc_level": 2,
    "secondary_sidebar_items": ["page-toc"],
}
html_sidebars = {"**": ["sidebar-nav-bs"]}
html_last_updated_fmt = None
html_show_sourcelink = False

autosummary_generate = True
autosummary_imported_members = True
autodoc_typehints = "none"  # numpydoc's Parameters sections carry the types
autodoc_default_options = {"members": False}
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False

doctest_global_setup = "import numpy as np\nimport nmref\n"
# Docstring examples run under pytest --doctest-modules; the doctest builder runs the pages'.
doctest_test_doctest_blocks = ""

sphinx_gallery_conf = {
    "examples_dirs": "examples",
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/plot_",
    "download_all_examples": False,
    "remove_config_comments": True,
    "within_subsection_order": "FileNameSortKey",
    "abort_on_example_error": True,
    "matplotlib_animations": False,
    "image_scrapers": ("matplotlib",),
    "reset_modules": ("matplotlib",),
    "capture_repr": (),
    "show_memory": False,
    "doc_module": ("nmref", "nmsim"),
    "backreferences_dir": None,
}

# The documented namespaces: page name, module, one-line description.
API_MODULES = [
    ("nmref", "nmref", "Reference algorithms: 1-D and transposable N:M masks, SR-STE, BAME."),
    ("nmref.adaprune", "nmref.adaprune", "AdaPrune: layers to N:M, refitted on calibration data."),
    ("nmref.bimask", "nmref.bimask", "Bi-Mask: forward and backward masks, permutation search."),
    ("nmref.explain", "nmref.explain", "Step-by-step traces in plain words (``nmref explain``)."),
    ("nmref.testing", "nmref.testing", "The conformance kit for other implementations."),
    ("nmsim", "nmsim", "Hardware model: GPUs, GEMM time, training FLOPs, 2:4 formats."),
    ("nmsim.torch", "nmsim.torch", "The torch path: the same bits on any torch device."),
    ("nmsim.encoders", "nmsim.encoders", "The all-MiniLM-L6-v2 encoder in NumPy (AdaPrune)."),
]


def _public_names(module_name: str) -> list[str]:
    """Return the documented names of a module: its ``__all__`` without dunders."""
    module = importlib.import_module(module_name)
    names = getattr(module, "__all__", None)
    if names is None:
        raise RuntimeError(f"{module_name} has no __all__: the API pages are built from it")
    return [name for name in names if not name.startswith("__")]


def _write_api_pages() -> None:
    """Write ``api/<module>.rst`` with one autosummary entry per name in ``__all__``."""
    api = HERE / "api"
    api.mkdir(exist_ok=True)
    for page, module_name, summary in API_MODULES:
        names = _public_names(module_name)
        title = f"``{module_name}``"
        lines = [
            ".. This file is generated by docs/conf.py from the module's __all__; do not edit.",
            "",
            title,
            "=" * len(title),
            "",
            summary,
            "",
            f".. automodule:: {module_name}",
            "   :no-members:",
            "",
            f".. currentmodule:: {module_name}",
            "",
            ".. autosummary::",
            "   :toctree: generated/",
            "",
        ]
        lines += [f"   {name}" for name in sorted(names, key=str.lower)]
        text = "\n".join(lines) + "\n"
        path = api / f"{page}.rst"
        # Rewriting an unchanged page would make every incremental build re-read it.
        if not path.exists() or path.read_text() != text:
            path.write_text(text)

    index = [
        ".. This file is generated by docs/conf.py; do not edit.",
        "",
        "API reference",
        "=============",
        "",
        "Every public name of each namespace, generated from its ``__all__`` at build time.",
        "",
        ".. toctree::",
        "   :maxdepth: 1",
        "",
    ]
    index += [f"   {page}" for page, _, _ in API_MODULES]
    text = "\n".join(index) + "\n"
    path = api / "index.rst"
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


_write_api_pages()

mdspecs_source = str(ROOT / "specs")


def _escape_star_args(app, what, name, obj, options, lines) -> None:
    """Escape ``*kernel`` in shape descriptions (``shape (out, in, *kernel)``) for reST."""
    for index, line in enumerate(lines):
        lines[index] = re.sub(r"(?<![`*\\])\*(?=[a-z_]+\))", r"\\*", line)


def _documented_objects() -> dict[int, str]:
    """Map each documented object (by identity) to its documented full name."""
    documented = {}
    for _, module_name, _ in API_MODULES:
        module = importlib.import_module(module_name)
        documented.setdefault(id(module), module_name)
        for name in _public_names(module_name):
            documented.setdefault(id(getattr(module, name)), f"{module_name}.{name}")
    return documented


def _import_target(target: str, context: list[str]):
    """Return the object ``target`` names, looked up from each module in ``context``, or None."""
    candidates = [target] + [f"{module}.{target}" for module in context]
    for dotted in candidates:
        parts = dotted.split(".")
        for cut in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            try:
                for attribute in parts[cut:]:
                    obj = getattr(obj, attribute)
            except AttributeError:
                break
            return obj
    return None


def _resolve_alias(app, env, node, contnode):
    """Resolve a reference to an implementation path (``nmref.srste.srste_gradient``).

    Docstrings name objects where they are defined; the site documents them where they are
    public (``nmref.srste_gradient``). A target that imports to a documented object links there;
    one that imports to a real but undocumented helper is shown as code without a link; a target
    that does not import at all stays a warning, which ``-W`` makes an error: that is the site's
    check of its internal references.
    """
    if node.get("refdomain") != "py":
        return None
    target = node["reftarget"]
    context = [node.get("py:module") or ""]
    source = str(node.source or "")
    match = re.search(r"docstring of ([\w.]+)", source)
    if match:
        parts = match.group(1).split(".")
        context += [".".join(parts[:cut]) for cut in range(len(parts) - 1, 0, -1)]
    obj = _import_target(target, [c for c in context if c])
    if obj is None:
        return None
    documented = _DOCUMENTED.get(id(obj))
    if documented is None and node["reftype"] == "mod":
        # A submodule of a documented package links to the package's page.
        while "." in target and documented is None:
            target = target.rsplit(".", 1)[0]
            documented = target if any(m == target for _, m, _ in API_MODULES) else None
    domain = env.get_domain("py")
    if documented is not None:
        for reftype in ("obj", "mod"):
            resolved = domain.resolve_xref(
                env, node["refdoc"], app.builder, reftype, documented, node, contnode
            )
            if resolved is not None:
                return resolved
    return contnode


_DOCUMENTED = _documented_objects()


def setup(app) -> None:
    app.connect("autodoc-process-docstring", _escape_star_args)
    app.connect("missing-reference", _resolve_alias)
