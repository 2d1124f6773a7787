"""``python -m nmref``."""

from nmref.cli import main

raise SystemExit(main())
