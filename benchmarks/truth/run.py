"""Truth harness: advise's claims on real public training scripts, held against by-hand fixes.

For each case (cases.py): the script at a pinned commit, each fix made by hand as a text patch,
timed from the script's own per-iteration output, baseline and fix interleaved as whole
processes (A B A B A B). Then `advise profile` on the unmodified script, and each claim it makes
matched (by its overrides) to the by-hand fix and judged:

  verified claim      within 0.8-1.25x of the by-hand speedup?
  by-hand win >=1.10x found and verified by advise?
  [high] finding      its own fix not slower by hand?

    python benchmarks/truth/run.py [--only NAME,...] [--repeats 3] [--skip-advise] [--skip-hand]

--skip-hand / --skip-advise reuse the last results (by-hand: cached per case, fix and commit).
Writes <work>/truth.json and <work>/truth.md (work: ~/.cache/advise-truth).
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cases import CASES, Case, Variant
from fetch import FetchError, case_env, prepare_base, working_copy
from gpu_cases import GPU_CASES, OWN_CALL
from timing import run_once, summarise

REPO = Path(__file__).resolve().parents[2]
AGREE = (0.8, 1.25)   # a verified claim / the by-hand speedup
WIN = 1.10            # a by-hand speedup advise should find and verify
FOUND_SHARE = 0.8     # ... on at least this share of the scripts where it exists
SLOWER = 0.97         # by hand slower: median ratio below this and every pair below 1
BY_NAME = {c.name: c for c in (*CASES, *GPU_CASES)}


# ----------------------------------------------------------------------------- by hand

def default_threads() -> int:
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
                         capture_output=True, text=True)
    return int(out.stdout.strip() or 0)


def is_noop(variant: Variant, threads: int) -> bool:
    """set_num_threads(N) where N is already torch's default here: the same program, 1.00x by definition."""
    return variant.overrides.get("torch_threads") == threads and len(variant.overrides) == 1


def hand_key(case: Case, variant: Variant) -> dict:
    return {"case": case.name, "variant": variant.name, "commit": case.commit, "digest": case.digest(variant)}


def measure_case(case: Case, base: Path, work: Path, args, threads: int) -> dict:
    """Each variant against the baseline, interleaved; results cached per (case, variant, commit)."""
    baseline_dir = working_copy(base, "baseline", case.timing_patches)
    samples = min(case.samples, args.samples) if args.samples else case.samples
    results = {}
    for variant in case.variants:
        if args.variants and variant.name not in args.variants:
            continue
        out = {"key": hand_key(case, variant), "overrides": variant.overrides, "numerics": variant.numerics,
               "batch_scale": variant.batch_scale, "repeats": args.repeats, "samples": samples,
               "measured_at": datetime.datetime.now().isoformat(timespec="seconds")}
        if is_noop(variant, threads):
            out["summary"] = {"speedup": 1.0, "pair_min": None, "pair_max": None, "pairs": 0,
                              "note": f"no-op: torch already runs {threads} threads here"}
        else:
            try:
                fix_dir = working_copy(base, variant.name, case.timing_patches + variant.patches)
            except FetchError as e:  # an anchor that moved: this fix fails, loudly, the others still run
                print(f"    {variant.name:10s} FAILED: {e}", flush=True)
                results[variant.name] = {**out, "summary": {"speedup": None, "error": str(e)}}
                continue
            runs: dict = {"base": [], "fix": []}
            for i in range(args.repeats):
                for kind, root, extra in (("base", baseline_dir, ()), ("fix", fix_dir, variant.args)):
                    cmd = [sys.executable, case.script, *case.argv, *extra]
                    r = run_once(cmd, root / case.cwd, case_env(case, root, work), case.timing, case.warmup, samples, case.timeout_s,
                                 work / "logs" / case.name / f"{variant.name}-{i}-{kind}.log")
                    runs[kind].append(r.to_dict())
                    print(f"    {variant.name:10s} {kind:4s} {i}: "
                          + (f"{getattr(r, case.per_run + '_ms'):9.2f} ms/{case.unit} ({case.per_run})"
                             if r.median_ms else f"FAILED {r.error} ({r.log})")
                          + f"  [{r.wall_s:.0f} s]", flush=True)
            out["runs"] = runs
            out["summary"] = summarise(runs["base"], runs["fix"], variant.batch_scale, case.per_run)
        cache = work / "hand" / case.name / f"{variant.name}.json"
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps(out, indent=1))
        results[variant.name] = out
    return results


