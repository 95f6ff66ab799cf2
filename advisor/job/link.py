"""The arms of a job a launcher started (torchrun, srun): one plan for every rank, over the job's channel.

Each rank's advise probes its own rank; rank 0's decides the plan. Its ArmsSession puts each
round's plan on the channel (:mod:`advisor.job.channel`: the job's rendezvous store, so ranks on
other nodes get it with no shared filesystem); every other rank's parent copies it into its own
``plan.rankN.json``, where its child waits for it, so every rank switches at the same step
index. Each rank says when its child ended a round (and with what error); rank 0 writes round
N + 1 only when every rank has ended round N, as :class:`advisor.probe.runner._JobArms` does for
the ranks advise launched itself. A rank whose arm raised stops the job's arms: rank 0 puts
``stop`` and every rank stops its child.
"""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Callable, TypeVar

import msgspec

from advisor.run_dir.protocol import Line, Plan, PlanDone, WindowDone, write_plan
from advisor.job.rank import JobRank
from advisor.job.channel import ChannelError
from advisor.run_dir.layout import RunFiles

T = TypeVar("T")  # what a channel call returns

if TYPE_CHECKING:
    from advisor.job.channel import Channel

POLL_S = 0.1


class JobLink:
    def __init__(self, channel: Channel, job: JobRank, out: Path, names: RunFiles,
                 on_window: Callable[[], dict] | None = None) -> None:
        self.channel, self.job, self.out, self.names = channel, job, Path(out), names
        self.leader = job.rank == 0
        self.others = [r for r in range(job.world_size) if r != job.rank]
        self.on_window = on_window  # a follower's window summary, for rank 0's rules (the merged view)
        self.notes: list[str] = []
        self.failed: str | None = None  # rank 0: a rank whose arm raised
        self.stop_asked = False  # another rank: rank 0 stopped the job's arms
        self._want: int | None = None  # a follower: the round whose plan its child waits for
        self._ended: dict[int, set[int]] = {r: set() for r in self.others}
        self._next_poll = 0.0
        self._broken = False
        self._windowed = False  # this rank's window is over: rank 0 may plan, or stop the arms

    def _call(self, what: Callable[[], T]) -> T | None:
        """A channel call; a channel that broke ends the arms here (the child then finishes), said once."""
        if self._broken:
            return None
        try:
            return what()
        except ChannelError as exc:
            self._broken = True
            self.notes.append(f"the in-process experiments ended: {exc}")
            if not self.leader:
                self._write_plan(Plan(round=self._want or 0))
            else:
                self.failed = self.failed or str(exc)
            return None

    # this rank's child --------------------------------------------------------------------------
    def line(self, line: Line) -> None:
        """A line of this rank's own child (window-done, plan-done)."""
        if isinstance(line, WindowDone) and not self.leader:
            if self.on_window is not None:
                try:
                    summary = self.on_window()
                except Exception as exc:  # noqa: BLE001 - rank 0 then decides without this rank's window
                    summary = {"rank": self.job.rank, "error": f"{type(exc).__name__}: {exc}"}
                self._call(lambda: self.channel.put(f"window/{self.job.rank}", summary))
            self._want, self._windowed = 0, True
        elif isinstance(line, PlanDone):
            round_no = line.round
            self._call(lambda: self.channel.put(f"ended/{self.job.rank}/{round_no}", {"error": line.error}))
            if not self.leader and not line.error:
                self._want = round_no + 1

    def _write_plan(self, plan: Plan) -> None:
        write_plan(self.out / self.names.plan, plan)
        self._want = None

    # each pass of the runner's loop -------------------------------------------------------------
    def poll(self) -> None:
        now = time.monotonic()
        if now < self._next_poll or self._broken:
            return
        self._next_poll = now + POLL_S
        if self.leader or self._want is None and not self._windowed:
            return  # nothing comes from rank 0 before this rank's window (nor is its channel chosen yet)
        if self._want is not None:
            plan = self._call(lambda: self.channel.get(f"plan/{self._want}"))
            if plan is not None:
                self._write_plan(msgspec.convert(plan, Plan))
        if not self.stop_asked and self._call(lambda: self.channel.get("stop")) is not None:
            self.stop_asked = True

    # rank 0 ------------------------------------------------------------------------------------
    def publish_plan(self, plan: Plan) -> None:
        """Rank 0's ArmsSession decided round N's plan: every rank runs it."""
        self._call(lambda: self.channel.put(f"plan/{plan.round}", msgspec.to_builtins(plan)))

    def ended(self, round_no: int) -> bool:
        """Every other rank has ended round `round_no` (-1: the window, which needs no wait)."""
        if round_no < 0 or self._broken:
            return True
        for r in self.others:
            if round_no not in self._ended[r]:
                value = self._call(partial(self.channel.get, f"ended/{r}/{round_no}"))
                if value is None:
                    return self._broken
                self._ended[r].add(round_no)
                if value.get("error"):
                    self.failed = self.failed or f"rank {r}: {value['error']}"
        return True

    def stop_job(self) -> None:
        self._call(lambda: self.channel.put("stop", {}))
