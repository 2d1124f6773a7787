"""``python -m nmsim``."""

from nmsim.cli import main

# The guard matters: worker processes started with "spawn" (macOS, Windows)
# import the main module again, and must not rerun the command.
if __name__ == "__main__":
    raise SystemExit(main())
