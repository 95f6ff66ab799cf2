"""A job's ranks: who this process is, how the ranks reach each other, and the job's report.

:mod:`.rank` (this process's rank, from the launcher's variables: a leaf the probe's child reads),
:mod:`.channel` (the job's channel: summaries up, plans down), :mod:`.link` (a rank's tie to the
others during the arms, on its parent's side), :mod:`.rank_summary` (one rank reduced to what the
report needs), :mod:`.report` (rank 0's merge into the job's report).
"""
