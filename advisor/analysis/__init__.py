"""The analysis: what is measured and derived from a run's steps, samples and trace.

:mod:`.metrics` (throughput, breakdown, utilization, the measured window), :mod:`.stats`
(bootstrap intervals and tests), :mod:`.mfu` (model FLOPs utilization, peaks, roofline),
:mod:`.memory` (sizes, the peak's breakdown, sharding estimates), :mod:`.ranks` (a multi-rank
job), :mod:`.temporal` (GPU time in HTA's terms), :mod:`.sources` (where in the user's code).
"""
