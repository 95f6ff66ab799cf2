"""The job's shape, seen from the parent: which process advise starts, whose files it watches
and which ranks it accounts for. One process (a rank of a job a launcher started), ranks the
script starts itself (found by their files in the run dir), or ranks advise launches through
``torch.distributed.run`` (``--nproc-per-node``). And the run dir's per-rank files they read:
a rank's step lines, its steps.csv and its account."""

from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Iterable

import pandas as pd

from advisor.analysis import steptime
from advisor.job.rank import rank_suffix
from advisor.run_dir import layout
from advisor.run_dir.atomic import write_text_atomic
from advisor.run_dir.protocol import STEP_COLUMNS, ChildAccount, RankLines, StepLine, rank_account, read_account
from .config import ProbeConfig
from .entry import BOOTSTRAP



class OneProcess:
    """The script in one process: one rank of a job an outside launcher started (torchrun, srun,
    advise running on every rank), whose files carry that rank's suffix. The base of the shapes:
    `names` and `suffix` are the files the parent watches (rank 0's, in a job's shapes)."""

    def __init__(self, config: ProbeConfig, out: Path) -> None:
        self.config, self.out = config, out
        self.suffix = rank_suffix()
        self.names = layout.names(self.suffix)

    def stale(self) -> list[layout.RunFiles]:
        """The files a previous run may have left, removed before the child starts."""
        return [self.names]

    def command(self, cfg_path: Path) -> list[str]:
        return [sys.executable, "-c", BOOTSTRAP, str(cfg_path)]

    def child_suffix(self) -> str | None:
        """The child's files' suffix (None: each launched rank takes its own from its RANK)."""
        return rank_suffix()

    def arm_ranks(self) -> Iterable[int]:
        """The other ranks that run the arms' plans, beside the watched one."""
        return ()

    def poll(self) -> bool:
        """Between two reads of the step lines: True when the watched files changed (read from the start)."""
        return False

    def window_done(self) -> list[int] | None:
        """At the window's end: the other ranks that run the arms, when they are only known now."""
        return None

    def child_ended(self, stopped: bool, grace_s: float) -> None:
        """The script's process ended (`stopped`: by advise, or it timed out)."""

    def clean_up(self) -> None:
        """Remove the shape's own scratch files."""

    def settle(self) -> ChildAccount | None:
        """After the run: switch to the files that hold the job's account; the script's own
        process's account when it only started the ranks (else None)."""
        return None

    def accounts(self) -> list[dict]:
        """Each rank's own account (none for one process)."""
        return []


class ScriptRanks(OneProcess):
    """One process advise starts, whose script may start ranks of its own (``mp.spawn``,
    Lightning's re-run ranks, see ``spawned.py``): they write ``.rankN`` files, and once rank 0's
    step lines appear, its files are the job's."""

    def __init__(self, config: ProbeConfig, out: Path) -> None:
        super().__init__(config, out)
        self.own = self.names  # the script's own process's files
        self.spawned: list[int] = []

    def stale(self) -> list[layout.RunFiles]:
        return [self.names, *(layout.names(f".rank{r}") for r in spawned_ranks(self.out))]

    def poll(self) -> bool:
        """True once: when rank 0's step lines appear (the script started every rank: its steps are
        the job's from now on). Until the script's own process steps (it is rank 0, as under
        Lightning's re-run ranks) the ranks are looked for again: the ranks start together, and
        rank 1's file may come first (the parent then read the script's empty lines, and the job
        waited for a plan until its deadline)."""
        if self.suffix or (self.spawned and self._own_steps()):
            return False
        self.spawned = spawned_ranks(self.out)
        if self.spawned and self.spawned[0] == 0:
            self.names, self.suffix = job_names(".rank0"), ".rank0"
            return True
        return False

    def _own_steps(self) -> bool:
        try:
            return (self.out / self.own.steps_jsonl).stat().st_size > 0
        except OSError:
            return False

    def window_done(self) -> list[int] | None:
        if self.config.arms and (now := spawned_ranks(self.out)):
            return [r for r in now if r != 0]  # ranks the script started run the plans too
        return None

    def child_ended(self, stopped: bool, grace_s: float) -> None:
        if not stopped:
            await_rank_accounts(self.out, time.monotonic() + grace_s)  # ranks rank 0 did not wait for

    def clean_up(self) -> None:
        for rank_cfg in self.out.glob(".probe-config.rank*.json"):  # ranks the script re-ran as new commands
            rank_cfg.unlink(missing_ok=True)

    def settle(self) -> ChildAccount | None:
        self.spawned = spawned_ranks(self.out)
        if self.spawned and self.spawned[0] != 0:  # the script's process is rank 0
            self.spawned = [0, *self.spawned]
            return None
        if not self.spawned:
            return None
        own, out = self.own, self.out  # every rank, also those that started after rank 0
        parent = read_account(out / own.probe_json)  # the script's own process: it only started the ranks
        layout.end_exchange(out, own)
        for name in (own.probe_json, own.sources):
            (out / name).unlink(missing_ok=True)
        self.names, self.suffix = job_names(".rank0"), ".rank0"
        if (out / own.samples_csv).exists():  # the ranks ended between two polls: the samples are the job's
            os.replace(out / own.samples_csv, out / self.names.samples_csv)
        return parent

    def accounts(self) -> list[dict]:
        return [rank_account_of(self.out, r, self.names if r == 0 and self.suffix == "" else None) for r in self.spawned]


