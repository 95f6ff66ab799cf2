#!/usr/bin/env bash
# The one device call (see README.md's "On a GPU"), from the repository root on the lent machine,
# carrying .gpu-truth (bundle.sh): advise's wheels installed aside, then the suite's GPU tests
# first (they must pass; they are the shorter), then the truth harness's GPU cases in the time
# left. Everything it prints goes to $OUT; the whole call stays inside BUDGET_S (default 540 s).
#   [BUDGET_S=540] [TESTS_S=300 (0: no tests)] [REPEATS=2] [VARIANTS=bf16,tf32,...] [ONLY=imagenet-fed]
#   [ADVISE_BUDGET=150 (advise's --time-budget in each case: its run must fit the call)]
#   [ADVISE_ARGS="--select MEM001" (more of advise's options, each word passed on)]
#   bash benchmarks/truth/gpu_call.sh
set -u
: "${OUT:?set OUT to the output folder of the device call}"
budget=${BUDGET_S:-540}
start=$(date +%s)
left() { echo $(( budget - ($(date +%s) - start) )); }
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu-truth/whl/*.whl \
  > "$OUT/install.log" 2>&1 || { echo "gpu_call: the bundled wheels did not install (see install.log)"; exit 3; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
tests_s=${TESTS_S:-$(( $(left) * 6 / 10 ))}
if [ "$tests_s" -gt 0 ]; then  # -v: each test's verdict is in the log as it ends, even if the cap cuts the run
  timeout "$tests_s" python3 -m pytest -v --durations=0 -p no:cacheprovider -rs --basetemp=/tmp/gpu-tests \
    tests/test_gpu_e2e.py tests/test_gpu_faults.py > "$OUT/gpu-tests.log" 2>&1
  echo "gpu_call: GPU tests exit $? after $(( $(date +%s) - start )) s" | tee -a "$OUT/gpu-tests.log"
  # each test's run dirs (what a failure needs to be read here), as one file: $OUT returns few files
  (cd /tmp/gpu-tests && find . \( -name report.json -o -name probe.json -o -name script.log \) -print0 \
    | tar czf "$OUT/gpu-tests-runs.tgz" --null -T -)
fi
timeout $(( $(left) - 30 )) python3 benchmarks/truth/run.py --gpu --repeats "${REPEATS:-2}" ${VARIANTS:+--variants "$VARIANTS"} ${ONLY:+--only "$ONLY"} \
  --advise-arg=--time-budget --advise-arg="${ADVISE_BUDGET:-150}" ${ADVISE_ARGS:+$(printf -- " --advise-arg=%s" $ADVISE_ARGS)} --work .gpu-truth/work --out-dir "$OUT/truth" > "$OUT/log" 2>&1
echo "gpu_call: truth harness exit $? after $(( $(date +%s) - start )) s" | tee -a "$OUT/log"
# analyze on each profiled run's own device trace: its step split beside the profiled run's (issue 42)
for run in .gpu-truth/work/advise/*/; do
  [ -f "$run/trace.json.gz" ] || continue
  name=$(basename "$run")
  mkdir -p "$OUT/truth/cases/$name"
  timeout 20 python3 -m advisor analyze --out "$OUT/truth/cases/$name/analyze" "$run/trace.json.gz" \
    > "$OUT/truth/cases/$name/analyze.txt" 2>&1
done
# one file: $OUT returns a few files only, and none whose name has a '+' (tf32+bf16-0-base.log)
tar czf "$OUT/truth.tgz" -C "$OUT" truth && cp "$OUT/truth/truth.md" "$OUT/" 2>/dev/null; rm -rf "$OUT/truth"
