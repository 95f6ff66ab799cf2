"""The run dir and the process around it: what a run writes and how it stops.

:mod:`.layout` (the run dir's file names, its lock and clearing), :mod:`.atomic` (files that
appear whole or not at all), :mod:`.interrupt` (stop signals, recorded then polled),
:mod:`.chatter` (the profiler's status lines, kept out of the script's output).
"""