class LaunchedRanks(OneProcess):
    """``--nproc-per-node N``: N ranks under torch's own elastic launcher (``--standalone``: a free
    rendezvous port). The parent watches rank 0's files; one log and one report for the job."""

    def __init__(self, config: ProbeConfig, out: Path) -> None:
        super().__init__(config, out)
        self.suffix = ".rank0"
        self.names = job_names(self.suffix)

    def stale(self) -> list[layout.RunFiles]:
        return [self.names, *(layout.names(f".rank{r}") for r in range(self.config.nproc))]

    def command(self, cfg_path: Path) -> list[str]:
        return [sys.executable, "-m", "torch.distributed.run", "--standalone",
                f"--nproc-per-node={self.config.nproc}", "--no-python", *super().command(cfg_path)]

    def child_suffix(self) -> str | None:
        return None  # launched ranks: from their RANK

    def arm_ranks(self) -> Iterable[int]:
        return range(1, self.config.nproc) if self.config.arms else ()

    def accounts(self) -> list[dict]:
        return [rank_account_of(self.out, r) for r in range(self.config.nproc)]


def job_shape(config: ProbeConfig, out: Path) -> OneProcess:
    if config.nproc > 1:
        return LaunchedRanks(config, out)
    if rank_suffix():
        return OneProcess(config, out)
    return ScriptRanks(config, out)


def job_names(suffix: str) -> layout.RunFiles:
    """Rank 0's files, with one log and one report for the job (the launcher's and every rank's output)."""
    return replace(layout.names(suffix), log="script.log", report_json="report.json", report_html="report.html")


def spawned_ranks(out: Path) -> list[int]:
    """Ranks with step lines in `out` (``steps.rankN.jsonl``): started by the script itself."""
    found = []
    for path in out.glob("steps.rank*.jsonl"):
        digits = path.name[len("steps.rank"):-len(".jsonl")]
        if digits.isdigit():
            found.append(int(digits))
    return sorted(found)


def await_rank_accounts(out: Path, deadline: float) -> None:
    """Rank 0 ended: give the ranks the script started until `deadline` to write their accounts
    (a framework's rank 0 need not wait for the others, and the group is killed next)."""
    while time.monotonic() < deadline:
        ranks = spawned_ranks(out)
        if all((out / layout.names(f".rank{r}").probe_json).exists() for r in ranks if r):
            return
        time.sleep(0.05)


def rank_account_of(out: Path, rank: int, files: layout.RunFiles | None = None) -> dict:
    """One rank: its steps written as steps.rankN.csv, and how it ended (`files`: the rank's
    files when they are not .rankN's: the script's own process, as rank 0)."""
    files = files or layout.names(f".rank{rank}")
    probe = read_account(out / files.probe_json)
    lines = lines_of(out, files)
    lines.read()
    measured, arm_windows = lines.measured, lines.arm_windows
    if rank:  # rank 0's are written with the job's
        write_steps_csv(out / files.steps_csv, measured, probe.losses if probe else [])
        layout.end_exchange(out, files)
    try:  # when it wrote its account: the first rank to fail is the one the others waited for
        ended_at = (out / files.probe_json).stat().st_mtime
    except OSError:
        ended_at = float("inf")
    return rank_account(rank, probe, len(measured), ended_at, arm_windows)


def lines_of(out: Path, files: layout.RunFiles) -> RankLines:
    return RankLines(out / files.steps_jsonl, out / files.arms_jsonl)


def write_steps_csv(path: Path, records: list[StepLine], losses: list) -> None:
    columns = [*STEP_COLUMNS, steptime.LOSS, steptime.LOSS_FINITE]
    frame = pd.DataFrame([[getattr(r, c) for c in STEP_COLUMNS] for r in records], columns=list(STEP_COLUMNS))
    seen = [losses[i] if i < len(losses) else None for i in range(len(frame))]
    frame[steptime.LOSS] = seen
    # A NaN loss and an unseen loss look alike in CSV; this column tells them apart (read from the
    # list: in the frame's float column an unseen loss is already a NaN).
    frame[steptime.LOSS_FINITE] = pd.Series([None if v is None else bool(math.isfinite(v)) for v in seen], dtype=object)
    write_text_atomic(path, frame[columns].to_csv(index=False))
