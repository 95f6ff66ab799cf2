"""What torch.compile did in an arm's window: graphs compiled, recompiles and the guard that failed
for each, and where CUDA runs them, CUDA graphs recorded and skipped.

Read from torch's own process-wide records as differences over the window, so nothing is added to
a step: ``torch._dynamo.utils.guard_failures`` (at each recompile of a frame, one failed guard per
compiled entry it holds, newest first: "tensor 'x' size mismatch at index 0. expected 32, actual
17"), ``counters["stats"]["unique_graphs"]``, dynamo's compilation records (the recompile limit
reached, the reason inductor ran a graph without CUDA graphs), inductor's
``counters["inductor"]["cudagraph_skips"]``, and the CUDA graph trees' recordings, counted by a
callback torch runs around each (reduce-overhead records a graph again for each new input shape; a
recording in the timed steps is a re-record). Where dynamo was never imported, nothing is read.

A mode of the compile ladder compiled on a model another mode compiled already fails only the
other mode's backend guard: its first compile, not a recompile, so it is not counted.
"""

from __future__ import annotations

import re
import sys
from types import ModuleType
from typing import Any

from advisor.run_dir.protocol import CompileCounts

MAX_REASONS = 8  # a window's recompile reasons kept (the limit is dynamo's own default of 8 recompiles)
LIMIT_HIT = "recompile limit"  # in the failure of the compile attempt dynamo refuses past its limit
OTHER_MODE = "BACKEND_MATCH"  # the guard an entry compiled by another mode (another backend) fails
_ENTRY = re.compile(r"^!?[\d/]*?(\d+)(?:_\d+)?: ")  # a reason's entry, "0/3: ": its compile number, 3


def _dynamo_utils() -> Any:
    module = sys.modules.get("torch._dynamo.utils")
    return module if module is not None and hasattr(module, "counters") else None


def recompiles_in(reasons: list[str]) -> list[str]:
    """The recompiles in one frame's new guard failures, each said by its first failed guard that
    is not another mode's backend. A recompile lists a failure for every entry the frame holds,
    newest (highest compile number) first, so a number not below the one before starts the next."""
    events: list[list[str]] = []
    last = None
    for reason in reasons:
        m = _ENTRY.match(reason)
        number = int(m.group(1)) if m else None
        if not events or number is None or last is None or number >= last:
            events.append([])
        events[-1].append(reason)
        last = number
    out = []
    for event in events:
        # another mode's backend: named by torch 2.7's guard, an entry naming no guard at all in 2.6's
        own = [r for r in event if OTHER_MODE not in r and reason_text(r)]
        if own:
            out.append(reason_text(own[0]))
    return out