def cached_hand(case: Case, work: Path, only: set | None) -> dict:
    results = {}
    for variant in case.variants:
        path = work / "hand" / case.name / f"{variant.name}.json"
        if (only and variant.name not in only) or not path.exists():
            continue
        data = json.loads(path.read_text())
        key, want = data.get("key", {}), hand_key(case, variant)
        if any(key.get(k) != want[k] for k in ("case", "variant", "commit")):
            continue
        if key.get("digest") != want["digest"]:
            data["stale"] = "the case changed since this was measured"
        results[variant.name] = data
    return results


# ----------------------------------------------------------------------------- advise

def corpus_args(p, advise_timeout: float) -> None:
    """The options every benchmark over the truth corpus takes: where its work and data are, how long
    one advise run may take."""
    p.add_argument("--work", type=Path, default=Path.home() / ".cache" / "advise-truth")
    p.add_argument("--datasets", type=Path, default=REPO.parent / "shared" / "datasets")
    p.add_argument("--advise-timeout", type=float, default=advise_timeout)


def run_advise(case: Case, base: Path, work: Path, args, out_dir: Path | None = None, extra: tuple[str, ...] = (),
               launcher: tuple[str, ...] = ("-m", "advisor")) -> dict:
    """`advise profile` on the unmodified script (fixups only), `extra` options first; returns its
    report.json and the wall time (`out_dir`: its run dir, default the work dir's advise/<case>;
    `launcher`: what python runs instead of `-m advisor`, benchmarks/constants.py's wrapper)."""
    out_dir = out_dir or work / "advise" / case.name
    root = working_copy(base, "advise", ())
    cmd = [sys.executable, *launcher, "profile", "--out", str(out_dir), *extra, *case.advise_args,
           *args.advise_args, case.script, *case.argv]
    log = work / "logs" / case.name / f"advise-{out_dir.name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    (out_dir / "report.json").unlink(missing_ok=True)
    t0 = time.monotonic()
    with open(log, "w") as f:
        f.write(f"$ cd {root / case.cwd} && {' '.join(cmd)}\n")
        f.flush()
        try:
            proc = subprocess.run(cmd, cwd=root / case.cwd, env=case_env(case, root, work), stdout=f, stderr=subprocess.STDOUT,
                                  timeout=args.advise_timeout)
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    wall = time.monotonic() - t0
    meta = {"wall_s": round(wall, 1), "exit": rc, "log": str(log), "cmd": cmd}
    (out_dir.parent / f"{out_dir.name}.meta.json").write_text(json.dumps(meta, indent=1))
    return meta


def read_advise(case: Case, work: Path, out_dir: Path | None = None) -> dict:
    out_dir = out_dir or work / "advise" / case.name
    meta_path = out_dir.parent / f"{out_dir.name}.meta.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    report_path = out_dir / "report.json"
    if not report_path.exists():
        return {**meta, "error": "no report.json" + (f" (exit {meta.get('exit')}, see {meta.get('log')})" if meta else "")}
    report = json.loads(report_path.read_text())
    claims = []
    for f in report.get("findings") or []:
        exp = f.get("experiment") or {}
        claims.append({"code": f.get("code"), "severity": f.get("severity"), "title": f.get("title"),
                       "overrides": exp.get("overrides") or (f.get("fix") or {}).get("overrides"),
                       "speedup": exp.get("speedup"), "ci_low": exp.get("ci_low"), "ci_high": exp.get("ci_high"),
                       "verified": bool(exp.get("verified")), "verdict": exp.get("verdict"),
                       "measured_by": exp.get("measured_by"), "reason": exp.get("reason") or exp.get("error")})
        lead = json.dumps(exp.get("overrides"), sort_keys=True)
        for row in exp.get("sweep") or []:  # a ladder's other rungs (PR001: TF32, bf16, both) are claims too
            if isinstance(row, dict) and row.get("overrides") and json.dumps(row["overrides"], sort_keys=True) != lead:
                claims.append({"code": f.get("code"), "severity": f.get("severity"), "title": f"{f.get('title')} [{row.get('label')}]",
                               "overrides": row["overrides"], "speedup": row.get("speedup"), "ci_low": row.get("ci_low"),
                               "ci_high": row.get("ci_high"), "verified": row.get("verdict") == "faster",
                               "verdict": row.get("verdict"), "measured_by": exp.get("measured_by"), "reason": row.get("reason")})
    rec = report.get("recommended")
    named = [lo.get("overrides") for lo in (report.get("experiments") or {}).get("left_out") or [] if lo.get("command")]
    mfu, energy = report.get("mfu") or {}, report.get("energy") or {}
    return {**meta, "status": report.get("status"), "claims": claims, "named": named,
            "recommended": rec and {k: rec.get(k) for k in ("fixes", "overrides", "speedup", "ci_low", "ci_high", "verified")},
            "mfu": {k: mfu.get(k) for k in ("mfu", "achieved_tflops", "peak_tflops", "dtype", "precision_basis", "peak_source")},
            "joules_per_sample": energy.get("joules_per_sample"),
            "step_time_median_s": (report.get("throughput") or {}).get("step_time_median_s")}


