"""`python -m advisor` is the `advise` command."""

from advisor.commands.launch import main

main()
