"""advise's cross-rank figures next to Holistic Trace Analysis's on the same real multi-rank traces.

    pip install -e ".[bench]"
    python benchmarks/cross_rank_vs_hta.py [--traces DIR ...]

For each set of traces (default: the HTA pair `hta/trace_filter/sampled_rank-{0,1}` of a 128-rank
NCCL job, then each single-rank NCCL trace of shared/traces as a job of one) it prints, per rank:

- communication/computation overlap: HTA's ``get_comm_comp_overlap`` (collective kernel time
  that compute kernels overlap, over its whole parsed window) against advise's, computed the
  same way over the same window (``whole``) and as the PAR002 rule reads it (``steps``: inside
  the ProfilerStep spans, which is what the findings quote);
- compute time: HTA's ``get_temporal_breakdown`` ``compute_time`` against advise's union of
  non-collective kernels (``JobProfile.step_table``'s ``compute_s`` summed over steps);
- advise's own: collective time, its exposed part, and ``busy`` (step time less exposed
  communication: the rank's own work, which the straggler rule PAR001 compares across ranks;
  HTA has no straggler figure, its per-rank temporal breakdown is the nearest).

Measured (2026-11-23, HTA 0.5.0, pandas 3.1; `python benchmarks/cross_rank_vs_hta.py`):

    traces                                rank | overlap HTA  advise whole  advise steps | compute s HTA  advise | comm s  exposed s  busy s
    trace_filter/sampled_rank-0,-1           0 |      0.149         0.149         0.149 |        0.2103  0.2103 | 0.3962     0.3370  0.8933
    trace_filter/sampled_rank-0,-1           1 |      0.199         0.199         0.199 |        0.2720  0.2720 | 0.3791     0.3035  0.9350
    negative_queue_length_values_check       0 |      0.015         0.014         0.014 |        0.1797  0.1802 | 0.1644     0.1620  0.9120
    nccl_parser_config/nccl_data             0 |      0.151         0.156         0.156 |        0.1130  0.1157 | 0.0469     0.0396  0.6275
    df_index_resolver                        1 |      0.000         0.000         0.000 |        0.6205  0.6205 | 0.3573     0.3573  1.3804
    tracelens mi300 resnet_act_checkpoint    0 |  HTA fails (pandas int16 cast) 0.222 0.198 |  n/a  0.0129 | 0.0401     0.0322  0.0165

On the multi-rank pair both tools agree to the third decimal on overlap and to 0.1 ms on
compute. The single-rank traces differ by at most 0.005 in overlap and 2.4% in compute (HTA
keeps only kernels inside its parsed ProfilerStep window and classes a few names differently).
The pair's ranks differ by 29% in GPU compute (HTA and advise alike) but by 4.7% in busy time
(the step less exposed communication): below PAR001's 10% threshold, so no straggler is named,
while PAR002 reports 25% of the step as exposed communication (rank 1, the rank that waits least).

HTA drops the last ProfilerStep unless told otherwise; both sides are given every step here
(``include_last_profiler_step=True``). Numbers are figures to compare, not speed: see
benchmarks/analyze_speed.py for that.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
SHARED_TRACES = Path(os.environ.get("ADVISE_SHARED_TRACES", REPO.parent / "shared" / "traces"))
DEFAULT_SETS = [
    ["hta/trace_filter/sampled_rank-0.json.gz", "hta/trace_filter/sampled_rank-1.json.gz"],
    ["hta/negative_queue_length_values_check/rank0.json.gz"],
    ["hta/nccl_parser_config/nccl_data.json.gz"],
    ["hta/df_index_resolver/df_index_resolver.json.gz"],
    ["tracelens/mi300/resnet_act_checkpoint.json.gz"],
]


def advise_figures(paths: list[Path]) -> dict[int, dict]:
    from advisor.trace.intervals import merge
    from advisor.profile import Profile
    from advisor.analysis.ranks import collectives, compute_intervals, subtract

    profiles = [Profile.from_trace(p) for p in paths]
    primary = profiles[0]
    primary.ranks = profiles
    table = primary.job.step_table()
    out = {}
    for p in profiles:
        rank = int(p.env.rank or 0)
        comm = collectives(p)
        cs, ce = merge(comm["ts_us"], comm["end_us"])
        ks, ke = compute_intervals(p, comm)
        es, ee = subtract(cs, ce, ks, ke)
        comm_us, exposed_us = float((ce - cs).sum()), float((ee - es).sum())
        mine = table[table["rank"] == rank]
        out[rank] = {
            "overlap_whole": 1 - exposed_us / comm_us if comm_us else float("nan"),
            "overlap_steps": 1 - mine["exposed_comm_s"].sum() / mine["comm_s"].sum() if mine["comm_s"].sum() else float("nan"),
            "compute_s": float(mine["compute_s"].sum()),
            "comm_s": float(mine["comm_s"].sum()),
            "exposed_comm_s": float(mine["exposed_comm_s"].sum()),
            "busy_s": float(mine["busy_s"].sum()),
        }
    return out


def hta_figures(paths: list[Path]) -> dict[int, dict]:
    logging.disable(logging.WARNING)
    from hta.trace_analysis import TraceAnalysis

    with tempfile.TemporaryDirectory() as tmp:
        for p in paths:
            shutil.copy(p, Path(tmp) / p.name)
        analysis = TraceAnalysis(trace_dir=tmp, include_last_profiler_step=True)
        overlap = analysis.get_comm_comp_overlap(visualize=False)
        temporal = analysis.get_temporal_breakdown(visualize=False)
    out: dict[int, dict] = {}
    for row in overlap.to_dict("records"):
        value = row.get("comp_comm_overlap_ratio", row.get("comp_comm_overlap_pctg"))
        out.setdefault(int(row["rank"]), {})["overlap"] = float(value) / (100 if value > 1 else 1)
    for row in temporal.to_dict("records"):
        out.setdefault(int(row["rank"]), {})["compute_s"] = float(row["compute_time(us)"]) / 1e6
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", nargs="+", action="append", help="one set of rank traces (repeatable)")
    args = parser.parse_args()
    sets = [[Path(p) for p in s] for s in args.traces] if args.traces else \
        [[SHARED_TRACES / p for p in s] for s in DEFAULT_SETS]
    print(f"{'traces':58} {'rank':>4} | {'overlap HTA':>11} {'advise whole':>12} {'advise steps':>12} | "
          f"{'compute s HTA':>13} {'advise':>8} | {'comm s':>7} {'exposed s':>9}")
    for paths in sets:
        if not all(p.is_file() for p in paths):
            print(f"{paths[0]}: missing, skipped")
            continue
        ours = advise_figures(paths)
        try:
            theirs = hta_figures(paths)
        except Exception as exc:  # noqa: BLE001 - HTA's own failure on a trace is a row, not the end
            print(f"{paths[0]}: HTA failed ({type(exc).__name__}: {str(exc).splitlines()[0][:80]}); advise's figures only")
            theirs = {}
        label = paths[0].parent.name + "/" + ",".join(p.name.split(".")[0] for p in paths)
        for rank in sorted(ours):
            a, h = ours[rank], theirs.get(rank, {})
            print(f"{label[:58]:58} {rank:>4} | {h.get('overlap', float('nan')):>11.3f} {a['overlap_whole']:>12.3f} "
                  f"{a['overlap_steps']:>12.3f} | {h.get('compute_s', float('nan')):>13.4f} {a['compute_s']:>8.4f} | "
                  f"{a['comm_s']:>7.4f} {a['exposed_comm_s']:>9.4f} {a['busy_s']:>7.4f}")


if __name__ == "__main__":
    main()