# ----------------------------------------------------------------------------- judging

def family(overrides: dict | None) -> str:
    return "+".join(sorted(overrides)) if overrides else ""


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


def match(claim: dict, case: Case) -> tuple[Variant | None, bool]:
    """The by-hand variant a claim's overrides stand for: the same overrides, else the same keys
    with the nearest values (num_workers=8 -> workers-2). Returns (variant, exact)."""
    ov = claim.get("overrides")
    if not ov:
        return None, False
    same = [v for v in case.variants if family(v.overrides) == family(ov)]
    for v in same:
        if v.overrides == ov:
            return v, True
    want = _flat(ov)

    def distance(v: Variant) -> float:
        have = _flat(v.overrides)
        if set(have) != set(want):
            return float("inf")
        return sum(abs(have[k] - want[k]) if isinstance(want[k], (int, float)) and isinstance(have[k], (int, float))
                   else (have[k] != want[k]) * 1e6 for k in want)

    best = min(same, key=distance, default=None)
    return (best, False) if best is not None and distance(best) < float("inf") else (None, False)


def slower(s: dict) -> bool:
    return s.get("speedup") is not None and s["speedup"] < SLOWER and (s.get("pair_max") or 0) < 1.0


def judge(case: Case, hand: dict, advise: dict) -> list[dict]:
    """One row per (by-hand variant, claim matched to it), plus claims with no by-hand variant."""
    advised = "claims" in advise  # advise's report was read (else: not run, or it failed)
    claims = advise.get("claims") or []
    by_variant: dict[str, list] = {}
    loose = []
    for c in claims:
        v, exact = match(c, case)
        if v is None:
            loose.append(c)
        else:
            by_variant.setdefault(v.name, []).append({**c, "exact": exact})
    verified_families = {family(c["overrides"]) for c in claims if c["verified"] and c.get("overrides")}
    rows = []
    for variant in case.variants:
        h = hand.get(variant.name)
        s = (h or {}).get("summary") or {}
        for c in by_variant.get(variant.name) or [None]:
            notes = []
            if c and c["verified"] and s.get("speedup") and c.get("speedup"):
                ratio = c["speedup"] / s["speedup"]
                notes.append("agrees" if AGREE[0] <= ratio <= AGREE[1] else f"OFF: {ratio:.2f}x the truth")
            elif c and c["verified"]:
                notes.append("verified, no truth")
            if s.get("speedup") and s["speedup"] >= WIN:
                unmeasured = c is not None and c.get("verdict") == "not-measured"
                notes.append("no advise report" if not advised else
                             "win found" if family(variant.overrides) in verified_families else
                             f"WIN NOT MEASURED ({c.get('reason') or 'no reason said'})" if unmeasured else "WIN MISSED")
            if c and c["severity"] == "high" and slower(s):
                notes.append("HIGH BUT SLOWER")
            rows.append({"case": case.name, "fix": variant.name, "family": family(variant.overrides), "hand": s if h else None,
                         "stale": (h or {}).get("stale"), "numerics": variant.numerics, "claim": c, "advised": advised,
                         "verdict": "; ".join(notes)})
    for c in loose:
        rows.append({"case": case.name, "fix": family(c.get("overrides")) or c["code"], "family": family(c.get("overrides")),
                     "hand": None, "claim": {**c, "exact": False}, "advised": True,
                     "verdict": "verified, no truth" if c["verified"] else ""})
    return rows


