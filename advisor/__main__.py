"""`python -m advisor` is the `advise` command."""

from advisor.cli import main

main(prog_name="advise")
