"""report.json: the contract users and CI depend on.

``SCHEMA_VERSION`` changes only for a breaking change; within a version, fields are only
ever added. :func:`build_report` builds the typed :class:`Report` (a key no block names fails the
build), :func:`write_report` writes it with every key of its schema (null where there is no value),
and every renderer (terminal, HTML, markdown) reads that same typed report (or one read back from a
report.json by :func:`load_report`), so what a user sees and what CI compares are the same numbers.
"""

from __future__ import annotations

import copy
import datetime as _dt
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Callable, Literal, Mapping, Optional, Union

import msgspec
from msgspec import Meta

from . import __version__
from .run_dir.atomic import clean, write_json_atomic
from .model import Finding, Recommendation
from .report_blocks import (STATUSES, Artifacts, Block, Breakdown, Energy, LoopPhase, Experiments, Fingerprint, HtaBreakdown, Memory,
                            Mfu, Num, Published, Rank, Status, Step, Throughput, Tool, Utilization)
from .run_dir.seen import Env, Observed

if TYPE_CHECKING:  # the CLI imports this module (load_report): no pandas at import time
    from .profile import Profile

SCHEMA_VERSION = 1


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).astimezone().isoformat(timespec="seconds")


FROM_TRACE: Any = object()  # build_report's hta_breakdown: computed from the profile's own trace


def build_report(
    profile: Profile,
    *,
    status: str,
    script: str,
    argv: list[str],
    started_at: str,
    error: str | None = None,
    traceback: str | None = None,
    findings: list[Finding] | None = None,
    recommended: Recommendation | None = None,
    warnings: list[str] | None = None,
    artifacts: Mapping[str, object] | None = None,
    notes: list[str] | None = None,
    wall_s: float | None = None,
    total_wall_s: float | None = None,
    experiments: dict | None = None,
    ranks: list[dict] | None = None,
    fingerprint: dict | None = None,
    hta_breakdown: dict | None = FROM_TRACE,
) -> "Report":
    """The typed report of a Profile, the typed findings and how the run ended: the one place the
    result model becomes report.json. Each block is built from its analysis as its struct; a key no
    block names, or a value of the wrong type, fails here (msgspec), not in a reader's hands."""
    from .analysis import metrics, mfu, steptime, temporal  # the analysis: 300 ms (pandas); report.py is read by every command, --version too

    assert status in STATUSES, status
    steps = profile.steps
    return Report(
        tool=Tool(version=__version__), status=status, error=error, traceback=traceback, script=script, argv=list(argv),
        started_at=started_at,
        env=copy.copy(profile.env),
        step_source=profile.meta.step_source,
        steps_window=profile.meta.steps_window if profile.meta.source == "probe" else None,
        steps=_built("steps", list[Step], steptime.records(steps, Step.__struct_fields__)),
        throughput=_built("throughput", Throughput, steptime.throughput(steps)),
        breakdown=_built("breakdown", Breakdown, metrics.breakdown(steps)),
        phases=_built("phases", list[LoopPhase], steptime.loop_phases(steps)),
        memory=_built("memory", Memory, metrics.memory(profile.memory.record(), profile.samples)),
        mfu=_built("mfu", Optional[Mfu], mfu.model_flops_utilization(profile)),
        hta_breakdown=_built("hta_breakdown", Optional[HtaBreakdown],
                             temporal.hta_breakdown(profile.trace) if hta_breakdown is FROM_TRACE else hta_breakdown),
        utilization=_built("utilization", Utilization, metrics.utilization(profile.samples, steps)),
        energy=_built("energy", Optional[Energy], metrics.energy(profile.samples, steptime.timed_steps(steps)[0])),
        observed=copy.copy(profile.observed),
        # The model's own objects (copies: a later change to a finding does not reach the report),
        # written by their to_dict (as_json)
        findings=copy.deepcopy(list(findings or [])),
        recommended=copy.deepcopy(recommended),
        warnings=list(warnings or []),
        artifacts=_built("artifacts", Artifacts, artifacts or {}),
        notes=list(notes or []),
        wall_s=clean(wall_s), total_wall_s=clean(total_wall_s),
        experiments=_built("experiments", Optional[Experiments], experiments),
        ranks=_built("ranks", list[Rank], list(ranks or [])),
        fingerprint=msgspec.UNSET if fingerprint is None else _built("fingerprint", Fingerprint, fingerprint),
    )