def goals(rows: list[dict]) -> list[str]:
    advised = sorted({r["case"] for r in rows if r.get("advised")})
    cases = sorted({r["case"] for r in rows})
    if not advised:
        return [f"[N/A] no advise report for any of the {len(cases)} cases: the three goals need one (run without --skip-advise)"]
    verified = [r for r in rows if r["claim"] and r["claim"]["verified"] and r["hand"] and r["hand"].get("speedup")]
    off = [r for r in verified if r["verdict"].startswith("OFF")]
    lines = [f"[{'PASS' if not off else 'FAIL'}] no verified claim outside {AGREE[0]}-{AGREE[1]}x of the truth: "
             f"{len(verified) - len(off)} of {len(verified)} verified claims with a by-hand figure agree"
             + (" (off: " + ", ".join(f"{r['case']}/{r['fix']}" for r in off) + ")" if off else "")]
    wins: dict[str, set] = {}
    found: dict[str, set] = {}
    for r in rows:
        if r.get("advised") and r["hand"] and (r["hand"].get("speedup") or 0) >= WIN:
            wins.setdefault(r["family"], set()).add(r["case"])
            if "win found" in r["verdict"]:
                found.setdefault(r["family"], set()).add(r["case"])
    parts = [f"{fam} {len(found.get(fam, ()))}/{len(cs)}" for fam, cs in sorted(wins.items())]
    ok = all(len(found.get(fam, ())) >= FOUND_SHARE * len(cs) for fam, cs in wins.items())
    missed = sorted({f"{r['case']}/{r['fix']}" for r in rows if "WIN MISSED" in r["verdict"]})
    lines.append(f"[{'PASS' if ok else 'FAIL'}] every by-hand win >={WIN:.2f}x found and verified on >={FOUND_SHARE:.0%} "
                 f"of the scripts where it exists: " + (", ".join(parts) or "no by-hand win on a script advise reported on")
                 + (f" (missed: {', '.join(missed)})" if missed else ""))
    bad = [f"{r['case']}/{r['fix']} ({r['claim']['code']})" for r in rows if "HIGH BUT SLOWER" in r["verdict"]]
    lines.append(f"[{'PASS' if not bad else 'FAIL'}] no [high] finding whose own fix measures slower by hand"
                 + (": " + ", ".join(bad) if bad else ""))
    mfus = [(r["case"], r["mfu"]) for r in rows if r.get("mfu") and r["mfu"].get("mfu") is not None]
    over = [f"{case} {m['mfu']:.0%}" for case, m in mfus if m["mfu"] > 1.0]
    if mfus:
        lines.append(f"[{'PASS' if not over else 'FAIL'}] MFU at most 100% with its peak named: "
                     + ", ".join(f"{case} {m['mfu']:.1%} of the {m['peak_tflops']:g} TFLOP/s {m['dtype']} peak"
                                 for case, m in mfus) + (f" (over: {', '.join(over)})" if over else ""))
    return lines + ([f"(advise reports for {len(advised)} of {len(cases)} cases: "
                     + ", ".join(c for c in cases if c not in advised) + " not judged)"] if len(advised) < len(cases) else [])


# ----------------------------------------------------------------------------- output

def fmt_hand(s: dict | None) -> str:
    if not s:
        return "—"
    if s.get("speedup") is None:
        return f"failed: {s.get('error', '?')}"[:60]
    if s.get("note"):
        return f"{s['speedup']:.2f}x (no-op)"
    return f"{s['speedup']:.2f}x ({s['pair_min']:.2f}-{s['pair_max']:.2f})"


