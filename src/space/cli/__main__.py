"""`python -m space.cli ...`: the `space` command."""

from space.cli.command import main

raise SystemExit(main())
