"""The run dir's file names, per rank: the probe writes them, the Profile and the report read them.

Also who may write them: one run per rank at a time (:class:`RunDirLock`), starting from a
run dir cleared of the last run's files (:func:`clear_previous`).
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from .atomic import NotAFile, check_replaceable


COMPILE_CACHE = ".inductor-cache"  # a folder, per rank (RunFiles.compile_cache)


@dataclass(frozen=True)
class RunFiles:
    """Artifact names; under torchrun each rank gets its own (``trace.rank1.json.gz``)."""

    trace: str
    steps_jsonl: str
    steps_csv: str
    samples_csv: str
    probe_json: str
    log: str
    report_json: str
    report_html: str
    plan: str = "plan.json"  # one run, many arms: the parent's next plan for the child
    stop: str = "stop"  # the parent asks the arms child to finish
    hold: str = "hold"  # while it exists, the arms child starts no window: a neighbour takes the cores (probe/holds.py)
    arms_jsonl: str = "arms.jsonl"  # one line per arm window the child ran
    sources: str = "sources.json"  # the user's lines behind syncs, matmuls, copies and fetches (probe/sources.py)
    summary: str = "summary.json"  # the rank's own reduction, which rank 0 merges into the job's report (advisor.job.rank_summary)
    compile_cache: str = COMPILE_CACHE  # the compile arms' Inductor cache (module_call): scratch, see end_exchange
    quiet_steps_csv: str = "steps-quiet.csv"  # a quiet window's steps, where a neighbour disturbed the measured one (experiments/look.py)


def names(rank_suffix: str = "") -> RunFiles:
    r = rank_suffix
    return RunFiles(
        trace=f"trace{r}.json.gz",
        steps_jsonl=f"steps{r}.jsonl",
        steps_csv=f"steps{r}.csv",
        samples_csv=f"samples{r}.csv",
        probe_json=f"probe{r}.json",
        log=f"script{r}.log",
        report_json=f"report{r}.json",
        report_html=f"report{r}.html",
        plan=f"plan{r}.json",
        stop=f"stop{r}",
        hold=f"hold{r}",
        arms_jsonl=f"arms{r}.jsonl",
        sources=f"sources{r}.json",
        summary=f"summary{r}.json",
        compile_cache=f"{COMPILE_CACHE}{r}",
        quiet_steps_csv=f"steps-quiet{r}.csv",
    )


# --- one run at a time per run dir (per rank), and no file left from the last run -------------

def lock_name(rank_suffix: str = "") -> str:
    """``.advise.lock`` (``.advise.rank1.lock`` for rank 1): held by the run writing this rank's files."""
    return f".advise{rank_suffix}.lock"


class RunDirBusy(Exception):
    """Another live advise run holds this run dir (for this rank)."""

    def __init__(self, run_dir: Path, pid: int | None) -> None:
        self.run_dir, self.pid = run_dir, pid
        holder = f"advise run (pid {pid})" if pid else "advise run"
        super().__init__(f"the run dir {run_dir} is in use by another {holder}; wait for it to finish or choose "
                         "another --out")


class RunDirLock:
    """An exclusive ``flock`` on the run dir's lock file, holding the holder's pid, for one run.

    The kernel drops the lock when its holder dies, however it dies, so a lock left by a killed
    run is stale by construction and the next run takes it over. ``release`` removes the file
    while still holding the lock; ``acquire`` checks that the file it locked is the one still
    in the folder, so a run racing with that removal never holds a lock nobody else can see.
    """

    def __init__(self, run_dir: Path, rank_suffix: str = "") -> None:
        self.path = Path(run_dir) / lock_name(rank_suffix)
        self._fd: int | None = None

    def acquire(self) -> "RunDirLock":
        """Take the lock or raise :class:`RunDirBusy` naming the holder; a busy run dir is left as it was."""
        while True:
            fd = _open_lock(self.path)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                pid = _read_pid(fd)
                os.close(fd)
                raise RunDirBusy(self.path.parent, pid) from None
            except OSError:  # a file system without locks (ENOLCK): run unguarded rather than not at all
                break
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(self.path))
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)  # the holder removed the file between our open and our lock: lock the new one
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return self

    def still_held(self) -> bool:
        """The lock file this run holds is still the one in the run dir: False when the folder was
        removed or emptied under the run (a script that clears its own output folder, given as --out)."""
        if self._fd is None:
            return True
        try:
            return os.path.samestat(os.fstat(self._fd), os.stat(self.path))
        except OSError:
            return False

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            self.path.unlink(missing_ok=True)
        except OSError:
            pass  # a read-only run dir: the lock still goes with the descriptor
        os.close(fd)

    def __enter__(self) -> "RunDirLock":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _open_lock(path: Path) -> int:
    """Open (or create) the lock file itself, never what a symlink of that name points at.

    A link planted as ``.advise.lock`` would have the pid written into its target; the link is
    removed instead (it is advise's own name in advise's own folder) and a real file created.
    """
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) | os.O_NONBLOCK
    while True:
        try:
            fd = os.open(path, flags, 0o666)
        except OSError as exc:
            if exc.errno != errno.ELOOP or not path.is_symlink():
                raise
            path.unlink(missing_ok=True)
            continue
        if stat.S_ISREG(os.fstat(fd).st_mode):
            return fd
        os.close(fd)
        check_replaceable(path)  # a FIFO or a device: NotAFile, naming it
        raise NotAFile(errno.EEXIST, "not a regular file, not a file advise can replace", str(path))


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


