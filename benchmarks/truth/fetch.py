"""Third-party sources at pinned commits, and the working copies built from them.

Nothing here writes inside the advise repo: sources, working copies, data and extra packages
live under the work dir (default ~/.cache/advise-truth).

A repo is read from a local bare mirror when there is one ($ADVISE_TRUTH_MIRRORS, default
/work/.mirror, laid out owner+name/repo), else cloned (bare) from GitHub into the work dir.
Only the files a case names are read out of git, blob by blob, so a mirror that lacks some
unrelated blob (pytorch/examples' wikitext-2 train.txt) does no harm.

A repo too big to mirror or clone here (pytorch/vision, 1.4 GB) is read without git: a case that
pins each of its files by git blob id (`Case.blobs`) takes them, where no git dir has the commit,
from a seed folder ($ADVISE_TRUTH_SEED, default ~/.cache/advise-truth/seed, laid out
owner+name/commit/path), else from raw.githubusercontent.com; a file whose blob id differs fails.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

from cases import LOCAL, SCRIPTS, Case, Copy, Ours, Patch, Run

STUB_RUNNER = ("import runpy, sys, types\n"
               "for name in filter(None, sys.argv[1].split(',')):\n"
               "    sys.modules.setdefault(name, types.ModuleType(name))\n"
               "sys.argv = sys.argv[2:]\n"
               "runpy.run_path(sys.argv[0], run_name='__main__')\n")


class FetchError(RuntimeError):
    """A case whose sources, data or packages could not be made ready (one line)."""


def _git(git_dir: Path, *args: str, input: bytes | None = None) -> bytes:
    proc = subprocess.run(["git", f"--git-dir={git_dir}", *args], input=input, capture_output=True)
    if proc.returncode:
        raise FetchError(f"git {' '.join(args[:3])}: {proc.stderr.decode(errors='replace').strip()[-300:]}")
    return proc.stdout


def _mirror(repo: str) -> Path:
    return Path(os.environ.get("ADVISE_TRUTH_MIRRORS", "/work/.mirror")) / repo.replace("/", "+") / "repo"


def local_git_dir(repo: str, commit: str, work: Path) -> Path | None:
    """The mirror, else our own clone, if it has `commit` (nothing is cloned)."""
    for candidate in (_mirror(repo), work / "git" / repo.replace("/", "+")):
        if candidate.is_dir() and subprocess.run(["git", f"--git-dir={candidate}", "cat-file", "-e", f"{commit}^{{commit}}"],
                                                 capture_output=True).returncode == 0:
            return candidate
    return None


def git_dir(repo: str, commit: str, work: Path) -> Path:
    """A bare git dir that has `commit`: the mirror's, else our own clone."""
    found = local_git_dir(repo, commit, work)
    if found:
        return found
    mirror, clone = _mirror(repo), work / "git" / repo.replace("/", "+")
    if not clone.is_dir():
        print(f"  cloning https://github.com/{repo} (no mirror at {mirror})", flush=True)
        proc = subprocess.run(["git", "clone", "--bare", "--quiet", f"https://github.com/{repo}", str(clone)],
                              capture_output=True, text=True)
        if proc.returncode:
            raise FetchError(f"git clone https://github.com/{repo}: {proc.stderr.strip()[-300:]}")
    _git(clone, "fetch", "--quiet", "origin", commit)  # a commit off the default branch's history
    return clone


