#!/usr/bin/env bash
# Make .gpu-truth/ (ignored by git): what the GPU truth harness needs on a machine that reaches
# nothing outside it and has torch but not all of advise's dependencies: advise's wheel, the
# cp312 wheels its image lacks (msgspec, isal, libcst and its pyyaml; jsonschema and what it needs,
# for the suite's GPU tests: its schema fixture checks every report; nbformat, IPython and what they
# need, for `advise profile notebook.ipynb`), and the GPU cases' sources
# and data, prepared. Then one device call (carry .gpu-truth): benchmarks/truth/gpu_call.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
B=.gpu-truth
rm -rf "$B/whl"
mkdir -p "$B/whl"
python -m build --wheel --outdir "$B/whl" . >/dev/null
python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$B/whl" "msgspec>=0.18" "isal>=1.6" \
  "jsonschema>=4.18" jsonschema-specifications referencing rpds-py attrs "libcst>=1.1" pyyaml "ruamel.yaml>=0.18" \
  "nbformat>=5.9" fastjsonschema jupyter_core traitlets platformdirs "ipython>=8.10" ipython_pygments_lexers \
  decorator jedi parso matplotlib-inline pexpect ptyprocess prompt_toolkit wcwidth pygments stack_data asttokens \
  executing pure_eval
python benchmarks/truth/run.py --gpu --prepare-only --work "$B/work"
rm -rf "$B"/work/git
du -sh "$B"
