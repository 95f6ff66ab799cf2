"""The CI gate's work, under its commands (:mod:`advisor.commands.ci_gate`).

:mod:`.ab` (the interleaved rounds of `advise ab`) and :mod:`.sequential` (their decision),
:mod:`.compare` (two report.json compared), :mod:`.opdiff` (where the time went: the slower ops),
:mod:`.fingerprint` (the environment a run's figures belong to).
"""
