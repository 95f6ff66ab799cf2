"""The command line that starts a probed process: the runner's child, and a rank a framework
re-executes as a new command (see :mod:`advisor.probe.spawned`). Constants only: the runner
imports this without importing torch."""

# `python -c` puts the cwd first on sys.path; plain `python train.py` does not, so drop it
# before torch is imported (a user's ./timeit.py must not shadow the stdlib's). The spawn hook
# goes in first: ranks the script starts itself are probed too.
BOOTSTRAP = ("import sys; sys.path.pop(0); from advisor.probe import spawned; spawned.install(sys.argv[1]); "
             "from advisor.probe.bootstrap import main; sys.exit(main(sys.argv[1]))")
