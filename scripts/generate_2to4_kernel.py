"""Write the generated 2:4 meet-in-the-middle code into ``_enumeration_kernels.py``.

Run from the repository root after changing :mod:`nmref.transposable._meet_in_middle`::

    python scripts/generate_2to4_kernel.py          # rewrite the region between the markers
    python scripts/generate_2to4_kernel.py --check  # exit 1 if the region is out of date

``tests/test_transposable.py`` runs the check too.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nmref.transposable import _meet_in_middle  # noqa: E402

KERNELS = ROOT / "nmref" / "transposable" / "_enumeration_kernels.py"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check, write nothing")
    args = parser.parse_args()
    text = KERNELS.read_text()
    if _meet_in_middle.generated_region(text) == _meet_in_middle.best_of_block_source():
        print(f"{KERNELS.relative_to(ROOT)}: generated code is up to date")
        return 0
    if args.check:
        print(f"{KERNELS.relative_to(ROOT)}: generated code is out of date; run {__file__}")
        return 1
    KERNELS.write_text(_meet_in_middle.with_generated_region(text))
    print(f"{KERNELS.relative_to(ROOT)}: generated code rewritten")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
