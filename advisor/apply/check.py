"""``advise apply --check``: does the patched script run as fast as the arm that was measured?

The arm switched the fix on inside the profiled run; the user will run the patched script from its
start. So the script's checkout (its git checkout, else its folder) is copied twice into a temp
folder, the patch is written into one copy, and the two are timed as ``advise ab`` times two
revisions (:func:`advisor.gate.ab.run_ab`: whole fresh processes, interleaved in counterbalanced
pairs, the same steps). The figure is the arm's: each run's throughput over its measured steps
(samples/s, the median step's), the rounds paired as the gate pairs them
(:func:`advisor.gate.sequential.paired`: the trimmed mean of the per-round log ratios and its 95%
interval); the gate's own fast-step figure would read a loader's prefetched queue, not its steady
pace. The fix held when that ratio is not below the arm's interval. The temp folder is removed
afterwards: nothing is written into the user's checkout.

Each copy's runs import the changed files from that copy (:func:`python_path`: the files' package
roots inside it first, a PYTHONPATH entry into the checkout moved to it), and a patched run whose
step still ran the original files is refused (:func:`_ran_the_copy`). The runs keep the user's
environment: not the gate's OMP_WAIT_POLICY=PASSIVE, which slowed minGPT's chargpt by a third and
diluted its bf16 fix from 1.66x to 1.37x.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

from ..gate import ab, sequential
from ..model import Experiment, Finding, Recommendation, Verdict
from ..overrides import describe
from ..run_dir import layout
from ..run_dir.seen import Sources
from ..units import finite
from .patch import Patched, git_root

MAX_COPY_BYTES = 2 << 30  # a checkout larger than this (datasets, checkpoints) is not copied
SKIPPED = {".git", "__pycache__", ".venv", "venv", "node_modules", ".mypy_cache", ".pytest_cache", ".ruff_cache"}


class CheckError(ValueError):
    """A check that cannot be made: one line."""


@dataclass
class Checked:
    """The patched script against the unpatched one in fresh runs, beside the arm's claim."""

    speedup: float
    ci_low: float
    ci_high: float
    rounds: int
    arm: float | None
    arm_low: float | None
    arm_high: float | None
    arm_of: str = ""  # the part of the recommendation the arm measured, where the patch writes only that part

    @property
    def held(self) -> bool:
        """Not below the arm's interval (its figure, where it has none)."""
        floor = self.arm_low if self.arm_low is not None else self.arm
        return floor is None or self.speedup >= floor


def run(patched: Patched, rec: Recommendation, *, script: str, argv: list[str], main: str, run_dir: Path,
        rounds: int, steps: int, warmup: int, on_run: Callable | None = None,
        findings: Sequence[Finding] = ()) -> Checked:
    """Time the unpatched and the patched script (`main`, run as `script` was typed, with `argv`)
    in `rounds` interleaved pairs of fresh runs of `steps` measured steps each, beside the arm of
    what the patch writes (:func:`arm_of`: the recommendation's, or its part's, from `findings`)."""
    source = _copied(patched, main)
    cwd = _where_it_ran(script, main, source)
    for path in patched.changed:
        if not _under(path, source):
            raise CheckError(f"{path} is outside {source}, the folder copied for the check")
    _fits(source, run_dir)
    tmp = Path(tempfile.mkdtemp(prefix="advise-apply-check-"))
    try:
        base, candidate = tmp / "unpatched", tmp / "patched"
        for copy in (base, candidate):
            shutil.copytree(source, copy, symlinks=True, ignore=_ignore(run_dir))
        for path, (_, after) in patched.changed.items():
            (candidate / os.path.relpath(os.path.realpath(path), source)).write_bytes(after)
        options = ab.ABOptions(steps=steps, warmup=warmup, profile_steps=0, rounds=rounds, max_rounds=rounds,
                               passive_threads=False)  # as the arm ran, and as the user runs the script
        script_rel = os.path.relpath(os.path.realpath(main), source / cwd)
        roots = import_roots(patched.changed, source)
        env_of = {"base": {"PYTHONPATH": python_path(source, base, roots)},
                  "candidate": {**patched.env, "PYTHONPATH": python_path(source, candidate, roots)}}
        args_of = {"candidate": patched.argv} if patched.argv is not None else None  # the fix said as the script's flags
        try:
            result = ab.run_ab(str(base / cwd), str(candidate / cwd), script_rel, argv, options, tmp / "rounds",
                               on_run=on_run, env_of=env_of, args_of=args_of)
        except ab.ABError as exc:
            raise CheckError(str(exc)) from None
        _ran_the_copy(result, tmp / "rounds", patched.changed, source)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    speedup, low, high, rounds = _speedup(result.rounds)
    arm, part = arm_of(patched, rec, findings)
    return Checked(speedup, low, high, rounds, finite(arm.speedup), finite(arm.ci_low), finite(arm.ci_high), part)


def import_roots(changed: Mapping[Path, object], source: Path) -> list[Path]:
    """Where each changed file is imported from, relative to `source`: the folder above its top
    package (minGPT's trainer.py: mingpt/ is a package, so the checkout's root; a src layout: src/)."""
    roots: list[Path] = []
    for path in changed:
        folder = Path(os.path.realpath(path)).parent
        while (folder / "__init__.py").is_file() and _under(folder.parent, source):
            folder = folder.parent
        rel = Path(os.path.relpath(folder, source))
        if not str(rel).startswith("..") and rel not in roots:
            roots.append(rel)
    return roots


