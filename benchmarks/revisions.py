"""One advise command, timed at two revisions of advise: did a change slow a command down?

Each side is the whole command as a fresh process (interpreter start, imports, the work, its
output written), the two revisions alternating (A B A B ...) so machine noise hits both alike;
the ratio comes from this one run. The earlier revision is checked out into a temporary git
worktree; the later one is this checkout. Each side runs in a scratch venv that sees this venv's
packages (a .pth line) but not its editable install of advise, with its tree on PYTHONPATH, so
the processes advise starts import the same revision. `{out}` in the command is replaced by a
fresh output folder per run.

    python benchmarks/revisions.py --before 310d075 --repeat 5 -- analyze TRACE --out {out}
    python benchmarks/revisions.py --before 310d075 --repeat 3 -- profile --out {out} examples/train_mnist_like.py
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def scratch_python(scratch: Path) -> str:
    """A venv whose site-packages lists this one's as a path: its packages, but none of its .pth
    files run (the editable install's finder would import this checkout whatever PYTHONPATH says)."""
    venv = scratch / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    mine = next(p for p in sys.path if p.endswith("site-packages") and p.startswith(sys.prefix))
    (next((venv / "lib").glob("python3*/site-packages")) / "parent.pth").write_text(mine + "\n")
    return str(venv / "bin" / "python")


def run_once(python: str, tree: Path, argv: list[str], scratch: Path, k: int) -> float:
    out = scratch / f"out-{tree.name}-{k}"
    cmd = [python, "-m", "advisor", *[a.replace("{out}", str(out)) for a in argv]]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=scratch, capture_output=True, text=True)
    took = time.perf_counter() - t0
    if proc.returncode not in (0, 1, 3, 4):  # a finding or a gate's verdict is not a failure of the command
        sys.exit(f"{tree.name}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
    shutil.rmtree(out, ignore_errors=True)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="the earlier revision (a commit, a tag)")
    parser.add_argument("--repeat", type=int, default=5, help="runs of each side, alternating (>= 3)")
    parser.add_argument("argv", nargs=argparse.REMAINDER, help="-- then advise's arguments ({out}: an output folder)")
    args = parser.parse_args()
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if not argv or args.repeat < 3:
        parser.error("give advise's arguments after --, and --repeat 3 or more")
    scratch = Path(tempfile.mkdtemp(prefix="advise-revisions-"))
    before = scratch / "before"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(before), args.before], check=True)
    try:
        python = scratch_python(scratch)
        for tree in (before, REPO):
            which = subprocess.run([python, "-c", "import advisor; print(advisor.__file__)"], capture_output=True,
                                   text=True, cwd=scratch, env={**os.environ, "PYTHONPATH": str(tree)}).stdout.strip()
            if not which.startswith(str(tree)):
                sys.exit(f"{tree} is not the advise imported there ({which or 'none'})")
        times: dict[str, list[float]] = {"before": [], "after": []}
        for k in range(args.repeat):
            for name, tree in (("before", before), ("after", REPO)) if k % 2 == 0 else (("after", REPO), ("before", before)):
                times[name].append(run_once(python, tree, argv, scratch, k))
        b, a = statistics.median(times["before"]), statistics.median(times["after"])
        print(f"advise {' '.join(argv)}")
        for name, ts in times.items():
            print(f"  {name:6s} median {statistics.median(ts):.3f} s  (min {min(ts):.3f}, max {max(ts):.3f}, n={len(ts)})")
        print(f"  after / before: {a / b:.3f}")
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(before)], check=False)
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
