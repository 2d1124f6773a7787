"""Paste the generated straight-line code into the kernel files (nmref/transposable/_codegen.py).

Run from the repository root after changing a writer module::

    python scripts/generate_kernels.py          # rewrite the regions between the markers
    python scripts/generate_kernels.py --check  # exit 1 if a region is out of date

``tests/test_transposable.py`` runs the same check.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nmref.transposable import _codegen  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check, write nothing")
    args = parser.parse_args()
    stale = 0
    for module, writer in _codegen.regions().items():
        path = ROOT / "nmref" / "transposable" / f"{module}.py"
        text = path.read_text()
        code = writer()
        if _codegen.generated_region(text) == code:
            print(f"{path.relative_to(ROOT)}: generated code is up to date")
            continue
        if args.check:
            print(f"{path.relative_to(ROOT)}: generated code is out of date")
            stale += 1
            continue
        path.write_text(_codegen.with_generated_region(text, code))
        print(f"{path.relative_to(ROOT)}: generated code rewritten")
    return 1 if stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
