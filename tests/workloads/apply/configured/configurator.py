# nanoGPT's configurator.py, as its train.py exec()s it: each `--key=value` argument overrides the
# global `key` of the script (a literal where it parses as one, else the string).
import sys
from ast import literal_eval

for arg in sys.argv[1:]:
    assert arg.startswith("--") and "=" in arg, arg
    key, val = arg[2:].split("=", 1)
    assert key in globals(), f"unknown config key: {key}"
    try:
        attempt = literal_eval(val)
    except (SyntaxError, ValueError):
        attempt = val
    assert type(attempt) is type(globals()[key]), f"{key}: {type(attempt)} is not {type(globals()[key])}"
    print(f"Overriding: {key} = {attempt}")
    globals()[key] = attempt
