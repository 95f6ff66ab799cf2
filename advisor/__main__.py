"""`python -m advisor` is the `advise` command."""

from advisor.launch import main

main()