EXPERIMENTS = "experiments"  # the experiments' run dirs, one subfolder per child run


def own_files(rank_suffix: str = "") -> list[str]:
    """The names an advise run writes for this rank, report first (see :func:`clear_previous`)."""
    f = names(rank_suffix)
    listed = [f.report_json, f.report_html, f.trace, f.steps_csv, f.quiet_steps_csv, f.samples_csv, f.probe_json, f.log, f.steps_jsonl,
              f.sources, f.summary, f".probe-config{rank_suffix}.json"]
    return listed + ([COMPARE_JSON] if not rank_suffix else [])  # compare.json has no per-rank name


COMPARE_JSON = "compare.json"  # `advise profile --baseline`'s comparison, beside the report
JOB_REPORT = ("report.json", "report.html", COMPARE_JSON)  # a job's report, whichever rank writes it


class NoRunDir(FileNotFoundError):
    """A command's argument that is neither a run dir nor a report.json (one line, for the CLI)."""


def report_json(path: str | Path) -> Path:
    """The report.json a command reads from its argument: `path` itself, or the one in the run dir
    `path` names (`advise report`, `compare` and `apply` take either)."""
    path = Path(path)
    if not path.exists():
        raise NoRunDir(f"{path}: no such run dir or report.json")
    return path / "report.json" if path.is_dir() else path


def clear_job_report(run_dir: Path) -> None:
    """Rank 0 of a job a launcher started writes the job's report (not report.rank0.json): the last one goes first."""
    for name in JOB_REPORT:
        path = Path(run_dir) / name
        if path.is_file() or path.is_symlink():
            path.unlink(missing_ok=True)


def clear_previous(run_dir: Path, rank_suffix: str = "") -> list[Path]:
    """Remove what an earlier run of this rank left in `run_dir`; return what was removed.

    Only files advise writes under their own names go (report.json first, so no report ever
    points at files already deleted), their half-written temp files, and this rank's files in
    ``experiments/*/`` (a folder left empty goes too). Anything else, a user's file, another
    rank's files, stays.
    """
    run_dir = Path(run_dir)
    removed = _remove_own(run_dir, rank_suffix)
    experiments = run_dir / EXPERIMENTS
    if experiments.is_dir() and not experiments.is_symlink():
        for sub in sorted(experiments.iterdir()):
            if sub.is_dir() and not sub.is_symlink():
                removed += _remove_own(sub, rank_suffix)
                _rmdir_if_empty(sub)
        _rmdir_if_empty(experiments)
    return removed


def _remove_own(folder: Path, rank_suffix: str) -> list[Path]:
    own = own_files(rank_suffix)
    removed = []
    for name in own:
        path = folder / name
        if path.is_file() or path.is_symlink():
            path.unlink(missing_ok=True)
            removed.append(path)
    _remove_folder(folder / names(rank_suffix).compile_cache)  # a killed run's
    temps = tuple(f".tmp-{name[:64]}" for name in own)  # advisor.run_dir.atomic's and the profiler's temp names
    for path in folder.glob(".tmp-*"):
        if path.name.startswith(temps) and (path.is_file() or path.is_symlink()):
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def _rmdir_if_empty(folder: Path) -> None:
    try:
        folder.rmdir()
    except OSError:
        pass  # not empty: someone else's files