def _built(field: str, kind: Any, value: Any) -> Any:
    """An analysis's figures (numpy scalars and NaN cleaned) as their block: a key the block does not
    name fails (:class:`Block` forbids unknown fields), so the writer cannot make keys its schema lacks."""
    try:
        return msgspec.convert(clean(value), kind, strict=False)
    except msgspec.ValidationError as exc:
        lost = re.fullmatch(r"Object contains unknown field `(.+)` - at `\$(.*)`", str(exc))
        at = f"report.{field}"
        said = f"{at}{lost[2]}.{lost[1]} is not a field of its block" if lost else f"{at}: {exc}"
        raise ValueError(f"report.json: {said} (advisor.report)") from None


def as_json(report: "Report") -> dict:
    """report.json's JSON value: every field of the typed report, nulls included (a reader finds
    each key of its schema version), as written and as `--json` prints it. The findings and the
    recommendation are the model's objects, written as their ``to_dict``."""
    out = msgspec.to_builtins(msgspec.structs.replace(report, findings=[], recommended=None))
    out["findings"] = clean([f.to_dict() for f in report.findings])
    out["recommended"] = clean(report.recommended.to_dict()) if report.recommended is not None else None
    return out


def write_report(report: "Report", path: Path) -> None:
    write_json_atomic(path, as_json(report))


class ReportError(ValueError):
    """A report.json that cannot be used: missing, not JSON, or from another schema."""


def load_report(path: str | Path, *, any_version: bool = False) -> "Report":
    """Read and check a report.json, typed; errors are one line, for the CLI to print. `any_version`
    reads a report of another schema version too (advise compare --force)."""
    path = Path(path)
    try:
        report = json.loads(path.read_text())
    except FileNotFoundError:
        raise ReportError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ReportError(f"{path}: not a report.json ({type(exc).__name__})") from None
    if not isinstance(report, dict) or "schema_version" not in report:
        raise ReportError(f"{path}: not a report.json (no schema_version)")
    if report["schema_version"] != SCHEMA_VERSION and not any_version:
        raise ReportError(f"{path}: schema_version {report['schema_version']} is not supported (this advise reads {SCHEMA_VERSION})")
    try:
        return Report.of(report)
    except ValueError as exc:  # a value of the wrong type (msgspec), a finding's unknown severity
        raise ReportContentError(f"{path}: {exc}", exc) from None


class ReportContentError(ReportError):
    """A report.json whose values do not fit its schema (`cause`: what said so)."""

    def __init__(self, message: str, cause: ValueError) -> None:
        super().__init__(message)
        self.cause = cause


# How a report shows itself in Python (a notebook's inline page, its text form), by kind ("html",
# "text"): set by the layer that renders (advisor.api installs advisor.reports.inline's), so the
# report contract imports no renderer.
SHOWN_AS: dict[str, Callable[["Report"], str]] = {}


