"""The commands: the only code that prints and exits.

:mod:`.launch` (the `advise` executable, before click), :mod:`.cli` (the click commands),
:mod:`.analyze` (`advise analyze`), :mod:`.pipeline` (the flow behind `advise profile`),
:mod:`.ci_gate` (`advise ab`, `advise compare`, `profile --baseline`), :mod:`.outputs` (what a
command writes and prints), :mod:`.cli_exit` (the one-line error exit).
"""