def fmt_loss(r: dict) -> str:
    s = r["hand"] or {}
    if r.get("numerics") and s.get("base_loss") is not None:
        return f"{s['base_loss']:#.5g}->{s['fix_loss']:#.5g}"
    return ""


def fmt_claim(c: dict | None) -> str:
    if not c:
        return "—"
    head = f"{c['code']} [{c['severity']}]" + ("" if c.get("exact", True) else f" {json.dumps(c['overrides'])}")
    if c.get("speedup") is None:
        return f"{head} not measured" + (f" ({c['verdict']})" if c.get("verdict") else "")
    ci = f" CI {c['ci_low']:.2f}-{c['ci_high']:.2f}" if c.get("ci_low") is not None and c.get("ci_high") is not None else ""
    return f"{head} {c['speedup']:.2f}x{ci} {'verified' if c['verified'] else c.get('verdict') or 'unverified'}"


HEADER = ("case", "fix", "by hand (pairs)", "loss base->fix", "advise's claim", "verdict")


def table(rows: list[dict]) -> list[tuple]:
    return [(r["case"], r["fix"], fmt_hand(r["hand"]) + (" (stale)" if r.get("stale") else ""), fmt_loss(r),
             fmt_claim(r["claim"]), r["verdict"]) for r in rows]


def print_table(cells: list[tuple]) -> None:
    widths = [max(len(str(x)) for x in col) for col in zip(HEADER, *cells)]
    for i, line in enumerate([HEADER, *cells]):
        print("  ".join(str(x).ljust(w) for x, w in zip(line, widths)).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))


