"""Measure the real speedup of each automatic fix: one plan, one judge, two schedulers.

- :mod:`.plan`: what to measure: one candidate per distinct fix, the values a sweep tries, the
  windows of an in-process round.
- :mod:`.judge`: what the measurements say: the speedup and its interval, whether the passes
  agree, a sweep's winner, a memory budget's fit, the recommended configuration.
- :mod:`.inprocess`: the scheduler that measures fixes as arms of the profiled run, switched at
  step boundaries (the default).
- :mod:`.fresh`: the scheduler that measures each fix in a fresh run of the script (fixes that
  cannot be switched live, ``--fresh-runs``, ``--confirm``).

The schedulers only produce :class:`~.judge.Measurement`\\ s; every verdict is the judge's.
"""