def python_path(source: Path, copy: Path, roots: Sequence[Path]) -> str:
    """The PYTHONPATH a copy's runs import from: the changed files' import roots inside the copy
    first, then the user's own entries with `source` moved to the copy. An installed (editable)
    package or a PYTHONPATH into the checkout would otherwise import the original, unpatched files."""
    own = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    moved = [str(copy / os.path.relpath(os.path.realpath(p), source)) if _under(Path(p), source) else p for p in own]
    return os.pathsep.join(dict.fromkeys([str(copy / root) for root in roots] + moved))


def _ran_the_copy(result: ab.ABResult, out: Path, changed: Mapping[Path, object], source: Path) -> None:
    """CheckError where the patched runs' step ran a changed file from the original checkout, not
    from the patched copy (their sources.json names the files the step's lines are in): the check
    would have timed the unpatched code twice."""
    wanted = {os.path.realpath(p) for p in changed}
    for run in result.rounds:
        if run["side"] != "candidate":
            continue
        sites = Sources.load(out / run["run_dir"] / layout.names().sources) or Sources()
        files = {os.path.realpath(row.file) for rows in sites.sites.values() for row in rows}
        stale = sorted(files & wanted)
        if stale:
            raise CheckError(f"the patched runs imported {os.path.relpath(stale[0], source)} from {source}, not from the "
                             f"patched copy (an installed package or PYTHONPATH points there): the check timed the "
                             f"unpatched code twice")


def arm_of(patched: Patched, rec: Recommendation, findings: Sequence[Finding]) -> tuple[Experiment | Recommendation, str]:
    """The measurement the patched script is held to: the recommendation's where the patch writes
    all of it; where a change was refused (a new batch size, say), the verified arm of the part it
    writes, measured alone (minGPT: its bf16 arm, not bf16 with a doubled batch), and that part in
    words. The whole recommendation where no arm measured that part alone."""
    written = {part.key for part in patched.patch.parts if part.diff or (part.flags and patched.argv is not None)}
    if not written or written == set(rec.overrides or {}):
        return rec, ""
    alone = {k: v for k, v in (rec.overrides or {}).items() if k in written}
    for finding in findings:
        exp = finding.experiment
        if exp is None:
            continue
        if exp.verified and exp.overrides == alone:
            return exp, describe(alone) + " alone"
        for row in exp.sweep or []:
            if row.get("overrides") == alone and row.get("verdict") == Verdict.FASTER.value:
                return Experiment.from_dict(row), describe(alone) + " alone"
    return rec, ""


def _speedup(runs: list[dict]) -> tuple[float, float, float, int]:
    """The patched runs' throughput over the unpatched ones', paired by round: (ratio, 95% low, high, pairs)."""
    key = "samples_per_s" if all(r.get("samples_per_s") for r in runs) else "steps_per_s"
    sides = {side: {r["round"]: finite(r.get(key)) or math.nan for r in runs if r["side"] == side}
             for side in ("base", "candidate")}
    rounds = sorted(set(sides["base"]) & set(sides["candidate"]))
    paired = sequential.paired([sides["base"][i] for i in rounds], [sides["candidate"][i] for i in rounds],
                               higher_is_better=True)
    if paired is None or paired.n < 2:
        raise CheckError("the rounds gave no throughput to compare (too few steps or rounds?)")
    low, high = paired.interval()
    return math.exp(-paired.estimate()), math.exp(-high), math.exp(-low), paired.n


def _copied(patched: Patched, main: str) -> Path:
    """The folder copied for the check: the script's git checkout, else the folder the patch's
    paths start from where it holds the script (minGPT's chargpt.py imports the trainer the patch
    edits, two folders up), else the script's own folder."""
    root = Path(patched.patch.root).resolve() if patched.patch.root else None
    return git_root(main) or (root if root is not None and _under(Path(main), root) else Path(main).resolve().parent)


def _under(path: Path, folder: Path) -> bool:
    return not os.path.relpath(os.path.realpath(path), folder).startswith("..")


def _where_it_ran(script: str, main: str, source: Path) -> Path:
    """The folder the script ran from, relative to `source`: where the report's `script` (as it
    was typed) is found as the end of `main`'s path; else the script's own folder."""
    real = Path(os.path.realpath(main))
    typed = Path(script)
    cwd = real.parent
    if not typed.is_absolute() and len(typed.parts) <= len(real.parts) and real.parts[-len(typed.parts):] == typed.parts:
        cwd = Path(*real.parts[:-len(typed.parts)])
    return Path(os.path.relpath(cwd, source)) if _under(cwd, source) else Path(os.path.relpath(real.parent, source))


def _ignore(run_dir: Path) -> Callable:
    skip_dir = os.path.realpath(run_dir)

    def ignore(folder: str, names: list[str]) -> set[str]:
        return {n for n in names if n in SKIPPED or os.path.realpath(os.path.join(folder, n)) == skip_dir}
    return ignore


def _fits(source: Path, run_dir: Path) -> None:
    """CheckError for a folder too large to copy twice."""
    total, skip = 0, _ignore(run_dir)
    for folder, dirs, files in os.walk(source):
        dirs[:] = [d for d in dirs if d not in skip(folder, dirs)]
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                continue
            if total > MAX_COPY_BYTES:
                raise CheckError(f"{source} holds more than {MAX_COPY_BYTES >> 30} GiB: too much to copy twice for "
                                 "--check; apply the patch and compare with advise ab")
