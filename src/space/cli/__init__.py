"""The `space` command (`space.cli:main`, also `python -m space.cli`)."""

from space.cli.command import main

__all__ = ["main"]