def markdown(cells: list[tuple], goal_lines: list[str], meta: dict) -> str:
    out = ["# advise truth harness", "", f"{meta['when']} · repeats {meta['repeats']} · {meta['machine']}", "",
           "| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    out += ["| " + " | ".join(str(x).replace("|", "\\|") for x in row) + " |" for row in cells]
    return "\n".join(out + ["", *[f"- {g}" for g in goal_lines], ""])


# ----------------------------------------------------------------------------- main

def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", help="comma-separated case names: " + ", ".join(BY_NAME))
    p.add_argument("--variants", help="comma-separated fixes to measure by hand (bf16, compile, fused, threads-1, ...)")
    p.add_argument("--repeats", type=int, default=3, help="baseline/fix pairs per fix (default 3)")
    p.add_argument("--samples", type=int, help="cap the timing lines kept per run (quick checks)")
    p.add_argument("--skip-hand", action="store_true", help="reuse the cached by-hand results")
    p.add_argument("--skip-advise", action="store_true", help="reuse the last advise reports, if any")
    p.add_argument("--work", type=Path, default=Path.home() / ".cache" / "advise-truth",
                   help="sources, working copies, logs, results (default ~/.cache/advise-truth)")
    p.add_argument("--datasets", type=Path, default=REPO.parent / "shared" / "datasets",
                   help="the text datasets (default ../shared/datasets next to the repo)")
    p.add_argument("--advise-arg", dest="advise_args", action="append", default=[],
                   help="an extra option for advise profile (repeatable), e.g. --advise-arg=--fresh-runs")
    p.add_argument("--advise-timeout", type=float, default=1800.0)
    p.add_argument("--gpu", action="store_true", help="the GPU cases (gpu_cases.py) instead of the CPU ones")
    p.add_argument("--prepare-only", action="store_true",
                   help="fetch and prepare the cases' sources and data in the work dir, then stop (bundle.sh)")
    p.add_argument("--out-dir", type=Path, help="also copy truth.json and truth.md there (the device's $OUT)")
    args = p.parse_args()
    args.variants = set(args.variants.split(",")) if args.variants else None
    names = args.only.split(",") if args.only else [c.name for c in (GPU_CASES if args.gpu else CASES)
                                                       if args.prepare_only or c.name not in OWN_CALL]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        p.error(f"unknown case {', '.join(unknown)} (cases: {', '.join(BY_NAME)})")
    work = args.work.expanduser().resolve()
    work.mkdir(parents=True, exist_ok=True)
    threads = default_threads() if not args.skip_hand else 0

    rows, timings = [], {}
    for name in names:
        case = BY_NAME[name]
        print(f"== {name}: {case.repo}@{case.commit[:12]} {case.cwd}/{case.script}", flush=True)
        t = timings.setdefault(name, {})
        try:
            base = prepare_base(case, work, args.datasets.resolve())
            if args.prepare_only:
                print(f"  prepared {base}", flush=True)
                continue
            if args.skip_hand:
                hand = cached_hand(case, work, args.variants)
            else:
                t0 = time.monotonic()
                hand = measure_case(case, base, work, args, threads)
                t["hand_s"] = round(time.monotonic() - t0, 1)
        except FetchError as e:
            print(f"  cannot prepare: {e}", flush=True)
            rows.append({"case": name, "fix": "-", "family": "", "hand": {"speedup": None, "error": str(e)}, "claim": None,
                         "verdict": "case failed"})
            continue
        if not args.skip_advise:
            print("  advise profile ...", flush=True)
            t["advise_s"] = run_advise(case, base, work, args)["wall_s"]
        advise = read_advise(case, work)
        if advise.get("error"):
            print(f"  advise: {advise['error']}", flush=True)
        case_rows = judge(case, hand, advise)
        if case_rows:  # the case's MFU, once (the goals read it)
            case_rows[0]["mfu"] = advise.get("mfu")
        rows += case_rows
        if advise.get("mfu"):
            m = advise["mfu"]
            print(f"  advise: step {advise.get('step_time_median_s')} s, MFU {m.get('mfu')} ({m.get('dtype')}: "
                  f"{m.get('precision_basis')}; {m.get('peak_source')}), {advise.get('joules_per_sample')} J/sample")
        if advise.get("recommended"):
            r = advise["recommended"]
            print(f"  advise recommended: {json.dumps(r['overrides'])} "
                  + (f"{r['speedup']:.2f}x {'verified' if r['verified'] else 'unverified'}" if r.get("speedup") else ""))
        for fix, why in case.not_applicable.items():
            print(f"  no by-hand {fix}: {why}")
        print(f"  [{', '.join(f'{k} {v:.0f} s' for k, v in t.items())}]", flush=True)
        if not args.prepare_only:  # a call cut short by its time limit still returns the cases it finished
            write_results(rows, names, timings, work, args)
            keep_case_files(case, work, args.out_dir)

    if args.prepare_only:
        if rows:  # bundle.sh must not leave a bundle that lacks a case's sources
            sys.exit(f"not prepared: {', '.join(r['case'] for r in rows)}")
        return
    cells = table(rows)
    print()
    print_table(cells)
    print()
    for g in write_results(rows, names, timings, work, args):
        print(g)
    print(f"\nwrote {work / 'truth.json'} and {work / 'truth.md'}")


def write_results(rows: list[dict], names: list[str], timings: dict, work: Path, args) -> list[str]:
    """truth.json and truth.md in the work dir (and --out-dir) for the rows so far; returns the goal lines."""
    cells, goal_lines = table(rows), goals(rows)
    meta = {"when": datetime.datetime.now().isoformat(timespec="seconds"), "repeats": args.repeats,
            "machine": f"{subprocess.run(['nproc'], capture_output=True, text=True).stdout.strip()} cores",
            "cases": names, "timings_s": timings}
    (work / "truth.json").write_text(json.dumps({"meta": meta, "rows": rows, "goals": goal_lines}, indent=1, default=str))
    (work / "truth.md").write_text(markdown(cells, goal_lines, meta))
    if args.out_dir:
        args.out_dir.mkdir(parents=True, exist_ok=True)
        for name in ("truth.json", "truth.md"):
            (args.out_dir / name).write_bytes((work / name).read_bytes())
    return goal_lines


def keep_case_files(case: Case, work: Path, out_dir: Path | None) -> None:
    """A case's advise report and terminal log, and its by-hand logs, into --out-dir (the device's $OUT)."""
    if not out_dir:
        return
    dest = out_dir / "cases" / case.name
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("report.json",):
        src = work / "advise" / case.name / name
        if src.is_file():
            shutil.copyfile(src, dest / name)
    logs = work / "logs" / case.name
    for src in sorted(logs.glob("*.log")) if logs.is_dir() else []:
        shutil.copyfile(src, dest / src.name)

if __name__ == "__main__":
    main()
