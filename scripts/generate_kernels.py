"""Write the generated kernel files and the cache digests (nmref/transposable/_codegen.py).

Run from the repository root after changing a writer module or a kernel file that
others call::

    python scripts/generate_kernels.py          # rewrite what is out of date
    python scripts/generate_kernels.py --check  # exit 1 if anything is out of date

Two kinds of text are written: whole generated modules (``GENERATED``: file -> writer),
and the ``CACHE_DEPENDS`` digests of every kernel file in ``nmref`` and ``nmsim`` that
has one, callee files first, so that one run brings every digest up to date.
``tests/test_transposable.py`` runs the same check.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nmref.transposable import _codegen, _meet_in_middle, _unrolled_networks  # noqa: E402

PACKAGES = ("nmref", "nmsim")
TRANSPOSABLE = ROOT / "nmref" / "transposable"
# Generated module -> the function that writes it.
GENERATED: dict[Path, Callable[[], str]] = {
    TRANSPOSABLE / "_generated_meet_in_middle.py": _meet_in_middle.best_of_block_source,
    TRANSPOSABLE / "_generated_networks.py": _unrolled_networks.unrolled_select_source,
}


def expected_files() -> dict[Path, str]:
    """Every file this script writes -> the text it should hold today."""
    files = {path: writer() for path, writer in GENERATED.items()}
    dependents = {}  # kernel files with CACHE_DEPENDS -> their text before the update
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            text = files.get(path) or path.read_text(encoding="utf-8")
            if _codegen.CACHE_DEPENDS_NAME in text and _codegen.cache_depends(text):
                dependents[path] = text
    final: dict[Path, bytes] = {}

    def content(path: Path, chain: tuple[Path, ...]) -> bytes:
        """The file's bytes once its own digests, and those of its callees, are current."""
        if path in chain:
            raise RuntimeError(f"{path}: CACHE_DEPENDS files depend on each other in a cycle")
        if path not in final:
            if path in dependents:
                text = dependents[path]
                callees = {
                    name: content((path.parent / name).resolve(), (*chain, path))
                    for name in _codegen.cache_depends(text)
                }
                digests = {name: _codegen.file_digest(data) for name, data in callees.items()}
                files[path] = _codegen.with_cache_depends(text, digests)
            final[path] = files[path].encode("utf-8") if path in files else path.read_bytes()
        return final[path]

    for path in dependents:
        content(path, ())
    return files


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check, write nothing")
    args = parser.parse_args()
    stale = 0
    for path, text in expected_files().items():
        name = path.relative_to(ROOT)
        if path.exists() and path.read_text(encoding="utf-8") == text:
            print(f"{name}: up to date")
            continue
        if args.check:
            print(f"{name}: out of date (run python scripts/generate_kernels.py)")
            stale += 1
            continue
        path.write_text(text, encoding="utf-8")
        print(f"{name}: rewritten")
    return 1 if stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