class CompileWatch:
    """:meth:`start` it when a window's switches are on, :meth:`step` it at each of the window's step
    boundaries, :meth:`read` it at the window's end."""

    def __init__(self) -> None:
        self.recordings = 0  # CUDA graph recordings so far in the process (the callback counts them)
        self._hooked = False
        self._open = False
        self._seen: dict[int, Any] = {}  # the compilation records looked at (held: their ids stay theirs)
        self._failures: dict[Any, int] = {}  # per frame's code, its guard failures looked at
        self._start: tuple[int, int, int] | None = None  # graphs, skips, recordings at the window's start
        self._timed: tuple[int, int] | None = None  # recompiles, recordings when the timed steps started
        self._recompiles: list[str] = []
        self._new: list = []  # the window's compilation records
        self._steps = self._warmup = 0

    def start(self, warmup: int) -> None:
        """A window with `warmup` untimed steps starts (its switches are on)."""
        self._open, self._warmup = True, warmup
        self._start, self._timed, self._recompiles, self._new, self._steps = None, None, [], [], 0
        utils = _dynamo_utils()
        if utils is not None:
            self._hook()
            self._seen = {id(m): m for m in self._metrics(utils)}
            self._failures = {code: len(reasons) for code, reasons in self._guard_failures(utils).items()}
            self._start = (self._graphs(utils), self._skips(utils), self.recordings)
        if warmup == 0:
            self._timed = (0, self.recordings)

    def step(self) -> None:
        """A step of the window ended."""
        self._steps += 1
        utils = self._ready()
        if self._steps == self._warmup and utils is not None:  # what follows is in the timed steps
            self._collect(utils)
            self._timed = (len(self._recompiles), self.recordings)

    def _ready(self) -> Any:
        """Dynamo's records, from the first look after the window's first compile imported it (all
        it holds then is this window's)."""
        utils = _dynamo_utils()
        if utils is not None and self._start is None:
            self._seen, self._failures, self._start = {}, {}, (0, 0, 0)
            self._hook()
        return utils

    def read(self, always: bool = False) -> CompileCounts | None:
        """The window's counts; None where torch.compile did nothing in it (`always`: zeros then, for a
        window that compiled, since a compile arm's later windows run what its first compiled)."""
        if not self._open:
            return None
        self._open = False
        utils = self._ready()
        if utils is None:
            return CompileCounts(steps=self._steps) if always else None
        self._collect(utils)
        graphs0, skips0, recordings0 = self._start or (0, 0, 0)  # _ready set it, dynamo's records being there
        recompiles, new = self._recompiles, self._new
        counts = CompileCounts(
            steps=self._steps, graphs=max(0, self._graphs(utils) - graphs0), recompiles=len(recompiles),
            recompiles_timed=len(recompiles) - self._timed[0] if self._timed else 0,  # no timed step: none
            reasons=recompiles[:MAX_REASONS],
            limit_hit=any(LIMIT_HIT in str(getattr(m, "fail_reason", "") or "") for m in new),
            cudagraph_records=self.recordings - recordings0,
            cudagraph_records_timed=self.recordings - self._timed[1] if self._timed else 0,
            cudagraph_skips=max(0, self._skips(utils) - skips0),
            cudagraph_skip_reasons=sorted({str(m.cudagraph_skip_reason) for m in new
                                           if getattr(m, "cudagraph_skip_reason", None)})[:MAX_REASONS])
        if not always and not (counts.graphs or counts.recompiles or counts.cudagraph_records or counts.cudagraph_skips
                               or counts.limit_hit):
            return None
        return counts

    def _collect(self, utils: ModuleType) -> None:
        """What is new since the last look: the compilation records, and each frame's recompiles."""
        new = [m for m in self._metrics(utils) if id(m) not in self._seen]
        self._seen.update((id(m), m) for m in new)
        self._new += new
        for code, reasons in self._guard_failures(utils).items():
            done = self._failures.get(code, 0)
            self._recompiles += recompiles_in([str(r) for r in reasons[done:]])
            self._failures[code] = len(reasons)

    def _hook(self) -> None:
        """Count the CUDA graph trees' recordings (torch runs the callbacks around each)."""
        if self._hooked:
            return
        self._hooked = True
        try:
            from torch._dynamo.callback import CallbackTrigger, callback_handler  # torch._dynamo: already imported
        except ImportError:  # an older torch: no recordings counted
            return

        def ended(args: object) -> None:
            if getattr(args, "callback_trigger", None) is CallbackTrigger.CUDAGRAPH_RECORDING:
                self.recordings += 1

        callback_handler.register_end_callback(ended)

    @staticmethod
    def _guard_failures(utils: ModuleType) -> dict:
        failures = getattr(utils, "guard_failures", None)
        return dict(failures) if isinstance(failures, dict) else {}

    @staticmethod
    def _metrics(utils: ModuleType) -> list:
        get = getattr(utils, "get_compilation_metrics", None)
        try:
            return list(get()) if get is not None else []
        except Exception:  # noqa: BLE001 - another torch's layout: the graph count stands
            return []

    @staticmethod
    def _graphs(utils: ModuleType) -> int:
        return int(utils.counters["stats"].get("unique_graphs", 0))

    @staticmethod
    def _skips(utils: ModuleType) -> int:
        return int(utils.counters["inductor"].get("cudagraph_skips", 0))


def reason_text(reason: Any) -> str:
    """A recompile reason without dynamo's compile id (``0/1: ``) and the user's stack after it, a
    local named as the user wrote it (torch 2.6's dynamo says ``tensor 'L['x']'``, 2.7's ``tensor 'x'``)."""
    text = _LOCAL.sub(r"\1", str(reason).split("\nUser stack trace:")[0].strip())
    entry = _ENTRY.match(text + " ")
    if entry is not None and entry.end() == len(text) + 1:
        return ""  # a compile id alone ("0/1:"): torch 2.6's entry for another mode's backend names no guard
    head, sep, rest = text.partition(": ")
    return rest.strip() if sep and head.replace("/", "").replace("_", "").isalnum() and "/" in head else text


_LOCAL = re.compile(r"\bL\['([A-Za-z_]\w*)'\]")  # dynamo's name of a frame's local before torch 2.7