def end_exchange(out: Path, files: RunFiles) -> None:
    """Once the child has ended: remove what it and its parent exchanged while it ran (its step and
    arm lines, the plans, the stop file) and the Inductor cache its compile arms filled (150 MB on a
    CPU, kept in the run dir so that nothing is written outside it, and not kept after)."""
    for name in (files.steps_jsonl, files.arms_jsonl, files.plan, files.stop, files.hold):
        (out / name).unlink(missing_ok=True)
    _remove_folder(out / files.compile_cache)


def _remove_folder(path: Path) -> None:
    """Remove `path` and what is in it; a symlink goes, never what it points at."""
    if path.is_symlink():
        path.unlink(missing_ok=True)
    elif path.is_dir():
        shutil.rmtree(path, ignore_errors=True)


# What a run leaves only while it writes: atomic writes' temp files (advisor.run_dir.atomic, the probe's
# trace export), the probe's config for its child, the raw step lines it turns into steps.csv, the
# compile arms' Inductor cache (a folder: first, so that the other patterns do not walk it).
SCRATCH = (f"{COMPILE_CACHE}*", ".tmp-*", ".probe-config*.json", "steps*.jsonl", ".advise-job.*")


def remove_scratch(run_dir: str | os.PathLike) -> list[str]:
    """Delete the scratch files a failed run left in `run_dir` and its experiments; never raises."""
    removed = []
    for pattern in SCRATCH:
        try:
            found = list(Path(run_dir).rglob(pattern))
        except OSError:
            continue
        for path in found:
            try:
                if path.is_file() or path.is_symlink():
                    path.unlink()
                    removed.append(str(path))
                elif path.is_dir() and path.name.startswith(COMPILE_CACHE):
                    _remove_folder(path)
                    removed.append(str(path))
            except OSError:
                pass
    return removed


# --- nothing written outside the run dir ------------------------------------------------------

class OutsideRunDir(ValueError):
    """A path read from a report (or a folder advise would write into) leaves the run dir."""


def check_own_names(run_dir: Path, rank_suffix: str = "") -> None:
    """Before a run: every name advise will write in `run_dir` is free, a file or a link (replaced,
    not followed), and ``experiments`` is a real folder; else :class:`NotAFile` or
    :class:`OutsideRunDir`, so a run that could not keep its results never starts."""
    run_dir = Path(run_dir)
    for name in own_files(rank_suffix):
        check_replaceable(run_dir / name)
    experiments = run_dir / EXPERIMENTS
    if experiments.is_symlink() or (experiments.exists() and not experiments.is_dir()):
        raise OutsideRunDir(f"{experiments} is {'a symlink' if experiments.is_symlink() else 'not a folder'}; advise "
                            "writes only inside its run dir: remove it or choose another --out")


def make_subdir(run_dir: Path, *parts: str) -> Path:
    """`run_dir`/`parts...` as real folders: created where missing, a symlink on the way refused
    (:class:`OutsideRunDir`), so a linked ``experiments`` cannot send the runs' files elsewhere."""
    path = Path(run_dir)
    for part in parts:
        path = path / part
        try:
            os.mkdir(path)
        except FileExistsError:
            pass
        if path.is_symlink() or not path.is_dir():
            raise OutsideRunDir(f"{path} is {'a symlink' if path.is_symlink() else 'not a folder'}; advise writes "
                                "only inside its run dir: remove it or choose another --out")
    return path


def resolve_inside(run_dir: str | os.PathLike, value: object, what: str = "path") -> Path:
    """The one way to resolve a path read from a report: `value` relative to `run_dir`, refused
    (:class:`OutsideRunDir`) when it is not a plain relative name that stays inside it.

    A report.json travels (CI artifacts, a teammate's upload): nothing in it may choose where advise
    writes. Absolute paths, ``..`` and symlinked folders that lead out are all refused.
    """
    if not isinstance(value, str) or not value or "\0" in value:
        raise OutsideRunDir(f"the report's {what} {value!r} is not a file name in its run dir")
    root = Path(os.path.realpath(run_dir))
    candidate = Path(value)
    resolved = Path(os.path.realpath(root / candidate.parent)) / candidate.name
    if candidate.is_absolute() or ".." in candidate.parts or (resolved.parent != root and root not in resolved.parents):
        raise OutsideRunDir(f"the report's {what} {value!r} leads outside its run dir {run_dir}; refused")
    return Path(run_dir) / candidate
