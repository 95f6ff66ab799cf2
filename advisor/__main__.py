"""`python -m advisor` is the `advise` command."""

from advisor.cli import entry

entry()
