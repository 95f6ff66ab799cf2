"""Where the probe saw each thing a fix changes: the user's lines, read from a run.

The probe writes them while the script runs (:mod:`advisor.probe.sources`, ``sources.json``): the
line that built each DataLoader that fed a step and each optimizer that stepped, the top-level
module calls (the model is the one with parameters), the ``backward()`` calls, the host-to-device
copies and the script's own file; report.json's ``observed`` adds the framework and its
configuring line, and where every loader and optimizer was built (a run whose capture step was
skipped, a compiled model's, still has those).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from ..run_dir.seen import LoaderSeen, Observed, OptimizerSeen, SourceSite, Sources


@dataclass(frozen=True)
class Site:
    """A line of the user's code, and what the probe saw there."""

    file: str
    line: int
    function: str = ""
    op: str = ""  # the class built or called there (DataLoader, AdamW, Sequential), or what was called
    via: str | None = None  # a library function the object was built inside, called from this line
    params: int = 0  # model-call: the module's parameters
    count: int = 1
    non_blocking: bool = False  # h2d-copy: already asynchronous

    @property
    def short(self) -> str:
        """``train.py:42``, as the reports name a line."""
        return f"{os.path.basename(self.file)}:{self.line}"


@dataclass
class Sites:
    """Everything :mod:`advisor.apply.fixes` needs to know of the run."""

    main: str | None  # the script's own file (module-level setup goes there)
    device: str = "cpu"
    loaders: list[Site] = field(default_factory=list)  # the DataLoader calls that fed the measured steps
    optimizers: list[Site] = field(default_factory=list)
    model_calls: list[Site] = field(default_factory=list)
    backward: list[Site] = field(default_factory=list)
    copies: list[Site] = field(default_factory=list)  # host-to-device copies of the batch
    framework: dict | None = None  # report.json's observed.framework
    unseen: str = ""  # why the probe recorded no lines of the step (its capture was skipped), or ''
    unrecorded: bool = False  # the run saw loaders or optimizers but not where they were built (an older advise)

    @property
    def model(self) -> Site | None:
        """The top-level module call with the most parameters: the model's forward, not its loss."""
        called = [s for s in self.model_calls if s.params > 0]
        return max(called, key=lambda s: (s.params, s.count)) if called else None


def _rows(sources: Sources | None, category: str) -> list[SourceSite]:
    return sources.rows(category) if sources is not None else []


def _site(row: SourceSite) -> Site:
    return Site(row.file, row.line, row.function, row.op, row.via, row.params or 0, row.count, bool(row.non_blocking))


def _built(seen: Sequence[OptimizerSeen | LoaderSeen]) -> list[Site]:
    """The distinct lines report.json's observed loaders or optimizers were built at."""
    out: list[Site] = []
    for item in seen:
        at = item.built_at
        if isinstance(at, dict) and at.get("file") and isinstance(at.get("line"), int):
            site = Site(str(at["file"]), int(at["line"]), str(at.get("function") or ""), str(at.get("class") or ""),
                        at.get("via") or None)
            if site not in out:
                out.append(site)
    return out


def _distinct(sites: list[Site]) -> list[Site]:
    out: dict[tuple, Site] = {}
    for s in sites:
        out.setdefault((s.file, s.line), s)
    return list(out.values())


def read(observed: Observed, sources: Sources | None, script: str | None, search: Sequence[Path] = ()) -> Sites:
    """The sites of a run from report.json's `observed`, the probe's `sources.json` and the
    report's `script` (found in `search` where sources.json does not name the script's file)."""
    main = sources.main if sources is not None else None
    if not (main and os.path.isfile(main)):
        main = _find_script(script, search)
    loaders = [_site(r) for r in _rows(sources, "dataloader-built")] or _built(observed.dataloaders)
    optimizers = [_site(r) for r in _rows(sources, "optimizer-built")] or _built(observed.optimizers)
    skipped = sources.skipped if sources is not None else None
    unseen = ("the probe did not record the step's lines (no sources.json)" if sources is None
              else f"the probe did not record the step's lines: {skipped}" if skipped else "")
    seen: list[OptimizerSeen | LoaderSeen] = [*observed.dataloaders, *observed.optimizers]
    return Sites(main=main, device=observed.device,
                 loaders=_distinct(loaders), optimizers=_distinct(optimizers),
                 model_calls=[_site(r) for r in _rows(sources, "model-call")],
                 backward=sorted((_site(r) for r in _rows(sources, "backward")), key=lambda s: -s.count),
                 copies=_distinct([_site(r) for r in _rows(sources, "h2d-copy")]),
                 framework=observed.framework,
                 unseen=unseen, unrecorded=bool(seen) and not any(x.built_at is not None for x in seen))


def _find_script(script: str | None, search: Sequence[Path]) -> str | None:
    """The report's `script` (as it was typed: relative to where advise ran) as a file: as it is,
    else under each of `search`; None for a module (``-m pkg.train``) or a file not found."""
    if not script or script.startswith("-m "):
        return None
    for base in [Path.cwd(), *search]:
        path = Path(script) if Path(script).is_absolute() else base / script
        if path.is_file():
            return str(path.resolve())
    return None
