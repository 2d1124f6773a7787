"""``python -m nmsim``."""

from nmsim.cli import main

raise SystemExit(main())
