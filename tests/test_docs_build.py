"""The documentation site's own machinery, on a one-page build: formulas render without the
network, and a public constant shows its ``#:`` comment, not its type's docstring."""

from __future__ import annotations

import ast
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"

pytestmark = pytest.mark.slow  # a Sphinx build in a subprocess


def _site_extensions() -> list[str]:
    tree = ast.parse((DOCS / "conf.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "extensions" for target in node.targets
        ):
            return list(ast.literal_eval(node.value))
    raise AssertionError("docs/conf.py assigns no extensions list")


def test_the_site_uses_offline_mathjax_and_the_constants_extension():
    extensions = _site_extensions()
    assert "sphinx.ext.mathjax" in extensions
    assert "sphinx-mathjax-offline" in extensions
    assert "datadocs" in extensions


def test_a_page_renders_math_offline_and_documents_layouts(tmp_path):
    # Issue 37: MathJax came from a CDN (12 API pages showed raw LaTeX offline), and
    # nmref.LAYOUTS was documented as "Built-in immutable sequence.".
    pytest.importorskip("sphinx")
    if importlib.util.find_spec("sphinx-mathjax-offline") is None:
        pytest.skip("sphinx-mathjax-offline is not installed (the docs extra)")
    source = tmp_path / "src"
    source.mkdir()
    (source / "conf.py").write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(DOCS / '_ext')!r})\n"
        "extensions = ['sphinx.ext.autodoc', 'sphinx.ext.mathjax', "
        "'sphinx-mathjax-offline', 'datadocs']\n"
    )
    (source / "index.rst").write_text(
        "Page\n====\n\n.. math:: \\sum_i w_i^2\n\n.. autodata:: nmref.LAYOUTS\n"
    )
    out = tmp_path / "html"
    done = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "-q", "-b", "html", str(source), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    page = (out / "index.html").read_text()
    assert "Built-in immutable sequence" not in page
    assert "The weight layouts of" in page
    scripts = re.findall(r"<script[^>]*src=\"([^\"]+)\"", page)
    mathjax = [src for src in scripts if "mathjax" in src.lower()]
    assert mathjax, scripts
    assert not any(src.startswith(("http:", "https:", "//")) for src in scripts), scripts
    for src in mathjax:
        assert (out / src.split("?")[0]).is_file(), src
