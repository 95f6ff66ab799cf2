"""Time a script from its own output: run it, read its per-iteration timing lines, stop it.

A run keeps the timing lines after the first `warmup` and stops the script (its whole process
group: DataLoader workers too) once it has `samples` of them, so no script needs its length
patched. The figure of a run is the median of its kept lines (a case's `per_run`: the mean, where
its loader's workers deliver batches in bursts, so most steps are instant and the median is one of
them: a 4-worker loader's median step read 0.7 ms where it paced 16 ms); a fix's speedup is the
ratio of those figures' medians over the runs (baseline / fix, times the batch scale: samples per
second), and the spread is the min-max of the ratios of the pairs (baseline i, fix i) that ran
back to back.
"""

from __future__ import annotations

import math
import os
import queue
import re
import signal
import statistics
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class RunResult:
    ms: list[float] = field(default_factory=list)      # the kept per-unit times
    losses: list[float] = field(default_factory=list)  # the loss on each kept line, where the script prints one
    wall_s: float = 0.0
    load1: float = 0.0  # the machine's 1-minute load average when the run started (2 cores: >1 means company)
    error: str | None = None
    log: str = ""

    @property
    def median_ms(self) -> float | None:
        return statistics.median(self.ms) if self.ms and not self.error else None

    @property
    def mean_ms(self) -> float | None:
        return statistics.fmean(self.ms) if self.ms and not self.error else None

    @property
    def last_loss(self) -> float | None:
        return self.losses[-1] if self.losses else None

    def to_dict(self) -> dict:
        return {"median_ms": self.median_ms, "mean_ms": self.mean_ms, "ms": self.ms, "last_loss": self.last_loss, "wall_s": round(self.wall_s, 2), "load1": self.load1,
                "error": self.error, "log": self.log}


def _stop(proc: subprocess.Popen) -> None:
    """End the run's process group (started by us with its own session), politely first."""
    for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _pump(stream, lines: queue.Queue) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


def run_once(cmd: list[str], cwd: Path, env: dict, pattern: str, warmup: int, samples: int,
             timeout_s: float, log_path: Path) -> RunResult:
    """Run `cmd` until `warmup + samples` lines match `pattern` (or it ends, or times out)."""
    regex = re.compile(pattern)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    result = RunResult(log=str(log_path), load1=os.getloadavg()[0])
    t0 = time.monotonic()
    with open(log_path, "w") as log:
        log.write(f"$ cd {cwd} && {' '.join(cmd)}\n")
        log.flush()
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                errors="replace", start_new_session=True)
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True).start()
        seen = 0
        try:
            while True:
                left = timeout_s - (time.monotonic() - t0)
                if left <= 0:
                    result.error = f"timed out after {timeout_s:.0f} s with {len(result.ms)} of {samples} samples"
                    break
                try:
                    line = lines.get(timeout=min(left, 1.0))
                except queue.Empty:
                    continue
                if line is None:
                    proc.wait()
                    result.error = f"exited {proc.returncode} with {len(result.ms)} of {samples} samples"
                    break
                log.write(line)
                m = regex.search(line)
                if not m:
                    continue
                seen += 1
                if seen <= warmup:
                    continue
                result.ms.append(float(m.group("ms")))
                loss = m.groupdict().get("loss")
                if loss is not None:
                    try:
                        result.losses.append(float(loss.rstrip(",")))
                    except ValueError:
                        pass
                if len(result.ms) >= samples:
                    break
        finally:
            _stop(proc)
        result.wall_s = time.monotonic() - t0
        log.write(f"# {len(result.ms)} samples, median {result.median_ms} ms, wall {result.wall_s:.1f} s, "
                  f"error {result.error}\n")
    return result


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def summarise(base: list[dict], fix: list[dict], scale: float = 1.0, per_run: str = "median") -> dict:
    """Speedup of the fix from interleaved runs (each a RunResult.to_dict()): ratio of medians of each
    run's figure (its `per_run`: median or mean of its lines), pair range."""
    key = f"{per_run}_ms"
    pairs = [(b.get(key), f.get(key)) for b, f in zip(base, fix) if _finite(b.get(key)) and _finite(f.get(key))]
    out: dict = {"pairs": len(pairs), "speedup": None, "pair_min": None, "pair_max": None}
    if not pairs:
        errors = [r["error"] for r in base + fix if r.get("error")]
        out["error"] = errors[0] if errors else "no runs"
        return out
    b_med = statistics.median(b for b, _ in pairs)
    f_med = statistics.median(f for _, f in pairs)
    ratios = [b / f * scale for b, f in pairs]
    out.update(speedup=b_med / f_med * scale, pair_min=min(ratios), pair_max=max(ratios), base_ms=b_med, fix_ms=f_med)
    b_loss = [r["last_loss"] for r in base if _finite(r.get("last_loss"))]
    f_loss = [r["last_loss"] for r in fix if _finite(r.get("last_loss"))]
    if b_loss and f_loss:
        out.update(base_loss=statistics.median(b_loss), fix_loss=statistics.median(f_loss))
    return out