class Report(Block):
    """report.json: one run of `advise profile` (or `advise analyze`)."""

    schema_version: Annotated[int, Published(Literal[1]), Meta(
        description="1: within a version fields are only added, never changed or removed")] = SCHEMA_VERSION
    tool: Tool = msgspec.field(default_factory=Tool)
    status: Annotated[Optional[str], Published(Status), Meta(description="how the run ended")] = None
    error: Annotated[Optional[str], Meta(description="the script's error when status is not ok")] = None
    traceback: Annotated[Optional[str], Meta(description="the script's traceback, without advise's frames")] = None
    script: Annotated[Optional[str], Published(str)] = None
    argv: Annotated[list[str], Meta(description="the script's own arguments")] = []
    started_at: Annotated[Optional[str], Published(str), Meta(description="ISO 8601, with the local offset")] = None
    env: Env = msgspec.field(default_factory=Env)
    step_source: Annotated[Optional[str], Meta(description="what marked the steps: optimizer, dataloader, backward, marker or "
                                                           "trace")] = None
    steps_window: Annotated[Optional[Literal["measured", "quiet"]], Meta(
        description="which window `steps` and the figures read on them are: the measured one (steps.csv), or a quiet "
                    "one measured after it where a neighbour disturbed it (steps-quiet.csv)")] = None
    steps: list[Step] = []
    throughput: Throughput = msgspec.field(default_factory=Throughput)
    breakdown: Breakdown = msgspec.field(default_factory=Breakdown)
    phases: Annotated[list[LoopPhase], Meta(description="the loop's evaluation passes, checkpoint saves and training loaders' "
                                                        "shutdowns in the measured window, kept out of the steps' time and "
                                                        "samples")] = []
    memory: Memory = msgspec.field(default_factory=Memory)
    mfu: Optional[Mfu] = None
    hta_breakdown: Optional[HtaBreakdown] = None
    utilization: Utilization = msgspec.field(default_factory=Utilization)
    energy: Optional[Energy] = None
    observed: Annotated[Observed, Meta(description="what the probe saw of the script: optimizers, DataLoaders, zero_grad "
                                                   "calls")] = msgspec.field(default_factory=Observed)
    # The result model's objects (advisor.model): written by their to_dict, read by their from_dict
    findings: Annotated[list[Finding], Meta(description="ranked as every renderer shows them: measured gain first")] = []
    recommended: Annotated[Optional[Recommendation], Meta(description="the winners stacked and measured together, with the "
                                                                      "code change for each")] = None
    warnings: Annotated[list[Any], Published(list[str])] = []
    artifacts: Artifacts = msgspec.field(default_factory=Artifacts)
    notes: Annotated[list[Any], Published(list[str]), Meta(description="what the probe could not do and why, said once")] = []
    wall_s: Annotated[Num, Meta(description="the profiled run")] = None
    total_wall_s: Annotated[Num, Meta(description="the whole command: run, analysis and experiments")] = None
    experiments: Optional[Experiments] = None  # none: no experiments ran
    ranks: Annotated[list[Rank], Meta(description="each rank of a job (empty for one process)")] = []
    fingerprint: Annotated[Union[Fingerprint, msgspec.UnsetType], Meta(
        description="advise profile: what makes two runs comparable (advise compare)")] = msgspec.UNSET  # advise profile's alone

    def _repr_html_(self) -> str | None:
        """Jupyter's inline form: the report's page (None, Jupyter's plain text, where none is installed)."""
        show = SHOWN_AS.get("html")
        return show(self) if show is not None else None

    def __str__(self) -> str:
        show = SHOWN_AS.get("text")
        return show(self) if show is not None else repr(self)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # IPython's plain text: the short form
        printer.text(str(self))

    @property
    def device(self) -> str:
        """The device the run used ("cpu", "cuda", ...)."""
        return self.env.device

    @classmethod
    def of(cls, block: object) -> "Report":
        """The typed report of a report.json's dict: its blocks as :meth:`Block.of` reads them, its
        findings and recommendation as the model's ``from_dict`` does (a report is returned as it is)."""
        if isinstance(block, Report):
            return block
        data = block if isinstance(block, dict) else {}
        report = super().of({k: v for k, v in data.items() if k not in _MODEL_FIELDS and k not in _SAID_FIELDS})
        report.env, report.observed = Env.read(data.get("env")), Observed.read(data.get("observed"))
        rows, rec = data.get("findings"), data.get("recommended")
        report.findings = [Finding.from_dict(d) for d in rows if isinstance(d, dict)] if isinstance(rows, list) else []
        report.recommended = Recommendation.from_dict(rec) if isinstance(rec, dict) and rec else None
        return report

    @property
    def ok(self) -> bool:
        return (self.status or "ok") == "ok"


_SAID_FIELDS = ("env", "observed")  # what the probe saw: read field by field (Said.read), a mistyped one left unknown
_MODEL_FIELDS = ("findings", "recommended")  # the result model's (advisor.model): its to_dict and from_dict, not msgspec's
