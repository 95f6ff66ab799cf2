"""How fast `advise analyze`'s analysis is next to Holistic Trace Analysis's, in one process.

An in-process figure (no interpreter start, imports already paid); the whole command as a
process against a whole HTA process is `benchmarks/analyze_whole.py`. Both sides do comparable
work, side by side in one process, alternating, several times:

- advise: ``Profile.from_trace`` (the trace into DataFrames) plus every rule (the analysis
  behind ``advise analyze``, without printing);
- HTA: ``TraceAnalysis`` loading the same single trace plus ``get_temporal_breakdown``.

    pip install -e ".[bench]"
    python benchmarks/analyze_speed.py [--trace PATH] [--repeat 3]

The default trace is the largest one in shared/traces (by uncompressed size). The figure is
the ratio of median wall times (HTA / advise): above 1, advise is faster.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
SHARED_TRACES = Path(os.environ.get("ADVISE_SHARED_TRACES", REPO.parent / "shared" / "traces"))


def uncompressed_size(path: Path) -> int:
    if path.suffix == ".gz":
        with open(path, "rb") as f:  # gzip keeps the size mod 2**32 in its last 4 bytes
            f.seek(-4, os.SEEK_END)
            return int.from_bytes(f.read(4), "little")
    return path.stat().st_size


def largest_trace() -> Path:
    traces = [p for p in SHARED_TRACES.rglob("*") if p.name.endswith((".json", ".json.gz"))]
    if not traces:
        raise SystemExit(f"no traces under {SHARED_TRACES} (set ADVISE_SHARED_TRACES or pass --trace)")
    return max(traces, key=uncompressed_size)


def run_advise(path: Path) -> tuple[float, int]:
    from advisor.engine import run_rules
    from advisor.profile import Profile

    t0 = time.perf_counter()
    profile = Profile.from_trace(path)
    findings, _ = run_rules(profile)
    return time.perf_counter() - t0, len(findings)


def run_hta(trace_dir: Path) -> tuple[float, int]:
    from hta.trace_analysis import TraceAnalysis

    t0 = time.perf_counter()
    analyzer = TraceAnalysis(trace_dir=str(trace_dir))
    breakdown = analyzer.get_temporal_breakdown(visualize=False)
    return time.perf_counter() - t0, len(breakdown)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=None, help="Kineto trace (default: the largest shared one).")
    parser.add_argument("--repeat", type=int, default=3, help="Runs of each side (medians are compared).")
    args = parser.parse_args()
    trace = args.trace or largest_trace()
    try:
        import hta  # noqa: F401
    except ImportError:
        raise SystemExit("Holistic Trace Analysis is not installed: pip install -e '.[bench]'") from None
    logging.getLogger("hta").setLevel(logging.ERROR)

    with tempfile.TemporaryDirectory() as tmp:
        # HTA reads every trace in a folder; give it this one alone, uncompressed name kept.
        hta_dir = Path(tmp)
        shutil.copy(trace, hta_dir / trace.name)
        advise_s, hta_s = [], []
        n_findings = n_rows = 0
        for _ in range(args.repeat):  # alternate, so machine noise hits both sides alike
            t, n_findings = run_advise(trace)
            advise_s.append(t)
            t, n_rows = run_hta(hta_dir)
            hta_s.append(t)

    a, h = statistics.median(advise_s), statistics.median(hta_s)
    size = uncompressed_size(trace)
    print(f"trace      {trace.relative_to(SHARED_TRACES) if trace.is_relative_to(SHARED_TRACES) else trace} "
          f"({trace.stat().st_size / 2**20:.1f} MiB on disk, {size / 2**20:.1f} MiB of JSON)")
    print(f"advise     {a:6.2f} s median of {args.repeat}  (load + {n_findings} findings from every rule)  "
          f"runs: {', '.join(f'{t:.2f}' for t in advise_s)}")
    print(f"HTA        {h:6.2f} s median of {args.repeat}  (load + temporal breakdown, {n_rows} rows)  "
          f"runs: {', '.join(f'{t:.2f}' for t in hta_s)}")
    print(f"ratio      advise is {h / a:.1f}x faster than HTA")


if __name__ == "__main__":
    main()