def blob_id(data: bytes) -> str:
    """The file's git blob id (`git hash-object`)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def fetch_blobs(repo: str, commit: str, blobs: tuple[tuple[str, ...], ...], dest: Path, work: Path) -> None:
    """Write each pinned file (path, blob id[, its own commit]) of `repo` under `dest`: out of a git dir
    that has `commit`, else the seed folder, else raw.githubusercontent.com; its blob id must match."""
    gd = local_git_dir(repo, commit, work)
    seed = Path(os.environ.get("ADVISE_TRUTH_SEED", Path.home() / ".cache" / "advise-truth" / "seed")) / repo.replace("/", "+")
    for path, blob, *own in blobs:
        at = own[0] if own else commit
        if gd:
            data, where = _git(gd, "cat-file", "blob", blob), f"{gd} blob {blob[:12]}"
        elif (seed / at / path).is_file():
            data, where = (seed / at / path).read_bytes(), str(seed / at / path)
        else:
            where = f"https://raw.githubusercontent.com/{repo}/{at}/{path}"
            try:
                with urllib.request.urlopen(where, timeout=60) as r:
                    data = r.read()
            except OSError as e:
                raise FetchError(f"{where}: {e} (no git dir has {commit[:12]}, no {seed / at / path})") from None
        if blob_id(data) != blob:
            raise FetchError(f"{where}: blob {blob_id(data)[:12]}, pinned {blob[:12]} ({path})")
        (dest / path).parent.mkdir(parents=True, exist_ok=True)
        (dest / path).write_bytes(data)


def fetch(repo: str, commit: str, paths: tuple[str, ...], dest: Path, work: Path) -> None:
    """Write `paths` (files or folders) of `repo` at `commit` under `dest`, as they are in the repo
    (a `local` case: as they are under scripts/)."""
    if repo == LOCAL:
        for p in paths:
            if not (SCRIPTS / p).is_file():
                raise FetchError(f"no {SCRIPTS / p}")
            (dest / p).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(SCRIPTS / p, dest / p)
        return
    gd = git_dir(repo, commit, work)
    files = [f for f in _git(gd, "ls-tree", "-r", "--name-only", "-z", commit, "--", *paths).decode().split("\0") if f]
    missing = [p for p in paths if not any(f == p or f.startswith(p.rstrip("/") + "/") for f in files)]
    if missing:
        raise FetchError(f"{repo}@{commit[:12]} has no {', '.join(missing)}")
    for f in files:
        target = dest / f
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(_git(gd, "cat-file", "blob", f"{commit}:{f}"))


def apply(patch: Patch, root: Path) -> None:
    """Replace `patch.old` by `patch.new` in one file; the anchor must occur exactly once."""
    path = root / patch.file
    text = path.read_text()
    n = text.count(patch.old)
    if n != 1:
        raise FetchError(f"patch anchor found {n} times (want 1) in {patch.file}: {patch.old.strip()[:80]!r}")
    path.write_text(text.replace(patch.old, patch.new))


def pip_target(case: Case, work: Path) -> Path | None:
    """A folder with the case's extra packages (pip --target, --no-deps), made once."""
    if not case.pip:
        return None
    key = hashlib.sha1(json.dumps(sorted(case.pip)).encode()).hexdigest()[:10]
    target = work / "pydeps" / key
    if not (target / ".complete").exists():
        shutil.rmtree(target, ignore_errors=True)
        print(f"  pip install --target {target} {' '.join(case.pip)}", flush=True)
        proc = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
                               *case.pip], capture_output=True, text=True)
        if proc.returncode:
            raise FetchError(f"pip install {' '.join(case.pip)}: {proc.stderr.strip()[-300:]}")
        (target / ".complete").touch()
    return target


def case_env(case: Case, root: Path, work: Path) -> dict:
    """The environment every run of the case gets: unbuffered output, its PYTHONPATH."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    extra = [str(root / p) for p in case.pythonpath]
    deps = pip_target(case, work)
    if deps:
        extra.append(str(deps))
    if extra:
        env["PYTHONPATH"] = os.pathsep.join(extra + [p for p in [os.environ.get("PYTHONPATH")] if p])
    return env


def prepare_base(case: Case, work: Path, datasets: Path) -> Path:
    """The case's pristine copy, its data made and its run-at-all fixups applied (what advise runs).

    Rebuilt when the case's definition changes (a digest of it is kept beside the copy)."""
    base = work / "cases" / case.name / "base"
    stamp = base.parent / "base.stamp"
    if stamp.exists() and stamp.read_text() == case.digest() and base.is_dir():
        return base
    shutil.rmtree(base, ignore_errors=True)
    stamp.unlink(missing_ok=True)
    if case.blobs:
        fetch_blobs(case.repo, case.commit, case.blobs, base, work)
    else:
        fetch(case.repo, case.commit, case.paths, base, work)
    env = case_env(case, base, work)
    for step in case.prep:
        if isinstance(step, Ours):
            (base / step.dest).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(SCRIPTS / step.src, base / step.dest)
        elif isinstance(step, Copy):
            src = datasets / step.src
            if not src.is_file():
                raise FetchError(f"dataset file missing: {src} (set --datasets)")
            (base / step.dest).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, base / step.dest)
        elif isinstance(step, Patch):
            apply(step, base)
        elif isinstance(step, Run):
            script = base / step.script
            proc = subprocess.run([sys.executable, "-c", STUB_RUNNER, ",".join(step.stub_modules), script.name],
                                  cwd=script.parent, env=env, capture_output=True, text=True)
            if proc.returncode:
                raise FetchError(f"data prep {step.script} failed: {(proc.stdout + proc.stderr).strip()[-400:]}")
    for patch in case.fixups:
        apply(patch, base)
    stamp.write_text(case.digest())
    return base


def working_copy(base: Path, name: str, patches: tuple[Patch, ...]) -> Path:
    """A fresh copy of the base beside it, with `patches` applied (a run writes only there)."""
    dest = base.parent / name
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(base, dest, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    for patch in patches:
        apply(patch, dest)
    return dest
