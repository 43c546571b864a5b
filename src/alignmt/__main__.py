"""`python -m alignmt` is the `alignmt` command."""

from alignmt.cli import main

raise SystemExit(main())
